"""What a pool costs while it has nothing to do: the CPU its processes and their Postgres
backends spend per second of wall time, with no jobs anywhere.

Each round makes a fresh database, starts the pool as ``awa-fast serve`` does (this
process is the supervisor, with ``--processes`` forked workers, and the maintenance
leader), waits ``--settle`` seconds for it to start, then reads every part's CPU from /proc
at the start and end of ``--seconds``. The server must run on this machine for its
backends to be counted. Prints the median over ``--rounds`` of each part's CPU
milliseconds per second, and of their total.

    PYTHONPATH=. python benches/idle_cost.py URL [--seconds 20] [--rounds 3] [--processes 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass

import psycopg

from awa_fast.bench.measure import fresh_database
from awa_fast.bench.run import run_as_served
from awa_fast.client import AsyncClient
from awa_fast.worker import Job
from benches.cpu_split import CpuSnapshot, Processes, backend_labels, split


@dataclass
class Idle:
    n: int


def pool_parts(url: str, before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """CPU seconds of each part of the pool between two snapshots: this process (the
    supervisor), its workers, and its backends by application name."""
    with psycopg.connect(url, autocommit=True) as conn:
        labels = backend_labels(conn, conn.info.dbname)
    return {
        part: seconds
        for part, seconds in split(before, after, labels).items()
        if part in ("supervisor", "worker processes") or part.startswith("postgres: awa-fast")
    }


async def idle_round(
    url: str, *, processes: int, settle: float, seconds: float
) -> dict[str, float]:
    """CPU ms per second of each part of an idle pool on ``url``."""
    client = AsyncClient(url)

    @client.task(Idle)
    async def idle(job: Job[Idle]) -> None:
        return None

    try:
        await client.start({"default": 4 * processes}, processes=processes)
        await asyncio.sleep(settle)
        reader = Processes()
        before, started = reader.snapshot(), time.monotonic()
        await asyncio.sleep(seconds)
        after, elapsed = reader.snapshot(), time.monotonic() - started
        costs = await asyncio.to_thread(pool_parts, url, before, after)
    finally:
        await client.close()
    return {part: cpu_s / elapsed * 1000 for part, cpu_s in costs.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a Postgres server URL on this machine")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    rounds: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.rounds):
        with fresh_database(args.url) as url:
            coro = idle_round(
                url, processes=args.processes, settle=args.settle, seconds=args.seconds
            )
            costs = run_as_served(coro)
        for part, ms in costs.items():
            rounds[part].append(ms)
        rounds["total"].append(sum(costs.values()))
    print(f"idle pool, {args.processes} workers: CPU ms a second, median of {args.rounds}")
    medians = {part: statistics.median(ms) for part, ms in rounds.items()}
    for part, ms in sorted(medians.items(), key=lambda item: (item[0] == "total", -item[1])):
        print(f"{ms:7.2f}  {part}")


if __name__ == "__main__":
    main()
