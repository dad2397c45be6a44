"""Many hosts on one Postgres: 1, 2, 4 and 8 ``awa-fast serve`` supervisors, each its own
process group with one worker, serving one queue, drain one backlog together.

Per configuration, on a fresh database: the supervisors start, register and listen; one
``insert_many`` commits the backlog; they drain it. Printed per configuration:

- jobs/s, from the backlog's commit to the last job's ``finalized_at`` (Postgres' clock);
- claim conflicts: claim statements (``awa_fast_claims_total``) and jobs a claim, with the
  claims beyond what a lone host needed for as many jobs (a claim that came back short, or
  empty, because another host held the rows); rolled-back transactions and deadlocks
  (``pg_stat_database``); and how many samples found a backend waiting on a lock;
- connections each host holds (``pg_stat_activity`` by ``application_name``, attributed
  to a host by the client port its process group owns), idle and at the drain's peak;
- each host's share of the work: jobs it claimed (``awa_fast_jobs_claimed_total`` from its
  ``/metrics``) against an even share.

Linux only (process groups and sockets are read from /proc), with Postgres on this machine
or elsewhere.

    PYTHONPATH=. python benches/many_hosts.py URL --hosts 1 2 4 8 --jobs 20000
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

import awa_fast
from awa_fast.bench.measure import fresh_database
from awa_fast.localpg import free_port
from awa_fast.producer_sync import insert_many

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "many_hosts"
client = awa_fast.AsyncClient("postgresql:///given-by-serve")  # serve's --database-url


@dataclass
class Hop:
    n: int


@client.task(Hop, queue=QUEUE)
async def hop(job: awa_fast.Job[Hop]) -> None:
    """No work: the hosts contend for claims and commits, not for the handlers' CPU."""


@dataclass
class Host:
    """One ``awa-fast serve`` supervisor, leader of its own process group."""

    proc: subprocess.Popen[bytes]
    metrics_port: int

    def pids(self) -> set[int]:
        """The supervisor and its worker: every process of its group."""
        return {pid for pid, group in _process_groups().items() if group == self.proc.pid}

    def scrape(self) -> Counter[str]:
        """This host's counters, by metric name (the queue's, for labelled ones)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        counters: Counter[str] = Counter()
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                counters[name.partition("{")[0]] += int(float(value))
        return counters


@dataclass
class Drain:
    """What one configuration measured."""

    hosts: int
    jobs: int
    seconds: float
    claimed: list[float]  # by each host while it drained
    claims: list[float]
    idle: list[Counter[str]]  # connections by application name, per host
    peak: list[Counter[str]]
    lock_samples: int = 0  # samples with a backend waiting on a lock
    samples: int = 0
    waits: Counter[str] = field(default_factory=Counter)  # "part: lock" waited on, sampled
    stats: dict[str, int] = field(default_factory=dict)  # pg_stat_database deltas


def _process_groups() -> dict[int, int]:
    groups = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended meanwhile
            groups[int(entry.name)] = int(stat.rpartition(")")[2].split()[2])
    return groups


def _socket_ports() -> dict[int, int]:
    """Local TCP port by socket inode, for every socket on this machine."""
    ports = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            ports[int(fields[9])] = int(fields[1].rpartition(":")[2], 16)
    return ports


def _ports_of(pids: set[int]) -> set[int]:
    """The local ports of the TCP sockets ``pids`` hold."""
    by_inode = _socket_ports()
    ports = set()
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        for link in links:
            if link.startswith("socket:["):
                port = by_inode.get(int(link[8:-1]))
                if port is not None:
                    ports.add(port)
    return ports


def connections(conn: psycopg.Connection[Any], hosts: list[Host]) -> list[Counter[str]]:
    """Each host's sessions on this database, counted by application name."""
    rows = conn.execute(
        "SELECT client_port, application_name FROM pg_stat_activity"
        " WHERE datname = current_database() AND backend_type = 'client backend'"
        " AND pid <> pg_backend_pid()"
    ).fetchall()
    owner = {port: n for n, host in enumerate(hosts) for port in _ports_of(host.pids())}
    held: list[Counter[str]] = [Counter() for _ in hosts]
    for port, name in rows:
        if port in owner:
            held[owner[port]][name] += 1
    return held


def start_hosts(url: str, count: int, concurrency: int, logs: Path) -> list[Host]:
    hosts = []
    for n in range(count):
        port = free_port()
        command = [
            sys.executable, "-m", "awa_fast.cli", "serve", "benches.many_hosts:client",
            "--database-url", url, "--processes", "1", "--queue", f"{QUEUE}={concurrency}",
            "--metrics-port", str(port), "--log-level", "warning",
        ]  # fmt: skip
        log = (logs / f"host-{count}-{n}.log").open("wb")
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own, as on a host of its own
        )
        hosts.append(Host(proc, port))
    return hosts


def stop_hosts(hosts: list[Host]) -> None:
    for host in hosts:
        if host.proc.poll() is None:
            os.killpg(host.proc.pid, signal.SIGTERM)
    for host in hosts:
        try:
            host.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(host.proc.pid, signal.SIGKILL)
            host.proc.wait()


def wait_ready(conn: psycopg.Connection[Any], hosts: list[Host], timeout: float = 60) -> None:
    """Until every host has registered and listens: all of them hear the backlog's NOTIFY."""
    query = (
        "SELECT (SELECT count(*) FROM awa_fast.hosts),"
        " (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        "  AND application_name = 'awa-fast listener' AND query LIKE 'LISTEN%')"
    )
    deadline = time.monotonic() + timeout
    while conn.execute(query).fetchone() != (len(hosts), len(hosts)):
        ended = [host.proc.args for host in hosts if host.proc.poll() is not None]
        if ended or time.monotonic() > deadline:
            raise RuntimeError(f"hosts not ready (ended: {ended})")
        time.sleep(0.05)


