"""Where the CPU goes while the pool sustains a rate beside its producer: one ``sustained``
run, with every process's CPU time read from /proc at two moments inside the offering
window. Prints CPU microseconds per completed job for each part (supervisor, worker
processes, the producer process, each Postgres backend by its application name or last
statement, Postgres' own processes), then the total. With ``--drain N``, the same for a
drain of N pre-inserted jobs and no producer, read from the moment the pool's claimer
connects to the last moment it is seen, every 50 ms.

Linux only (it reads /proc). The database server must run on this machine for its
processes to be counted.

    PYTHONPATH=. python benches/cpu_split.py URL --rate 33000
    PYTHONPATH=. python benches/cpu_split.py URL --rate 36000 --processes 0
    PYTHONPATH=. python benches/cpu_split.py URL --drain 200000
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg

from awa_fast.bench.latency import sustained
from awa_fast.bench.measure import fresh_database
from awa_fast.bench.run import run_as_served
from awa_fast.bench.throughput import drain
from awa_fast.db.dsn import database_of

_TICKS = os.sysconf("SC_CLK_TCK")

CpuSnapshot = dict[int, tuple[float, int, str]]  # pid -> (CPU seconds, parent pid, cmdline)


def snapshot() -> CpuSnapshot:
    """Every process's CPU seconds (user + system), parent and command line."""
    seen: CpuSnapshot = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat, open(f"/proc/{entry}/cmdline") as cmd:
                fields = stat.read().rsplit(")", 1)[1].split()
                cmdline = cmd.read().replace("\0", " ").strip()
        except OSError:  # ended meanwhile
            continue
        seen[int(entry)] = ((int(fields[11]) + int(fields[12])) / _TICKS, int(fields[1]), cmdline)
    return seen


CLAIMER = "postgres: awa-fast claimer"


def backend_labels(conn: psycopg.Connection[Any], database: str | None = None) -> dict[int, str]:
    """Each Postgres backend's application name, or its last statement when it has none;
    with ``database``, only that database's backends."""
    rows = conn.execute(
        "SELECT pid, application_name, backend_type, query FROM pg_stat_activity"
        " WHERE %(db)s::text IS NULL OR datname = %(db)s",
        {"db": database},
    ).fetchall()
    labels = {}
    for pid, app, backend_type, query in rows:
        text = app or " ".join((query or "").split())[:48] or backend_type
        labels[pid] = f"postgres: {text}"
    return labels


def part_of(pid: int, parent: int, cmdline: str, labels: Mapping[int, str]) -> str | None:
    """Which part ``pid`` is, or None for a process that has nothing to do with the run."""
    me = os.getpid()
    if pid == me:
        return "supervisor"
    if parent == me:
        return "producer process" if "awa_fast.bench" in cmdline else "worker processes"
    if pid in labels:
        return labels[pid]
    if cmdline.startswith("postgres"):
        return cmdline.split(" ", 1)[0] + ": server processes"
    return None


def split(before: CpuSnapshot, after: CpuSnapshot, labels: Mapping[int, str]) -> dict[str, float]:
    """CPU seconds per part between two snapshots."""
    parts: dict[str, float] = defaultdict(float)
    for pid, (cpu, parent, cmdline) in after.items():
        part = part_of(pid, parent, cmdline, labels)
        if part is not None:
            parts[part] += cpu - before.get(pid, (0.0, 0, ""))[0]
    return dict(parts)


@dataclass
class Window:
    """Two snapshots ``seconds`` apart, and the backends' labels at the second."""

    before: CpuSnapshot = field(default_factory=dict)
    after: CpuSnapshot = field(default_factory=dict)
    seconds: float = 0.0
    labels: dict[int, str] = field(default_factory=dict)

    def measure(self, url: str, *, skip: float, seconds: float) -> None:
        time.sleep(skip)
        began, self.before = time.monotonic(), snapshot()
        time.sleep(seconds)
        self.after, self.seconds = snapshot(), time.monotonic() - began
        with psycopg.connect(url, autocommit=True) as conn:
            self.labels = backend_labels(conn)

    def watch_pool(self, server_url: str, database: str, stop: threading.Event) -> None:
        """Every 50 ms until ``stop``: the first and the latest snapshot taken while the
        pool's claimer is connected to ``database``. Watched from the server's own
        database, so the drain's quiet start (no other connection to its database) holds."""
        began = 0.0
        with psycopg.connect(server_url, autocommit=True) as conn:
            while not stop.is_set():
                # The processes first, then who they are: a claimer's backend that exits as
                # the pool stops may still be listed by the server after /proc lost it; a
                # sample counts only when every claimer listed was in its snapshot.
                now, taken = time.monotonic(), snapshot()
                labels = backend_labels(conn, database)
                claimers = [pid for pid, label in labels.items() if label == CLAIMER]
                if claimers and all(pid in taken for pid in claimers):
                    if not self.before:
                        began, self.before = now, taken
                    self.after, self.seconds, self.labels = taken, now - began, labels
                time.sleep(0.05)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server_url", help="Postgres server URL (a database per run is made)")
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=float, help="jobs/s offered (a sustained run)")
    load.add_argument("--drain", type=int, metavar="N", help="drain N jobs, no producer")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (0: none)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds offered")
    parser.add_argument("--skip", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--window", type=float, default=5.0, help="seconds measured")
    args = parser.parse_args(argv)
    if args.rate is not None and args.skip + args.window > args.duration:
        parser.error("--skip plus --window must fit inside --duration")
    with fresh_database(args.server_url) as url:
        processes = args.processes or None
        window, stop = Window(), threading.Event()
        if args.drain is not None:
            database = database_of(url)
            sampler = threading.Thread(
                target=window.watch_pool, args=(args.server_url, database, stop)
            )
            run = drain(url, jobs=args.drain, processes=processes)
        else:
            sampler = threading.Thread(
                target=window.measure,
                args=(url,),
                kwargs={"skip": args.skip, "seconds": args.window},
            )
            run = sustained(
                url, jobs=20_000, processes=processes, rate=args.rate, duration=args.duration
            )
        try:
            sampler.start()
            result = run_as_served(run)
        finally:
            stop.set()
            sampler.join()
    if not window.seconds:
        raise SystemExit("the pool ended before two snapshots of it were taken: run longer")
    if args.drain is not None:
        # Every job drained while the claimer was connected: per job of all of them (the
        # first snapshot may come up to 50 ms late, about 1 % of a 200,000-job drain).
        per_job = 1e6 / args.drain
        print(f"drained {args.drain:,} jobs at {result['jobs_per_s']:,.0f} jobs/s; CPU us per job:")
    else:
        per_job = 1e6 / (window.seconds * result["completed_per_s"])
        print(
            f"offered {args.rate:,.0f} completed {result['completed_per_s']:,.0f} jobs/s, "
            f"p99 {result['latency_ms']['p99']:.0f} ms; CPU us per job:"
        )
    parts = split(window.before, window.after, window.labels)
    for part, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"{seconds * per_job:8.2f}  {part}")
    print(f"{sum(parts.values()) * per_job:8.2f}  total")


if __name__ == "__main__":
    main()
