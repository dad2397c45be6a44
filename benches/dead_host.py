"""A host killed outright: how long from its SIGKILL until its jobs run on another host.

Per run, on a fresh database, two ``awa-fast serve`` supervisors serve one queue with the
runner's default settings. The first, the leader, has its capacity taken by jobs that
hold until released, and is up longer than the leader waits before a free lock counts.
The second (two workers, each running one job and holding ``--prefetch`` more) takes a
batch of jobs that hang there. Once its heartbeat has marked the held ones, its whole
process group is SIGKILLed and the leader's capacity released. Printed per run, by
Postgres' clock from the kill: when the first and the last of the killed host's jobs
began on the other host, the jobs it held unstarted (given back) apart from those it ran
(rescued, retried after the default backoff); then the median of each over the runs.

    PYTHONPATH=. python benches/dead_host.py URL [--runs 5] [--prefetch 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

import awa_fast
from awa_fast.bench.measure import fresh_database
from awa_fast.maintenance.rescuer import SETTLE

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "dead_host"
HANG = "AWA_FAST_BENCH_HANG"  # set in the killed host's environment: its jobs hang
client = awa_fast.AsyncClient("postgresql:///given-by-serve")  # serve's --database-url


@dataclass
class Work:
    n: int


@dataclass
class Hold:
    n: int


@client.task(Work, queue=QUEUE)
async def work(job: awa_fast.Job[Work]) -> None:
    """Note the run, then hang where HANG is set."""
    async with await psycopg.AsyncConnection.connect(client.dsn, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO runs (job_id, attempt, pid) VALUES (%s, %s, %s)",
            (job.id, job.attempt, os.getpid()),
        )
    if os.environ.get(HANG):
        await asyncio.sleep(3600)


@client.task(Hold, queue=QUEUE)
async def hold(job: awa_fast.Job[Hold]) -> None:
    """Take a unit of the leader's capacity until the table ``released`` has a row."""
    async with await psycopg.AsyncConnection.connect(client.dsn, autocommit=True) as conn:
        while True:
            cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM released)")
            if await cur.fetchone() == (True,):
                return
            await asyncio.sleep(0.02)


def _serve(
    url: str, logs: Path, name: str, *args: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    log = (logs / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "awa_fast.cli", "serve", "benches.dead_host:client",
         "--database-url", url, "--queue", f"{QUEUE}={args[0]}", *args[1:]],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, killed whole
    )  # fmt: skip


def _one(url: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]


def _until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def one_run(url: str, *, prefetch: int, logs: Path) -> dict[str, timedelta]:
    """Seconds from the SIGKILL until the killed host's jobs began elsewhere."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (job_id bigint, attempt int, pid int,"
                     " at timestamptz DEFAULT clock_timestamp())")  # fmt: skip
        conn.execute("CREATE TABLE released ()")
    held = 2 * (1 + prefetch)  # the killed host's two workers, each one running
    # No standby claim there: a job started on one while the holds take the capacity
    # would be given back, and wait for the killed host's next claim.
    leader = _serve(
        url, logs, "leader", str(held), "--processes", "1", "--prefetch", "0", "--no-standby",
        env={},
    )  # fmt: skip
    doomed: subprocess.Popen[bytes] | None = None
    try:
        _until(lambda: _one(url, "SELECT count(*) FROM awa_fast.hosts") == 1, "the leader")
        with awa_fast.Client(url) as producer:
            producer.insert_many([Hold(n) for n in range(held)], queue=QUEUE)
            running = "SELECT count(*) FROM awa_fast.jobs_hot WHERE state = 'running'"
            _until(lambda: _one(url, running) == held, "the leader's capacity taken")
            doomed = _serve(url, logs, "doomed", "2", "--processes", "2", "--prefetch",
                            str(prefetch), env={HANG: "1"})  # fmt: skip
            _until(lambda: _one(url, "SELECT count(*) FROM awa_fast.hosts") == 2, "the second")
            ids = producer.insert_many([Work(n) for n in range(held)], queue=QUEUE)
        marked = (
            "SELECT count(*) FROM awa_fast.jobs_hot WHERE id = ANY(%s) AND held_lease = run_lease"
        )
        _until(lambda: _one(url, marked, ids) == 2 * prefetch, "the held jobs marked")
        settled = (
            "SELECT min(started_at) < now() - %s * interval '1 second'"
            " AND pg_postmaster_start_time() < now() - %s * interval '1 second'"
            " FROM awa_fast.hosts"
        )
        _until(lambda: bool(_one(url, settled, SETTLE + 1, SETTLE + 1)), "the leader settled")
        killed_at = _one(url, "SELECT clock_timestamp()")
        os.killpg(doomed.pid, signal.SIGKILL)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO released DEFAULT VALUES")
        _until(lambda: _one(url, "SELECT count(*) FROM runs WHERE at > %s", killed_at) == held,
               "the jobs run elsewhere")  # fmt: skip
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT attempt, min(at) - %s, max(at) - %s FROM runs WHERE at > %s"
                " GROUP BY attempt",
                (killed_at, killed_at, killed_at),
            ).fetchall()
        by_attempt = {attempt: (first, last) for attempt, first, last in rows}
        return {
            "held, first": by_attempt[1][0],
            "held, last": by_attempt[1][1],
            "running, first": by_attempt[2][0],
            "running, last": by_attempt[2][1],
        }
    finally:
        for proc in (doomed, leader):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a Postgres server URL (a fresh database per run)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--prefetch", type=int, default=2, help="jobs each worker holds")
    parser.add_argument("--logs", type=Path, default=ROOT / "benches/results/dead-host-logs")
    args = parser.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)
    seen: dict[str, list[float]] = {}
    for run in range(1, args.runs + 1):
        with fresh_database(args.url) as url:
            figures = one_run(url, prefetch=args.prefetch, logs=args.logs)
        print(
            f"run {run}: " + ", ".join(f"{k} {v.total_seconds():.2f} s" for k, v in figures.items())
        )
        for key, value in figures.items():
            seen.setdefault(key, []).append(value.total_seconds())
    print("median: " + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in seen.items()))


if __name__ == "__main__":
    main()