def _stats(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """This database's commits, rollbacks and deadlocks so far."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    cur = conn.cursor(row_factory=dict_row).execute(
        "SELECT xact_commit AS commits, xact_rollback AS rollbacks, deadlocks"
        " FROM pg_stat_database WHERE datname = current_database()"
    )
    return cur.fetchone() or {}


def drain(server_url: str, *, hosts: int, jobs: int, concurrency: int, logs: Path) -> Drain:
    """One configuration on a fresh database: ``hosts`` supervisors drain ``jobs`` jobs."""
    with fresh_database(server_url) as url, psycopg.connect(url, autocommit=True) as conn:
        running = start_hosts(url, hosts, concurrency, logs)
        try:
            wait_ready(conn, running)
            idle = connections(conn, running)
            before, counted = _stats(conn), [host.scrape() for host in running]
            with conn.transaction():
                insert_many(conn, [Hop(n) for n in range(jobs)], queue=QUEUE)
            began = conn.execute("SELECT clock_timestamp()").fetchone()
            peak, waits, samples = _watch(conn, running, jobs)
            ended = conn.execute("SELECT max(finalized_at) FROM awa_fast.jobs_done").fetchone()
            after = _stats(conn)
            counters = [host.scrape() - c for host, c in zip(running, counted, strict=True)]
        finally:
            stop_hosts(running)
    assert began is not None and ended is not None
    return Drain(
        hosts=hosts,
        jobs=jobs,
        seconds=(ended[0] - began[0]).total_seconds(),
        claimed=[c["awa_fast_jobs_claimed_total"] for c in counters],
        claims=[c["awa_fast_claims_total"] for c in counters],
        idle=idle,
        peak=peak,
        lock_samples=waits.pop("", 0),
        samples=samples,
        waits=waits,
        stats={key: after[key] - before[key] for key in after},
    )


def _watch(
    conn: psycopg.Connection[Any], hosts: list[Host], jobs: int
) -> tuple[list[Counter[str]], Counter[str], int]:
    """Sample until every job completed: the most connections each host held at once,
    and the locks backends of this database waited on ("part: lock"), with the samples
    that found any under ""."""
    peak: list[Counter[str]] = [Counter() for _ in hosts]
    waits: Counter[str] = Counter()
    samples = 0
    count = "SELECT count(*) FROM awa_fast.jobs_done WHERE state = 'completed'"
    waiting = (
        "SELECT application_name || ': ' || wait_event FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    while (conn.execute(count).fetchone() or (0,))[0] < jobs:
        held = connections(conn, hosts)
        peak = [max(p, h, key=lambda c: c.total()) for p, h in zip(peak, held, strict=True)]
        found = [wait for (wait,) in conn.execute(waiting).fetchall()]
        waits.update(found + [""] * bool(found))
        samples += 1
        time.sleep(0.1)
    return peak, waits, samples


def _spread(values: list[float]) -> str:
    """Each value against an even share of their sum, as the lowest-highest range."""
    even = sum(values) / len(values)
    return f"{min(values) / even:.2f}-{max(values) / even:.2f}"


def _held(counts: list[Counter[str]]) -> str:
    totals = sorted(c.total() for c in counts)
    return f"{totals[0]}" if totals[0] == totals[-1] else f"{totals[0]}-{totals[-1]}"


def report(drains: list[Drain]) -> None:
    alone = drains[0].jobs / sum(drains[0].claims) if drains[0].hosts == 1 else None
    print(
        "| hosts | jobs/s | claims | jobs/claim | extra claims | rollbacks | deadlocks "
        "| lock-wait samples | commits/job | conns/host idle | conns/host peak "
        "| claimed/even share |"
    )
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for d in drains:
        claims = sum(d.claims)
        extra = f"{claims / (sum(d.claimed) / alone) - 1:+.0%}" if alone else "-"
        print(
            f"| {d.hosts} | {d.jobs / d.seconds:,.0f} | {claims:,.0f} "
            f"| {sum(d.claimed) / claims:.1f} | {extra} | {d.stats['rollbacks']} "
            f"| {d.stats['deadlocks']} | {d.lock_samples}/{d.samples} "
            f"| {d.stats['commits'] / d.jobs:.4f} | {_held(d.idle)} | {_held(d.peak)} "
            f"| {_spread(d.claimed)} |"
        )
    print()
    for d in drains:
        names = sorted({name for c in d.peak for name in c})
        kinds = ", ".join(f"{name} {'/'.join(str(c[name]) for c in d.peak)}" for name in names)
        claimed = "/".join(f"{n:,.0f}" for n in d.claimed)
        waits = ", ".join(f"{wait} x{n}" for wait, n in d.waits.most_common()) or "none"
        print(f"{d.hosts} hosts: claimed {claimed}; connections at the peak: {kinds}")
        print(f"{d.hosts} hosts: lock waits sampled: {waits}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server_url", help="Postgres server URL (a database per run is made)")
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--jobs", type=int, default=20_000, help="the backlog")
    parser.add_argument("--concurrency", type=int, default=100, help="the queue's, per host")
    parser.add_argument(
        "--logs", default="benches/results/many-hosts-logs", help="folder for serve's logs"
    )
    args = parser.parse_args(argv)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    drains = []
    for hosts in args.hosts:
        drains.append(
            drain(
                args.server_url,
                hosts=hosts,
                jobs=args.jobs,
                concurrency=args.concurrency,
                logs=logs,
            )
        )
        print(f"{hosts} hosts: {args.jobs / drains[-1].seconds:,.0f} jobs/s", flush=True)
    report(drains)


if __name__ == "__main__":
    main()
