"""Where the CPU goes while the pool sustains a rate beside its producer: one ``sustained``
run, with every process's CPU time read from /proc at two moments inside the offering
window. Prints CPU microseconds per completed job for each part (supervisor, worker
processes, the producer process, each Postgres backend by its application name or last
statement, Postgres' own processes), then the total.

Linux only (it reads /proc). The database server must run on this machine for its
processes to be counted.

    PYTHONPATH=. python benches/cpu_split.py URL --rate 33000
    PYTHONPATH=. python benches/cpu_split.py URL --rate 36000 --processes 0
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import psycopg
import uvloop

from awa_fast.bench.latency import sustained
from awa_fast.bench.measure import drop_database, fresh_database

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


def backend_labels(url: str) -> dict[int, str]:
    """Each Postgres backend's application name, or its last statement when it has none."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, application_name, backend_type, query FROM pg_stat_activity"
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
        self.labels = backend_labels(url)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server_url", help="Postgres server URL (a database per run is made)")
    parser.add_argument("--rate", type=float, required=True, help="jobs/s offered")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (0: none)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds offered")
    parser.add_argument("--skip", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--window", type=float, default=5.0, help="seconds measured")
    args = parser.parse_args(argv)
    if args.skip + args.window > args.duration:
        parser.error("--skip plus --window must fit inside --duration")
    url = fresh_database(args.server_url)
    window = Window()
    sampler = threading.Thread(
        target=window.measure, args=(url,), kwargs={"skip": args.skip, "seconds": args.window}
    )
    try:
        sampler.start()
        run = sustained(
            url,
            jobs=20_000,
            processes=args.processes or None,
            rate=args.rate,
            duration=args.duration,
        )
        result = uvloop.run(run)
        sampler.join()
    finally:
        drop_database(args.server_url, url)
    parts = split(window.before, window.after, window.labels)
    per_job = 1e6 / (window.seconds * result["completed_per_s"])
    print(
        f"offered {args.rate:,.0f} completed {result['completed_per_s']:,.0f} jobs/s, "
        f"p99 {result['latency_ms']['p99']:.0f} ms; CPU us per job:"
    )
    for part, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"{seconds * per_job:8.2f}  {part}")
    print(f"{sum(parts.values()) * per_job:8.2f}  total")


if __name__ == "__main__":
    main()
