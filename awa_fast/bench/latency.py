"""Latency scenarios, a producer process inserting while the pool runs: ``latency``
(pickup latency of one job at a time) and ``sustained`` (offered load over time).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable
from typing import Any, NamedTuple

import psycopg

from awa_fast.bench.handlers import Board, Noop, Stamp
from awa_fast.bench.measure import Progress, Window, percentiles, wait_done, wait_for_listener
from awa_fast.bench.producers import in_producer
from awa_fast.bench.throughput import drain
from awa_fast.client import AsyncClient
from awa_fast.runtime.runner import Runner
from awa_fast.worker import Job


async def latency(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    rate: float = 50.0,
    standby: bool = True,
    transaction_pooling: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``jobs`` jobs inserted one at a time at ``rate``/s into idle workers; pickup latency
    (insert commit → handler start) percentiles in ms. ``standby=False`` runs the pool
    without standby claims (awa_fast.runtime.claim.standby): each job on a claim of its own.
    ``transaction_pooling=True`` runs it as behind a transaction pooler with no direct URL
    (docs/pgbouncer.md): nothing prepared and no listener, so claims find jobs by polling;
    against Postgres itself, so the pooler's own hop is not in the figure."""
    board = Board(jobs)
    client = AsyncClient(url, transaction_pooling=transaction_pooling)

    @client.task(Stamp)
    async def stamp(job: Job[Stamp]) -> None:
        board.stamp(job.args.n)

    try:
        window = Window(url, "latency", processes)
        runner = await client.start({"default": 100}, processes=processes, standby=standby)
        if not transaction_pooling:
            await asyncio.to_thread(wait_for_listener, url)
        producing = in_producer("produce_one_by_one", url, rate, jobs)
        committed: list[float] = await _with_progress(producing, jobs / rate, progress)
        await wait_done(runner, jobs, timeout=60.0)
        window.stop(runner)
        listening = runner.listener.database is not None
    finally:
        await client.close()
        started = board.read()
        board.close()
    pickups = [(s - c) * 1000 for s, c in zip(started, committed, strict=True)]
    return {
        **window.result(jobs=jobs),
        "variant": _latency_variant(standby=standby, transaction_pooling=transaction_pooling),
        "rate": rate,
        "listening": listening,
        "latency_ms": percentiles(pickups),
    }


def _latency_variant(*, standby: bool, transaction_pooling: bool) -> str:
    parts = ([] if standby else ["no standby claims"]) + (
        ["as behind a transaction pooler"] if transaction_pooling else []
    )
    return ", ".join(parts)


