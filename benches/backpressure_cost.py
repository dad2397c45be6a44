"""What backpressure costs: the depth read, and inserts with and without the option.

1. **read**: a fresh database gets ``--waiting`` available jobs over 8 queues (one
   INSERT ... SELECT through the counting triggers), folded as the leader folds them; then
   ``--calls`` ``client.queue_depth()`` calls are timed from a client (median, p99). Then
   unfolded deltas are added, as a write load leaves them between folds (rows appended to
   ``count_deltas`` over the 8 queues and five states, summing to nothing), and the calls
   timed again at each count of ``--deltas``.
2. **drain**: ``--jobs`` no-op jobs drained by the 2-worker pool (its leader folding every
   second), while a thread reads ``queue_depth()`` every 50 ms and counts the unfolded
   deltas after each read: the read as a busy queue's producer sees it.
3. **insert**: on a fresh database per round, ``--batches`` ``insert_many`` calls of 450
   no-op jobs, the uniform way (one statement) and item by item (InsertRequest items,
   over COPY), without the option and with ``max_queue_depth`` (high enough never to
   refuse); the producer's CPU a job (this process, ``time.process_time``) and the wall
   time a batch, rounds alternating. With ``--variants none`` it runs on a tree without
   the option (the commit before it), for the cost of an option not given.

    PYTHONPATH=. python benches/backpressure_cost.py URL [--parts read,drain,insert]
        [--waiting 1000000] [--deltas 1000,10000,100000] [--calls 200] [--jobs 100000]
        [--batches 200] [--rounds 3] [--variants none,asked]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.bench.measure import fresh_database, insert_items, percentiles, wait_done
from awa_fast.client import AsyncClient
from awa_fast.client_sync import Client
from awa_fast.types import InsertRequest
from awa_fast.worker import Job

QUEUES = 8
BATCH = 450
WAITING = """
INSERT INTO awa_fast.jobs_hot (kind, queue, args)
SELECT 'bench', 'q' || (i %% {queues}), '{{}}' FROM generate_series(1, %(n)s) AS i
"""
DELTAS = """
INSERT INTO awa_fast.count_deltas (slot, queue, state, n)
SELECT awa_fast.count_slot(), 'q' || (i %% {queues}),
       (ARRAY['available', 'running', 'completed', 'retryable', 'scheduled'])[1 + i %% 5],
       CASE WHEN i %% 2 = 0 THEN 1 ELSE -1 END
FROM generate_series(1, %(n)s) AS i
"""


@dataclass
class Noop:
    n: int


def fold_all(url: str) -> None:
    """What the leader's passes do, here and now: seal and fold both partitions."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(2):
            row = conn.execute("SELECT nextval('awa_fast.count_slot')").fetchone()
            assert row is not None
            conn.execute(
                "SELECT awa_fast.count_fold(%s::smallint, interval '10 seconds')", (1 - row[0],)
            )


def time_reads(client: Client, calls: int) -> dict[str, float]:
    """Milliseconds a ``queue_depth()`` call takes, as a client sees it."""
    took = []
    for _ in range(calls):
        began = time.perf_counter()
        client.queue_depth("q0")
        took.append((time.perf_counter() - began) * 1000)
    return percentiles(took)


def read_part(server: str, waiting: int, deltas: list[int], calls: int) -> None:
    with fresh_database(server) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(WAITING.format(queues=QUEUES), {"n": waiting})
        fold_all(url)
        with Client(url) as client:
            assert client.queue_depth("q0") == waiting // QUEUES
            _say(f"{waiting:,} waiting, folded", time_reads(client, calls))
            added = 0
            for total in deltas:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(DELTAS.format(queues=QUEUES), {"n": total - added})
                added = total
                _say(f"and {total:,} unfolded deltas", time_reads(client, calls))


def _say(what: str, took: dict[str, float]) -> None:
    print(f"read, {what}: p50 {took['p50']:.3f} ms, p99 {took['p99']:.3f} ms", flush=True)


def drain_part(server: str, jobs: int) -> None:
    with fresh_database(server) as url:
        insert_items(url, [Noop(i) for i in range(jobs)])
        took: list[float] = []
        unfolded: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            with Client(url) as client, psycopg.connect(url, autocommit=True) as conn:
                while not stop.wait(0.05):
                    began = time.perf_counter()
                    client.queue_depth("default")
                    took.append((time.perf_counter() - began) * 1000)
                    row = conn.execute("SELECT count(*) FROM awa_fast.count_deltas").fetchone()
                    unfolded.append(int(row[0]) if row else 0)

        async def drain() -> float:
            client = AsyncClient(url)

            @client.task(Noop)
            async def noop(job: Job[Noop]) -> None:
                return None

            try:
                runner = await client.start({"default": 1000}, processes=2)
                began = time.perf_counter()
                await wait_done(runner, jobs, timeout=600.0)
                return jobs / (time.perf_counter() - began)
            finally:
                await client.close()

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            rate = asyncio.run(drain())
        finally:
            stop.set()
            sampler.join()
    reads = percentiles(took)
    print(
        f"drain of {jobs:,} at {rate:,.0f} jobs/s: {len(took)} reads, p50 {reads['p50']:.3f} ms,"
        f" p99 {reads['p99']:.3f} ms; unfolded deltas median {statistics.median(unfolded):.0f},"
        f" max {max(unfolded)}",
        flush=True,
    )


def batch_of(way: str, n: int) -> list[object]:
    if way == "uniform":
        return [Noop(i) for i in range(n)]
    return [InsertRequest(Noop(i)) for i in range(n)]


def insert_round(server: str, way: str, variant: str, batches: int) -> tuple[float, float]:
    """The producer's CPU us a job and the median ms a batch, on a fresh database."""
    options: dict[str, Any] = {} if variant == "none" else {"max_queue_depth": 10**12}
    with fresh_database(server) as url, Client(url) as client:
        client.insert_many(batch_of(way, BATCH), **options)  # the pool's connection
        walls: list[float] = []
        cpu = 0.0
        for _ in range(batches):
            items = batch_of(way, BATCH)
            began, began_cpu = time.perf_counter(), time.process_time()
            client.insert_many(items, **options)
            cpu += time.process_time() - began_cpu
            walls.append((time.perf_counter() - began) * 1000)
    return cpu / (batches * BATCH) * 1e6, statistics.median(walls)


def insert_part(server: str, variants: list[str], batches: int, rounds: int) -> None:
    for way in ("uniform", "item by item"):
        results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
        for r in range(rounds):
            order = variants if r % 2 == 0 else list(reversed(variants))
            for variant in order:
                results[variant].append(insert_round(server, way, variant, batches))
        for variant, runs in results.items():
            cpu = " / ".join(f"{c:.2f}" for c, _ in runs)
            wall = " / ".join(f"{w:.2f}" for _, w in runs)
            print(f"insert {way}, {variant}: {cpu} us a job; {wall} ms a batch", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a Postgres server URL (fresh databases are made)")
    parser.add_argument("--parts", default="read,drain,insert")
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--deltas", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="none,asked")
    args = parser.parse_args()
    parts: dict[str, Callable[[], None]] = {
        "read": lambda: read_part(
            args.url, args.waiting, [int(d) for d in args.deltas.split(",")], args.calls
        ),
        "drain": lambda: drain_part(args.url, args.jobs),
        "insert": lambda: insert_part(
            args.url, args.variants.split(","), args.batches, args.rounds
        ),
    }
    for part in args.parts.split(","):
        parts[part]()


if __name__ == "__main__":
    main()
