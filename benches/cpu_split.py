"""Where the CPU goes while the pool sustains a rate beside its producer: one ``sustained``
run, with every process's CPU time read from /proc at two moments inside the offering
window. Prints CPU microseconds per completed job for each part (supervisor, worker
processes, the producer process, each Postgres backend by its application name or last
statement, Postgres' own processes), then the total. With ``--drain N``, the same for a
drain of N pre-inserted jobs and no producer, read from the moment the pool's claimer
connects to the last moment it is seen, every 50 ms; with ``--cpu N``, the same for the
cpu scenario (N jobs burning ``--cpu-ms`` each at ``--concurrency``), followed by the
handlers' burn per job and its share of the cores: what is not burn is the pool's, the
server's and the machine's cost of running the jobs.

Linux only (it reads /proc). The database server must run on this machine for its
processes to be counted.

    PYTHONPATH=. python benches/cpu_split.py URL --rate 33000
    PYTHONPATH=. python benches/cpu_split.py URL --rate 36000 --processes 0
    PYTHONPATH=. python benches/cpu_split.py URL --drain 200000
    PYTHONPATH=. python benches/cpu_split.py URL --cpu 20000 --concurrency 10
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg

from awa_fast.bench.latency import sustained
from awa_fast.bench.measure import fresh_database, process_stat
from awa_fast.bench.run import run_as_served
from awa_fast.bench.throughput import HANDLERS, cpu, drain
from awa_fast.db.dsn import database_of

CpuSnapshot = dict[int, tuple[float, int, str]]  # pid -> (CPU seconds, parent pid, cmdline)


class Processes:
    """Reads the CPU seconds (user + system), parent and command line of every process
    that may be part of the run: this one, its children and Postgres'. Each process is
    looked at in full once; after that, the others are skipped and these are read for
    their CPU alone (a read of /proc costs tens of microseconds on a VM, and the pool's
    watch reads every 50 ms)."""

    def __init__(self) -> None:
        self._skipped: set[int] = set()
        self._cmdlines: dict[int, str] = {}

    def snapshot(self) -> CpuSnapshot:
        me, stats = os.getpid(), {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in self._skipped:
                with contextlib.suppress(OSError):  # ended meanwhile
                    stats[int(entry)] = process_stat(int(entry))
        # Workers are the children of this process's child, the fork server.
        ours = {me} | {pid for pid, stat in stats.items() if stat.parent == me}
        seen = {}
        for pid, stat in stats.items():
            try:
                if pid not in self._cmdlines:
                    if not (pid in ours or stat.parent in ours or stat.name == "postgres"):
                        self._skipped.add(pid)
                        continue
                    with open(f"/proc/{pid}/cmdline") as cmd:
                        self._cmdlines[pid] = cmd.read().replace("\0", " ").strip()
            except OSError:  # ended meanwhile
                continue
            seen[pid] = (stat.cpu_s, stat.parent, self._cmdlines[pid])
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


def part_of(
    pid: int, parent: int, cmdline: str, labels: Mapping[int, str], *, children: set[int]
) -> str | None:
    """Which part ``pid`` is, or None for a process that has nothing to do with the run.
    ``children`` are this process's; the fork server is one, and its children the workers."""
    if pid == os.getpid():
        return "supervisor"
    if parent in children:
        return "worker processes"
    if pid in children:  # a producer, or the fork server (its CPU counted with its workers')
        return "producer process" if "awa_fast.bench" in cmdline else "worker processes"
    if pid in labels:
        return labels[pid]
    if cmdline.startswith("postgres"):
        return cmdline.split(" ", 1)[0] + ": server processes"
    return None


def split(before: CpuSnapshot, after: CpuSnapshot, labels: Mapping[int, str]) -> dict[str, float]:
    """CPU seconds per part between two snapshots."""
    parts: dict[str, float] = defaultdict(float)
    children = {pid for pid, (_, parent, _) in after.items() if parent == os.getpid()}
    for pid, (seconds, parent, cmdline) in after.items():
        part = part_of(pid, parent, cmdline, labels, children=children)
        if part is not None:
            parts[part] += seconds - before.get(pid, (0.0, 0, ""))[0]
    return dict(parts)