async def sustained(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    load: float = 0.5,
    basis: str = "drain",
    drain_rate: float | None = None,
    rate: float | None = None,
    duration: float = 10.0,
    concurrency: int = 1000,
    standby: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """A producer offers ``load`` x a basis rate of no-op jobs/s for ``duration`` s;
    completed jobs/s, end-to-end latency, and queue depth and dead tuples of ``jobs_hot``
    sampled over time.

    The basis is the drain rate: the median of :data:`BASIS_DRAINS` drains of ``jobs``
    pre-inserted jobs with no producer, or ``drain_rate`` when already measured. With
    ``basis="capacity"`` it is what the pool completes while a producer offers that whole
    drain rate for a few seconds, since on a small box the producer's inserts take cores
    the drain had to itself. ``rate`` fixes the offered rate outright.

    A median, as the drain scenario's own figure is: a single drain lasts a fraction of a
    second and says as much about that moment as about the pool. The machine drifts within
    a run too, so when the basis drains were measured here, as many run again right after
    the load (``after_drains_per_s``; ``load_after`` is the offered rate as a share of their
    median): a run whose load came out heavier or lighter than meant says so."""
    if basis not in BASES:
        raise ValueError(f"basis must be one of {', '.join(BASES)}, got {basis!r}")
    basis_rate = rate
    drains: list[float] = []
    if basis_rate is None:
        if drain_rate is None:
            drains = await _drains(url, jobs=jobs, processes=processes, concurrency=concurrency)
            drain_rate = statistics.median(drains)
        basis_rate = drain_rate
        if basis == "capacity":
            saturated = await _offer(
                url, drain_rate, processes=processes, concurrency=concurrency, duration=5.0
            )
            basis_rate = float(saturated["completed_per_s"])
            _truncate(url)
    offered_rate = basis_rate if rate is not None else load * basis_rate
    result = await _offer(
        url,
        offered_rate,
        processes=processes,
        concurrency=concurrency,
        duration=duration,
        standby=standby,
        progress=progress,
    )
    after: dict[str, Any] = {}
    if drains:
        _truncate(url)
        again = await _drains(url, jobs=jobs, processes=processes, concurrency=concurrency)
        after = {
            "after_drains_per_s": [round(d, 1) for d in again],
            "load_after": round(offered_rate / statistics.median(again), 3),
        }
    return {
        **result,
        "variant": f"{round(load * 100)}% of {basis}" + ("" if standby else ", no standby claims"),
        "load": load,
        "basis": basis,
        "basis_per_s": round(basis_rate, 1),
        "basis_drains_per_s": [round(d, 1) for d in drains],
        **after,
    }


async def _drains(url: str, *, jobs: int, processes: int | None, concurrency: int) -> list[float]:
    """Jobs/s of :data:`BASIS_DRAINS` drains of ``jobs`` jobs, one after another."""
    rates = []
    for _ in range(BASIS_DRAINS):
        measured = await drain(url, jobs=jobs, processes=processes, concurrency=concurrency)
        rates.append(float(measured["jobs_per_s"]))
        _truncate(url)
    return rates


BASES = ("drain", "capacity")
BASIS_DRAINS = 3


async def _offer(
    url: str,
    rate: float,
    *,
    processes: int | None,
    concurrency: int,
    duration: float,
    standby: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run a pool while a producer offers ``rate`` jobs/s for ``duration`` s."""
    client = AsyncClient(url)

    @client.task(Noop)
    async def noop(job: Job[Noop]) -> None:
        return None

    samples: list[list[float]] = []
    try:
        window = Window(url, "sustained", processes)
        runner = await client.start({"default": concurrency}, processes=processes, standby=standby)
        sampler = asyncio.ensure_future(
            _sample(url, runner, samples, interval=max(0.1, duration / SAMPLES_PER_RUN))
        )
        producing = in_producer("produce_at_rate", url, rate, duration, 0.01)
        offered, took = await _with_progress(producing, duration, progress)
        await wait_done(runner, offered, timeout=60.0 + duration)
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        window.stop(runner)
    finally:
        await client.close()
    measured = end_to_end(url, duration=took)
    since = measured.pop("since")
    return {
        **window.result(jobs=offered),
        "offered_per_s": round(rate, 1),
        "duration_s": duration,
        **measured,
        "samples": [[round(at - since, 3), *rest] for at, *rest in samples],
    }


async def _with_progress(work: Awaitable[Any], duration: float, progress: Progress | None) -> Any:
    task = asyncio.ensure_future(work)
    began = time.monotonic()
    while not task.done():
        if progress is not None:
            progress(min(1.0, (time.monotonic() - began) / duration))
        await asyncio.wait([task], timeout=0.2)
    return task.result()


# Each sample counts the available rows, load the measurement puts on what it measures:
# few samples keep it small (benches/RESULTS.md, "Design measurements").
SAMPLES_PER_RUN = 20


async def _sample(url: str, runner: Runner, samples: list[list[float]], *, interval: float) -> None:
    """Append [server time (epoch s), queue depth, dead tuples of jobs_hot, outcomes
    committed] every ``interval`` s until cancelled: on the server's clock, as the jobs'
    own times are, so the two line up."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cur = await conn.execute(
                "SELECT extract(epoch FROM clock_timestamp()),"
                " (SELECT count(*) FROM awa_fast.jobs_hot WHERE state = 'available')"
                " + (SELECT COALESCE(sum(size - taken), 0) FROM awa_fast.job_packs), "
                "(SELECT sum(n_dead_tup) FROM pg_stat_user_tables"
                " WHERE relid IN (SELECT relid FROM pg_partition_tree('awa_fast.jobs_hot')))"
            )
            row = await cur.fetchone()
            assert row is not None
            at, depth, dead = float(row[0]), int(row[1]), int(row[2] or 0)
            samples.append([at, depth, dead, runner.committer.committed])
            await asyncio.sleep(interval)


def end_to_end(url: str, *, duration: float) -> dict[str, Any]:
    """Latency from insert to completion and from insert to claim (pickup), overall and
    over time, and jobs/s completed inside the offering window (which opens at the first
    insert, ``since``: the producer's start-up is not part of it). All on the server's
    clock."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM created_at), extract(epoch FROM attempted_at),"
            " extract(epoch FROM finalized_at) FROM awa_fast.jobs_done WHERE state = 'completed'"
        ).fetchall()
    jobs = [Timed(*map(float, row)) for row in rows]
    since = min((job.created for job in jobs), default=0.0)
    within = sum(1 for job in jobs if job.finalized <= since + duration)
    return {
        "since": since,
        "completed_per_s": round(within / duration, 1),
        "latency_ms": percentiles([job.end_to_end_ms for job in jobs] or [0.0]),
        "pickup_ms": percentiles([job.pickup_ms for job in jobs] or [0.0]),
        "over_time": over_time(jobs, since=since, step=duration / SAMPLES_PER_RUN),
    }


class Timed(NamedTuple):
    """One completed job's times, epoch seconds on the server's clock."""

    created: float
    attempted: float
    finalized: float

    @property
    def pickup_ms(self) -> float:
        return (self.attempted - self.created) * 1000

    @property
    def end_to_end_ms(self) -> float:
        return (self.finalized - self.created) * 1000


def over_time(jobs: list[Timed], *, since: float, step: float) -> list[list[float]]:
    """[seconds since ``since``, pickup p50, pickup p99, end-to-end p99] in ms for the jobs
    inserted in each ``step`` s: a backlog that builds shows as a rising line, where one
    percentile over the whole run would hide when it began."""
    buckets: dict[int, list[Timed]] = {}
    for job in jobs:
        buckets.setdefault(int((job.created - since) // step), []).append(job)
    series = []
    for index in sorted(buckets):
        pickup = percentiles([job.pickup_ms for job in buckets[index]])
        whole = percentiles([job.end_to_end_ms for job in buckets[index]])
        series.append([round(index * step, 3), pickup["p50"], pickup["p99"], whole["p99"]])
    return series


def _truncate(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE awa_fast.jobs_hot, awa_fast.jobs_deferred, awa_fast.jobs_done")
