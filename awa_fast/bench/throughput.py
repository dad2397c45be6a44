"""Throughput scenarios: jobs inserted (or scheduled) up front, timed until their outcomes
commit: ``drain``, ``cpu``, ``io``, ``retry``, ``scheduled``, ``promote``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

from awa_fast.bench.handlers import (
    Board,
    Burn,
    FailOnce,
    Noop,
    Sleep,
    burn_cpu,
    burn_loops,
    fail_once,
    nap,
)
from awa_fast.bench.measure import (
    Counters,
    Progress,
    Window,
    busy_share,
    cpu_jiffies,
    environment,
    insert_items,
    peak_rss_kib,
    quiesce,
    system_name,
    wait_done,
)
from awa_fast.client import AsyncClient
from awa_fast.db.connections import Database
from awa_fast.lifecycle.followups import FollowupRegistry
from awa_fast.lifecycle.handlers import Handlers
from awa_fast.lifecycle.hooks import HookDispatcher, HookRegistry
from awa_fast.lifecycle.transitions import Backoff
from awa_fast.maintenance.service import Maintenance
from awa_fast.runtime.config import RunnerConfig
from awa_fast.worker import Job, Registry


async def _timed_drain(
    url: str,
    client: AsyncClient,
    items: list[Any],
    *,
    queues: dict[str, int],
    processes: int | None,
    scenario: str,
    outcomes: int | None = None,
    progress: Progress | None = None,
    **config: Any,
) -> dict[str, Any]:
    """Insert ``items``, start the pool, and time from the moment it is up (forked and
    connected, its first claim not yet sent) until ``outcomes`` (default: one per job) are
    committed: the peer harness's clock also starts when its workers are ready."""
    jobs = len(items)
    try:
        await asyncio.to_thread(insert_items, url, items)
        window = Window(url, scenario, processes)
        runner = await client.start(queues, processes=processes, **config)
        window.go()
        await wait_done(runner, outcomes or jobs, timeout=600.0, progress=progress)
        window.stop(runner)
    finally:
        await client.close()
    return window.result(jobs=jobs)