@dataclass
class Window:
    """Two snapshots ``seconds`` apart, the backends' labels at the second, and the CPU
    the sampling thread spent between them: it runs in the supervisor's process, whose
    share it would otherwise inflate (reading /proc every 50 ms is not free)."""

    before: CpuSnapshot = field(default_factory=dict)
    after: CpuSnapshot = field(default_factory=dict)
    seconds: float = 0.0
    labels: dict[int, str] = field(default_factory=dict)
    sampling: float = 0.0
    processes: Processes = field(default_factory=Processes)

    def parts(self) -> dict[str, float]:
        """CPU seconds per part between the snapshots, the sampling's own taken out."""
        parts = split(self.before, self.after, self.labels)
        parts["supervisor"] = parts.get("supervisor", 0.0) - self.sampling
        return parts

    def measure(self, url: str, *, skip: float, seconds: float) -> None:
        time.sleep(skip)
        began, spent, self.before = time.monotonic(), time.thread_time(), self.processes.snapshot()
        time.sleep(seconds)
        self.after, self.seconds = self.processes.snapshot(), time.monotonic() - began
        self.sampling = time.thread_time() - spent
        with psycopg.connect(url, autocommit=True) as conn:
            self.labels = backend_labels(conn)

    def watch_pool(self, server_url: str, database: str, stop: threading.Event) -> None:
        """Every 50 ms until ``stop``: the first and the latest snapshot taken while the
        pool's claimer is connected to ``database``. Watched from the server's own
        database, so the drain's quiet start (no other connection to its database) holds."""
        began = spent = 0.0
        labels: dict[int, str] = {}
        known: set[int] = set()  # the processes there were when the labels were read
        with psycopg.connect(server_url, autocommit=True) as conn:
            while not stop.is_set():
                # The processes first, then who they are: a claimer's backend that exits as
                # the pool stops may still be listed by the server after /proc lost it; a
                # sample counts only when every claimer listed was in its snapshot. The
                # labels are read again only when a process came: a query every 50 ms
                # would cost the server, and this process, more than the pool's own parts.
                now, cpu, taken = time.monotonic(), time.thread_time(), self.processes.snapshot()
                if not known.issuperset(taken):
                    labels, known = backend_labels(conn, database), set(taken)
                claimers = [pid for pid, label in labels.items() if label == CLAIMER]
                if claimers and all(pid in taken for pid in claimers):
                    if not self.before:
                        began, spent, self.before = now, cpu, taken
                    self.after, self.seconds, self.labels = taken, now - began, labels
                    self.sampling = cpu - spent
                time.sleep(0.05)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server_url", help="Postgres server URL (a database per run is made)")
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=float, help="jobs/s offered (a sustained run)")
    load.add_argument("--drain", type=int, metavar="N", help="drain N jobs, no producer")
    load.add_argument("--cpu", type=int, metavar="N", help="run N jobs of the cpu scenario")
    parser.add_argument("--cpu-ms", type=float, default=1.0, help="CPU per job (--cpu)")
    parser.add_argument("--concurrency", type=int, default=10, help="queue concurrency (--cpu)")
    parser.add_argument("--handler", choices=HANDLERS, default="sync", help="(--cpu)")
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
        drained = args.drain if args.cpu is None else args.cpu
        if drained is not None:
            database = database_of(url)
            sampler = threading.Thread(
                target=window.watch_pool, args=(args.server_url, database, stop)
            )
            run = (
                drain(url, jobs=drained, processes=processes)
                if args.cpu is None
                else cpu(
                    url,
                    jobs=drained,
                    processes=processes,
                    ms=args.cpu_ms,
                    concurrency=args.concurrency,
                    handler=args.handler,
                )
            )
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
    if drained is not None:
        # Every job drained while the claimer was connected: per job of all of them (the
        # first snapshot may come up to 50 ms late, about 1 % of a 200,000-job drain).
        per_job = 1e6 / drained
        verb = "drained" if args.cpu is None else f"burned {args.cpu_ms:g} ms in"
        print(f"{verb} {drained:,} jobs at {result['jobs_per_s']:,.0f} jobs/s; CPU us per job:")
    else:
        per_job = 1e6 / (window.seconds * result["completed_per_s"])
        print(
            f"offered {args.rate:,.0f} completed {result['completed_per_s']:,.0f} jobs/s, "
            f"p99 {result['latency_ms']['p99']:.0f} ms; CPU us per job:"
        )
    parts = window.parts()
    for part, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"{seconds * per_job:8.2f}  {part}")
    print(f"{sum(parts.values()) * per_job:8.2f}  total")
    print(f"{window.sampling * per_job:8.2f}  this tool's sampling, not in the supervisor's")
    if args.cpu is not None:
        burn_ms, cores = result["burn_ms_measured"], os.cpu_count() or 1
        share = result["jobs_per_s"] * burn_ms / 1000 / cores
        print(f"{burn_ms * 1000:8.2f}  of it the handlers' burn: {share:.1%} of {cores} cores")


if __name__ == "__main__":
    main()
