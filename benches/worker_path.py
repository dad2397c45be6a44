"""A worker process's Python cost per job, without a database: us/row to run delivered rows
of a no-op async handler (one task per row, the outcome pushed to the ring, the slot freed),
delivered in batches of each ``--batches`` size, with Python's default collector settings
and with the ones a forked worker uses (``collector.settle``). Prints one markdown row per
batch size: the median of ``--runs`` runs, the two settings measured alternately.

    PYTHONPATH=. python benches/worker_path.py
    PYTHONPATH=. python benches/worker_path.py --rows 40000 --batches 100 250 2000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass

import uvloop

from awa_fast._core import InFlight, OutcomeRing
from awa_fast.db.connections import Database
from awa_fast.lifecycle.transitions import Backoff, Target
from awa_fast.runtime.claimed import Claimed, Delivered
from awa_fast.runtime.work import collector
from awa_fast.runtime.work.attempt_writer import AttemptWriter
from awa_fast.runtime.work.executor import Executor
from awa_fast.runtime.work.local import run_claimed
from awa_fast.worker import Job, Registry


@dataclass
class Noop:
    n: int


async def noop(job: Job[Noop]) -> None:
    return None


def delivered_rows(rows: int, inflight: InFlight) -> list[Delivered]:
    """Jobs as a worker runs them: claimed, with their slot and capacity index."""
    out = []
    for n in range(rows):
        slot = inflight.acquire_slot(n, 1, 0, 0)
        # args as a claim connection loads jsonb: the version byte, then the JSON text
        args = b'\x01{"n":%d}' % n
        claimed = Claimed(n, 1, "Noop", "default", args, 1, 25, 2, [], None, None, None, 0, 0, 0)
        out.append(Delivered(claimed, slot, 0))
    return out


async def run_batches(
    executor: Executor, inflight: InFlight, rows: list[Delivered], size: int
) -> None:
    loop = asyncio.get_running_loop()
    running: set[asyncio.Task[None]] = set()
    for start in range(0, len(rows), size):
        for row in rows[start : start + size]:
            task = loop.create_task(run_claimed(executor, inflight, row))
            running.add(task)
            task.add_done_callback(running.discard)
        while running:
            await asyncio.sleep(0)


def one_run(rows: int, size: int, *, traces: bool = True) -> float:
    registry = Registry()
    registry.add(noop, args_type=Noop, kind="Noop", queue="default")
    inflight = InFlight([rows], rows + 64)
    ring = OutcomeRing(1 << 20, 128)
    # The registrar connects only when a handler registers a callback; a no-op never does.
    writer = AttemptWriter(Database("postgresql:///unused"))
    executor = Executor(registry, ring, inflight, Backoff(), writer, traces=traces)
    batch = delivered_rows(rows, inflight)
    began = time.perf_counter()
    uvloop.run(run_batches(executor, inflight, batch, size))
    elapsed = time.perf_counter() - began
    outcomes = ring.drain(rows + 1, 0.0)
    assert len(outcomes) == rows
    assert {code for _, _, code, *_ in outcomes} == {int(Target.COMPLETED)}, "handlers failed"
    return elapsed / rows * 1e6


def measured(rows: int, size: int, *, worker_gc: bool, traces: bool = True) -> float:
    with collector.settled() if worker_gc else contextlib.nullcontext():
        return one_run(rows, size, traces=traces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batches", type=int, nargs="+", default=[250, 2000])
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    print("| rows per delivery | default collector us/row | worker collector us/row |")
    print("|---|---|---|")
    for size in opts.batches:
        plain, tuned = [], []
        for _ in range(opts.runs):
            plain.append(measured(opts.rows, size, worker_gc=False))
            tuned.append(measured(opts.rows, size, worker_gc=True))
        print(f"| {size} | {statistics.median(plain):.2f} | {statistics.median(tuned):.2f} |")


if __name__ == "__main__":
    main()
