"""Prefetch: a worker holds jobs claimed ahead, unstarted, beside the handlers it runs; a
queue's concurrency still bounds its running handlers, a held job flagged before its turn
never starts. (Held jobs of a worker that dies: tests/runtime/work/pool/test_pool.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

import awa_fast
from tests.helpers import await_until, job, run, states


@dataclass
class Hold:
    n: int


def running_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM awa_fast.jobs_hot WHERE state = 'running'")
        return int(row.fetchone()[0])  # type: ignore[index]


def test_a_worker_runs_its_share_and_holds_its_prefetch_unstarted(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    release = asyncio.Event()
    now_running, peak = [0], [0]

    @client.task(Hold)
    async def hold(job: awa_fast.Job[Hold]) -> None:
        now_running[0] += 1
        peak[0] = max(peak[0], now_running[0])
        await release.wait()
        now_running[0] -= 1

    async def main() -> dict[str, int]:
        async with client:
            await client.insert_many([Hold(n) for n in range(30)])
            runner = await client.start({"default": 3}, prefetch=5)
            try:
                await await_until(
                    lambda: now_running[0] == 3 and running_rows(dsn) == 8,
                    what="3 handlers running and 5 jobs held",
                )
                held = dict(runner.snapshot().prefetched)
                release.set()
                await await_until(lambda: states(dsn) == {"completed": 30}, what="the drain")
            finally:
                await client.shutdown()
            return held

    assert run(main()) == {"default": 5}
    assert peak[0] == 3


def test_a_held_job_cancelled_before_its_turn_never_starts(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    release = asyncio.Event()
    started: list[int] = []

    @client.task(Hold)
    async def hold(job: awa_fast.Job[Hold]) -> None:
        started.append(job.args.n)
        if job.args.n == 0:
            await release.wait()

    async def main() -> list[int]:
        async with client:
            ids = await client.insert_many([Hold(n) for n in range(3)])
            runner = await client.start({"default": 1}, prefetch=2)
            try:
                await await_until(lambda: started == [0] and running_rows(dsn) == 3)
                assert await client.cancel(ids[1])
                lease = job(dsn, ids[1])["run_lease"]
                await await_until(lambda: (ids[1], lease) in runner.flags, what="the flag")
                release.set()
                await await_until(lambda: states(dsn) == {"completed": 2, "cancelled": 1})
            finally:
                await client.shutdown()
            return ids

    ids = run(main())
    assert started == [0, 2]
    assert job(dsn, ids[1])["state"] == "cancelled"


def test_weighted_mode_holds_no_jobs_ahead(dsn: str) -> None:
    """global_max_workers bounds the attempts a runner has claimed: a held job would keep
    a place in that pool from the other queues, so none is held."""
    client = awa_fast.AsyncClient(dsn)
    release = asyncio.Event()
    now_running = [0]

    @client.task(Hold)
    async def hold(job: awa_fast.Job[Hold]) -> None:
        now_running[0] += 1
        await release.wait()

    async def main() -> tuple[int, int, dict[str, int]]:
        async with client:
            await client.insert_many([Hold(n) for n in range(12)])
            queues = [{"name": "default", "min_workers": 1}]
            runner = await client.start(queues, global_max_workers=4)
            try:
                await await_until(
                    lambda: now_running[0] == 4 and running_rows(dsn) == 4,
                    what="4 handlers running",
                )
                capacity = runner.capacity
                seen = (
                    capacity.held(0, 0),
                    capacity.share(0, 0),
                    dict(runner.snapshot().prefetched),
                )
                release.set()
                await await_until(lambda: states(dsn) == {"completed": 12}, what="the drain")
            finally:
                await client.shutdown()
            return seen

    assert run(main()) == (4, 4, {"default": 0})


@dataclass
class Sleep:
    seconds: float


def capacity_reaches(
    dsn: str, jobs: list[object], *, concurrency: int, wanted: Callable[[int], bool]
) -> None:
    """Run ``jobs`` in-process until the worker's capacity on the queue is ``wanted``."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Sleep)
    async def sleep(job: awa_fast.Job[Sleep]) -> None:
        await asyncio.sleep(job.args.seconds)

    async def main() -> None:
        async with client:
            await client.insert_many(jobs)
            runner = await client.start({"default": concurrency})
            try:
                counter = runner.capacity.index(0, 0)
                assert runner.inflight.capacity(counter) == concurrency + 8  # before a pace
                await await_until(
                    lambda: wanted(runner.inflight.capacity(counter)),
                    what="the capacity wanted",
                )
            finally:
                await client.shutdown()

    run(main())


def test_a_worker_holds_more_of_a_queue_of_quick_jobs(dsn: str) -> None:
    """Left to the runtime, the prefetch follows the pace: jobs that take no time, far
    more held ahead than at the start (a pace of 320 jobs/s is enough for 32, a tenth of
    what one in-process worker keeps up on them)."""
    quick = [Sleep(0.0)] * 400
    capacity_reaches(dsn, quick, concurrency=2, wanted=lambda held: held >= 2 + 32)


def test_a_worker_holds_none_of_a_queue_of_jobs_longer_than_the_horizon(dsn: str) -> None:
    slow = [Sleep(0.3)] * 4
    capacity_reaches(dsn, slow, concurrency=1, wanted=lambda held: held == 1)