async def drain(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    concurrency: int = 1000,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``jobs`` pre-inserted no-op jobs drained to committed completion, by this process
    (``processes=None``) or by that many forked worker processes."""
    client = AsyncClient(url)

    @client.task(Noop)
    async def noop(job: Job[Noop]) -> None:
        return None

    return await _timed_drain(
        url,
        client,
        [Noop(i) for i in range(jobs)],
        queues={"default": concurrency},
        processes=processes,
        scenario="drain",
        progress=progress,
    )


HANDLERS = ("sync", "async")


async def cpu(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    ms: float = 1.0,
    concurrency: int | None = None,
    handler: str = "sync",
    progress: Progress | None = None,
    **config: Any,
) -> dict[str, Any]:
    """``jobs`` handlers (``sync`` ones, or ``async`` ones that burn on their loop) each
    burning a calibrated ``ms`` of pure-Python CPU, at ``concurrency`` (default: 64 a
    process); ``config`` goes to the runner (``prefetch``).

    Each handler also records the CPU time its burn took, so the result carries what the
    work really cost on this machine at that moment (``burn_ms_measured``) and the rate had
    each burn cost exactly ``ms`` (``jobs_per_s_normalized``), which compares runs taken in
    faster and slower minutes."""
    if handler not in HANDLERS:
        raise ValueError(f"handler must be one of {', '.join(HANDLERS)}, got {handler!r}")
    client = AsyncClient(url)
    board = Board(jobs)

    def burn(job: Job[Burn]) -> None:
        board.put(job.args.n, burn_cpu(job.args.loops))

    async def burn_on_the_loop(job: Job[Burn]) -> None:
        burn(job)

    client.task(Burn)(burn if handler == "sync" else burn_on_the_loop)
    loops = burn_loops(ms)
    try:
        result = await _timed_drain(
            url,
            client,
            [Burn(n, loops) for n in range(jobs)],
            queues={"default": concurrency or 64 * (processes or 1)},
            processes=processes,
            scenario="cpu",
            progress=progress,
            **config,
        )
        burned_ms = statistics.fmean(board.read()) * 1000
    finally:
        board.close()
    return {
        **result,
        "variant": "" if handler == "sync" else "async handlers",
        "burn_loops": loops,
        "burn_ms": ms,
        "burn_ms_measured": round(burned_ms, 4),
        "jobs_per_s_normalized": round(result["jobs_per_s"] * burned_ms / ms, 1),
        "concurrency": concurrency or 64 * (processes or 1),
        **config,
    }


async def io(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    concurrency: int = 1000,
    ms: float = 10.0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``jobs`` async handlers each awaiting ``ms`` (``asyncio.sleep``), ``concurrency`` at
    a time: measures how much waiting the pool overlaps."""
    client = AsyncClient(url)
    client.task(Sleep)(nap)
    result = await _timed_drain(
        url,
        client,
        [Sleep(ms) for _ in range(jobs)],
        queues={"default": concurrency},
        processes=processes,
        scenario="io",
        progress=progress,
    )
    return {**result, "sleep_ms": ms, "concurrency": concurrency}


async def retry(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    concurrency: int = 1000,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Every job fails its first attempt and completes on the second: the retry path
    (deferred table, promotion) at a backoff small enough not to dominate."""
    client = AsyncClient(url)
    client.task(FailOnce)(fail_once)
    return await _timed_drain(
        url,
        client,
        [FailOnce(i) for i in range(jobs)],
        queues={"default": concurrency},
        processes=processes,
        scenario="retry",
        outcomes=2 * jobs,
        progress=progress,
        backoff=Backoff(base=0.01, jitter=0.0),
        promote_interval=0.05,
    )


async def scheduled(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    concurrency: int = 1000,
    lead: float | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``jobs`` jobs all due at one moment ``lead`` seconds ahead, the pool already idle;
    ``seconds`` runs from that moment until the last outcome commits (default config, so
    promotion runs at the shipped ``promote_interval``)."""
    client = AsyncClient(url)

    @client.task(Noop)
    async def noop(job: Job[Noop]) -> None:
        return None

    lead = lead if lead is not None else 1.0 + jobs / 20_000
    due = time.time() + lead
    try:
        run_at = _utc(due)
        await asyncio.to_thread(insert_items, url, [Noop(i) for i in range(jobs)], run_at=run_at)
        window = Window(url, "scheduled", processes)
        runner = await client.start({"default": concurrency}, processes=processes)
        await wait_done(runner, jobs, timeout=600.0 + lead, progress=progress)
        window.stop(runner, seconds=time.time() - due)
        interval = runner.config.promote_interval
    finally:
        await client.close()
    return {**window.result(jobs=jobs), "lead_s": round(lead, 3), "promote_interval": interval}


async def promote(
    url: str, *, jobs: int, processes: int | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """How fast the maintenance leader moves due jobs into the claimable table: ``jobs``
    scheduled jobs, all already due, promoted by the promoter's ``run_once`` (no handlers
    run; ``processes`` does not apply)."""
    due = time.time() + 1.0 + jobs / 50_000
    await asyncio.to_thread(insert_items, url, [Noop(i) for i in range(jobs)], run_at=_utc(due))
    await asyncio.sleep(max(0.0, due - time.time()) + 0.05)
    handlers = Handlers(Registry(), FollowupRegistry(), HookRegistry())
    maintenance = Maintenance(
        Database(url),
        RunnerConfig().maintenance(),
        followups=handlers.followups,
        hooks=HookDispatcher(handlers.hooks),
    )
    quiesce(url)
    before = Counters.read(url)
    if not await maintenance.leader.check():
        raise RuntimeError("another host leads this database's maintenance")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        started, jiffies = time.perf_counter(), cpu_jiffies()
        moved = await maintenance.promoter.run_once(conn)
        elapsed, busy = time.perf_counter() - started, busy_share(jiffies, cpu_jiffies())
    await maintenance.leader.close()
    quiesce(url)
    commits, wal = before.delta(Counters.read(url), url)
    if moved != jobs:
        raise RuntimeError(f"promoted {moved} of {jobs} due jobs")
    return {
        "scenario": "promote",
        "system": system_name(None),
        "variant": f"batch {RunnerConfig().promote_batch}",
        "processes": 0,
        "jobs": jobs,
        "seconds": round(elapsed, 4),
        "jobs_per_s": round(jobs / elapsed, 1),
        "completed": moved,
        "commits_per_job": round(commits / jobs, 4),
        "wal_bytes_per_job": round(wal / jobs, 1),
        "rss_kib": {"supervisor": peak_rss_kib(os.getpid()), "workers": []},
        "cpu_busy": busy,
        "env": environment(url),
    }


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)
