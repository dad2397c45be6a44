"""``awa-fast bench``: built-in scenarios measured against a real, durable Postgres.

Each run gets a fresh database. A scenario is ``async def name(url, *, jobs, processes=None,
...) -> dict``; every result has the same core keys (``RESULT_KEYS``) so the report can put
awa-fast and the peers (``python -m benches peers``) in one table:

- ``scenario``, ``system``, ``variant``, ``processes``, ``jobs``, ``seconds``, ``jobs_per_s``,
  ``completed`` (jobs that reached ``completed``: a run that loses jobs is visibly wrong);
- ``commits_per_job`` and ``wal_bytes_per_job`` (``pg_stat_database`` and
  ``pg_current_wal_lsn`` deltas over the measured window);
- ``rss_kib``: peak RSS (``VmHWM``) of the supervisor and of each worker process;
- ``env``: Postgres settings, package versions, CPU model and core count;
- scenario extras: ``latency_ms`` (p50/p95/p99/max), ``samples`` (sustained: time, queue
  depth, dead tuples, jobs completed).

How time is taken where a job crosses processes:

- ``latency``: a spawned producer process inserts one job per tick and takes
  ``time.time()`` right after each insert's commit returns; the handler takes ``time.time()``
  first thing and writes it into an anonymous shared ``mmap`` slot indexed by the job's
  number (created before the pool forks, so workers inherit it; no database write in the
  measured path). Pickup latency = handler start - insert commit.
- ``sustained``: end-to-end latency is ``finalized_at - created_at`` on the server's clock:
  from the insert transaction to the transaction that recorded the completion.

This module is longer than the ~800 lines the style asks for because measuring, the eight
scenarios, the producer subprocess and the runner still share private helpers; it should
become an ``awa_fast/bench/`` package (measure, scenarios, producers, run) — tracked in the
benchmark issue.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import math
import mmap
import os
import platform
import statistics
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psycopg

from awa_fast.client import AsyncClient
from awa_fast.db.migrate import migrate
from awa_fast.db.transitions import Backoff
from awa_fast.maintenance.service import Maintenance
from awa_fast.runtime.followups import FollowupRegistry
from awa_fast.runtime.hooks import HookDispatcher, HookRegistry
from awa_fast.runtime.runner import Handlers, Runner, RunnerConfig
from awa_fast.worker import Job, Registry

RESULT_KEYS = (
    "scenario",
    "system",
    "variant",
    "processes",
    "jobs",
    "seconds",
    "jobs_per_s",
    "completed",
    "commits_per_job",
    "wal_bytes_per_job",
    "rss_kib",
    "env",
)
Progress = Callable[[float], None]  # fraction done, 0..1
_serial = itertools.count()

# -- databases and counters ----------------------------------------------------------------


def fresh_database(server_url: str) -> str:
    """A new, migrated database on the server of ``server_url``."""
    name = f"awa_fast_bench_{os.getpid()}_{next(_serial)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = server_url.rsplit("/", 1)[0] + "/" + name
    migrate(url)
    return url


def drop_database(server_url: str, url: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


@dataclass(frozen=True, slots=True)
class Counters:
    """Commit count and WAL position of one database at one moment."""

    commits: int
    wal_lsn: str

    @classmethod
    def read(cls, url: str) -> Counters:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            row = conn.execute(
                "SELECT xact_commit, pg_current_wal_lsn()::text FROM pg_stat_database "
                "WHERE datname = current_database()"
            ).fetchone()
            assert row is not None
            return cls(int(row[0]), str(row[1]))

    def delta(self, later: Counters, url: str) -> tuple[int, int]:
        """(commits, WAL bytes) from this reading to ``later``."""
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (later.wal_lsn, self.wal_lsn)
            ).fetchone()
            assert row is not None
            return later.commits - self.commits, int(row[0])


# -- the machine and the server ------------------------------------------------------------

SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "wal_compression",
    "shared_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
    "max_connections",
)
PACKAGES = ("awa-fast", "psycopg", "psycopg-c", "psycopg-pool", "uvloop", "msgspec", "orjson")


def server_settings(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return {
            name: str(row[0])
            for name in SETTINGS
            if (row := conn.execute(f"SHOW {name}").fetchone()) is not None
        }


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@functools.cache
def _host() -> dict[str, Any]:
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {n: v for n in PACKAGES if (v := _package_version(n)) is not None},
    }


def environment(url: str) -> dict[str, Any]:
    """What a figure depends on besides the code: recorded with every run."""
    return {**_host(), "postgres": server_settings(url)}


# -- per-process memory --------------------------------------------------------------------


def peak_rss_kib(pid: int) -> int | None:
    """``VmHWM`` of ``pid`` (peak resident set), None once the process is gone."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def reset_peak_rss() -> None:
    """Start this process's ``VmHWM`` afresh, so one run's peak is not an earlier run's."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def rss_of(runner: Runner) -> dict[str, Any]:
    """Peak RSS of the supervisor (this process) and of each live worker process."""
    pids: list[int] = list(getattr(runner.workers, "pids", []))
    workers = [kib for pid in pids if (kib := peak_rss_kib(pid)) is not None]
    return {"supervisor": peak_rss_kib(os.getpid()), "workers": workers}


# -- statistics ----------------------------------------------------------------------------


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p95/p99/max (nearest rank) of ``values`` (non-empty), rounded to 0.001."""
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]

    return {
        "p50": round(rank(0.50), 3),
        "p95": round(rank(0.95), 3),
        "p99": round(rank(0.99), 3),
        "max": round(ordered[-1], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


# -- handlers ------------------------------------------------------------------------------


@dataclass
class Noop:
    n: int


@dataclass
class Burn:
    loops: int


@dataclass
class Sleep:
    ms: float


@dataclass
class FailOnce:
    n: int


@dataclass
class Stamp:
    n: int


def _spin(loops: int) -> float:
    """The CPU work of the ``cpu`` scenario; the same loop as the peers' drivers
    (benches/peers/_common.py), so every system does identical work per job."""
    clock = time.perf_counter
    total = 0.0
    for _ in range(loops):
        total += clock()
    return total


@functools.cache
def burn_loops(ms: float = 1.0) -> int:
    """How many ``_spin`` iterations take ``ms`` of CPU on an idle core here: a fixed amount
    of work per job (a wall-clock busy loop would count time spent descheduled as work).
    ``AWA_FAST_BENCH_CPU_ITERATIONS`` fixes the count, as the peer harness honours too."""
    fixed = os.environ.get("AWA_FAST_BENCH_CPU_ITERATIONS")
    if fixed:
        return int(fixed)
    loops = 20_000
    best = math.inf
    for _ in range(5):
        started = time.process_time()
        _spin(loops)
        best = min(best, time.process_time() - started)
    return max(1, round(loops * (ms / 1000) / max(best, 1e-9)))


def burn_cpu(job: Job[Burn]) -> None:
    """Pure-Python CPU for ``job.args.loops`` iterations (a sync handler)."""
    _spin(job.args.loops)


async def nap(job: Job[Sleep]) -> None:
    await asyncio.sleep(job.args.ms / 1000)


def fail_once(job: Job[FailOnce]) -> None:
    if job.attempt == 1:
        raise RuntimeError("the first attempt fails by design")


class StampBoard:
    """``time.time()`` per job number in an anonymous shared mapping: created before the
    pool forks, so every worker writes where the benchmark process reads."""

    _slot = struct.Struct("d")

    def __init__(self, size: int) -> None:
        self.size = size
        self.map = mmap.mmap(-1, self._slot.size * max(size, 1))

    def stamp(self, n: int) -> None:
        self._slot.pack_into(self.map, n * self._slot.size, time.time())

    def read(self) -> list[float]:
        return [t for (t,) in self._slot.iter_unpack(self.map[: self.size * self._slot.size])]

    def close(self) -> None:
        self.map.close()


# -- one measured window -------------------------------------------------------------------


@dataclass
class Window:
    """What a scenario measures between starting its pool and its last commit.

    Commit counts come from ``pg_stat_database``, which a backend updates only when it has
    been idle for a second or when it exits: so both readings are taken with no other
    session in the database (inserts run on a connection closed before the window opens;
    the final reading waits until the pool's sessions have exited).
    """

    url: str
    scenario: str
    processes: int | None
    before: Counters = field(init=False)
    started: float = field(init=False)
    elapsed: float = field(init=False, default=0.0)
    rss: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        reset_peak_rss()
        quiesce(self.url)
        self.before = Counters.read(self.url)
        self.started = time.perf_counter()

    def stop(self, runner: Runner, *, seconds: float | None = None) -> None:
        """The measured work is done: take the time and (workers still alive) peak RSS."""
        self.elapsed = time.perf_counter() - self.started if seconds is None else seconds
        self.rss = rss_of(runner)

    def result(self, *, jobs: int) -> dict[str, Any]:
        """The core keys; call after closing the client."""
        quiesce(self.url)
        commits, wal = self.before.delta(Counters.read(self.url), self.url)
        return {
            "scenario": self.scenario,
            "system": system_name(self.processes),
            "variant": "",
            "processes": self.processes or 0,
            "jobs": jobs,
            "seconds": round(self.elapsed, 4),
            "jobs_per_s": round(jobs / self.elapsed, 1),
            "completed": completed_jobs(self.url),
            "commits_per_job": round(commits / jobs, 4),
            "wal_bytes_per_job": round(wal / jobs, 1),
            "rss_kib": self.rss,
            "env": environment(self.url),
        }


def quiesce(url: str, *, timeout: float = 10.0) -> None:
    """Until no other session is connected to ``url``'s database (their stats flushed)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.01)
    raise RuntimeError(f"sessions still connected to {url} after {timeout} s")


def insert_items(url: str, items: list[Any], **options: Any) -> None:
    """COPY ``items`` in on a connection of their own, closed before measuring starts."""
    from awa_fast.producer import insert_many

    with psycopg.connect(url, autocommit=True) as conn:
        insert_many(conn, items, **options)


def system_name(processes: int | None) -> str:
    if not processes:
        return "awa-fast (1 process)"
    return f"awa-fast ({processes} worker process{'es' if processes > 1 else ''})"


def completed_jobs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM awa_fast.jobs WHERE state = 'completed'")
        return int(row.fetchone()[0])  # type: ignore[index]


async def wait_done(
    runner: Runner, count: int, *, timeout: float, progress: Progress | None = None
) -> None:
    """Until ``count`` outcomes are committed; reports progress while it waits. Waits in
    short slices so that a failing run does not leave a thread blocked for ``timeout``."""
    deadline = time.monotonic() + timeout
    committer = runner.committer
    while not await asyncio.to_thread(committer.wait_committed, count, 0.2):
        if progress is not None:
            progress(min(1.0, committer.committed / max(count, 1)))
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {committer.committed} of {count} outcomes in {timeout} s")
    if progress is not None:
        progress(1.0)


# -- throughput scenarios ------------------------------------------------------------------


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
    """Insert ``items``, start the pool, and time until ``outcomes`` (default: one per job)
    are committed."""
    jobs = len(items)
    try:
        await asyncio.to_thread(insert_items, url, items)
        window = Window(url, scenario, processes)
        runner = await client.start(queues, processes=processes, **config)
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


async def cpu(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    ms: float = 1.0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``jobs`` sync handlers each burning a calibrated ``ms`` of pure-Python CPU."""
    client = AsyncClient(url)
    client.task(Burn)(burn_cpu)
    loops = burn_loops(ms)
    result = await _timed_drain(
        url,
        client,
        [Burn(loops) for _ in range(jobs)],
        # Sync handlers run one at a time per process; the rest of a worker's share waits
        # claimed in it, so a claim (a commit) refills many jobs at once.
        queues={"default": 64 * (processes or 1)},
        processes=processes,
        scenario="cpu",
        progress=progress,
    )
    return {**result, "burn_loops": loops, "burn_ms": ms}


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
    scheduled jobs, all already due, promoted by ``Maintenance.promote_once`` (no handlers
    run; ``processes`` does not apply)."""
    due = time.time() + 1.0 + jobs / 50_000
    await asyncio.to_thread(insert_items, url, [Noop(i) for i in range(jobs)], run_at=_utc(due))
    await asyncio.sleep(max(0.0, due - time.time()) + 0.05)
    handlers = Handlers(Registry(), FollowupRegistry(), HookRegistry())
    maintenance = Maintenance(url, RunnerConfig(), handlers, HookDispatcher(handlers.hooks))
    quiesce(url)
    before = Counters.read(url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        moved = await maintenance.promote_once(conn)
        elapsed = time.perf_counter() - started
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
        "env": environment(url),
    }


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


# -- producers in their own process ------------------------------------------------------


async def _in_producer(name: str, *args: float | str) -> Any:
    """Run producer ``name`` in a fresh interpreter (``python -m awa_fast.bench``): it must
    not share an event loop with the pool it measures, nor be forked from a process that
    has threads, nor depend on how the caller's main module is written (as ``spawn`` does).
    Its JSON answer comes back on stdout."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awa_fast.bench",
        name,
        *map(str, args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"producer {name} failed ({child.returncode}): {err.decode()[-2000:]}")
    return json.loads(out)


def produce_one_by_one(url: str, rate: float, count: float) -> list[float]:
    """Insert ``Stamp(0..count-1)`` one per ``1/rate`` s, each in its own transaction;
    returns ``time.time()`` taken right after each commit returned."""
    from awa_fast.producer import insert

    committed = []
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for n in range(int(count)):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            insert(conn, Stamp(n))
            committed.append(time.time())
    return committed


def produce_at_rate(url: str, rate: float, duration: float, tick: float) -> tuple[int, float]:
    """Offer ``rate`` jobs/s for ``duration`` s: every ``tick`` s, one COPY batch of what
    fell due since the last one; returns (jobs inserted, seconds it took)."""
    from awa_fast.producer import insert_many

    inserted = 0
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for step in itertools.count(1):
            now = time.perf_counter() - start
            if now >= duration:
                break
            due = int(rate * now) - inserted
            if due > 0:
                insert_many(conn, [Noop(inserted + i) for i in range(due)])
                inserted += due
            time.sleep(max(0.0, start + step * tick - time.perf_counter()))
        return inserted, time.perf_counter() - start


async def wait_for_listener(url: str, *, timeout: float = 10.0) -> bool:
    """Until a session of this database sits in LISTEN: only then are workers idle and
    waiting for a wake-up, rather than still starting."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'idle' AND query ILIKE 'LISTEN%%'"
            )
            row = await cur.fetchone()
            if row and row[0]:
                return True
            await asyncio.sleep(0.02)
    return False


# -- latency scenarios ---------------------------------------------------------------------


async def latency(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    rate: float = 50.0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``jobs`` jobs inserted one at a time at ``rate``/s into idle workers; pickup latency
    (insert commit → handler start) percentiles in ms."""
    board = StampBoard(jobs)
    client = AsyncClient(url)

    @client.task(Stamp)
    async def stamp(job: Job[Stamp]) -> None:
        board.stamp(job.args.n)

    try:
        window = Window(url, "latency", processes)
        runner = await client.start({"default": 100}, processes=processes)
        await wait_for_listener(url)
        producing = _in_producer("produce_one_by_one", url, rate, jobs)
        committed: list[float] = await _with_progress(producing, jobs / rate, progress)
        await wait_done(runner, jobs, timeout=60.0)
        window.stop(runner)
    finally:
        await client.close()
        started = board.read()
        board.close()
    pickups = [(s - c) * 1000 for s, c in zip(started, committed, strict=True)]
    return {**window.result(jobs=jobs), "rate": rate, "latency_ms": percentiles(pickups)}


async def sustained(
    url: str,
    *,
    jobs: int,
    processes: int | None = None,
    load: float = 0.5,
    rate: float | None = None,
    duration: float = 10.0,
    concurrency: int = 1000,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """A producer offers ``rate`` no-op jobs/s (default: ``load`` x the drain rate measured
    here on ``jobs`` jobs) for ``duration`` s; completed jobs/s, end-to-end latency, and
    queue depth and dead tuples of ``jobs_hot`` sampled over time."""
    if rate is None:
        measured = await drain(url, jobs=jobs, processes=processes, concurrency=concurrency)
        rate = load * measured["jobs_per_s"]
        _truncate(url)
    client = AsyncClient(url)

    @client.task(Noop)
    async def noop(job: Job[Noop]) -> None:
        return None

    samples: list[list[float]] = []
    try:
        window = Window(url, "sustained", processes)
        runner = await client.start({"default": concurrency}, processes=processes)
        sampler = asyncio.ensure_future(
            _sample(url, runner, samples, interval=max(0.1, duration / 60))
        )
        producing = _in_producer("produce_at_rate", url, rate, duration, 0.01)
        offered, took = await _with_progress(producing, duration, progress)
        await wait_done(runner, offered, timeout=60.0 + duration)
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        window.stop(runner)
    finally:
        await client.close()
    return {
        **window.result(jobs=offered),
        "variant": f"{round(load * 100)}% of drain",
        "load": load,
        "offered_per_s": round(rate, 1),
        "duration_s": duration,
        **end_to_end(url, duration=took),
        "samples": samples,
    }


async def _with_progress(work: Awaitable[Any], duration: float, progress: Progress | None) -> Any:
    task = asyncio.ensure_future(work)
    began = time.monotonic()
    while not task.done():
        if progress is not None:
            progress(min(1.0, (time.monotonic() - began) / duration))
        await asyncio.wait([task], timeout=0.2)
    return task.result()


async def _sample(url: str, runner: Runner, samples: list[list[float]], *, interval: float) -> None:
    """Append [seconds, queue depth, dead tuples of jobs_hot, outcomes committed] every
    ``interval`` s until cancelled."""
    began = time.monotonic()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cur = await conn.execute(
                "SELECT (SELECT count(*) FROM awa_fast.jobs_hot WHERE state = 'available'), "
                "(SELECT n_dead_tup FROM pg_stat_user_tables "
                " WHERE schemaname = 'awa_fast' AND relname = 'jobs_hot')"
            )
            row = await cur.fetchone()
            assert row is not None
            at = round(time.monotonic() - began, 3)
            samples.append([at, int(row[0]), int(row[1] or 0), runner.committer.committed])
            await asyncio.sleep(interval)


def end_to_end(url: str, *, duration: float) -> dict[str, Any]:
    """Latency from insert to completion, and jobs/s completed inside the offering window
    (which opens at the first insert: the producer's start-up is not part of it). Both on
    the server's clock."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM finalized_at - created_at) * 1000, "
            "extract(epoch FROM finalized_at), extract(epoch FROM created_at) "
            "FROM awa_fast.jobs_hot WHERE state = 'completed'"
        ).fetchall()
    since = min((float(created) for _, _, created in rows), default=0.0)
    within = sum(1 for _, done, _ in rows if float(done) <= since + duration)
    return {
        "completed_per_s": round(within / duration, 1),
        "latency_ms": percentiles([float(ms) for ms, _, _ in rows] or [0.0]),
    }


def _truncate(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE awa_fast.jobs_hot, awa_fast.jobs_deferred")


# -- running scenarios ---------------------------------------------------------------------

Scenario = Callable[..., Coroutine[Any, Any, dict[str, Any]]]
SCENARIOS: dict[str, Scenario] = {
    "drain": drain,
    "cpu": cpu,
    "io": io,
    "latency": latency,
    "sustained": sustained,
    "retry": retry,
    "scheduled": scheduled,
    "promote": promote,
}
DEFAULT_JOBS = {
    "drain": 20_000,
    "cpu": 5_000,
    "io": 20_000,
    "latency": 500,
    "sustained": 20_000,
    "retry": 10_000,
    "scheduled": 10_000,
    "promote": 50_000,
}
SUSTAINED_LOADS = (0.5, 0.9)


@dataclass(frozen=True, slots=True)
class Planned:
    """One scenario configuration: ``runs`` of these make a table row."""

    scenario: str
    jobs: int
    processes: int | None
    options: dict[str, Any]

    @property
    def label(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.options.items() if k != "rate")
        where = f"p={self.processes}" if self.processes else "in-process"
        return " ".join(x for x in (self.scenario, where, extra) if x)


def plan(
    scenarios: list[str],
    *,
    jobs: int | None = None,
    processes: int | None = None,
    duration: float | None = None,
) -> list[Planned]:
    """Expand scenario names into configurations: ``cpu`` at 1..P processes when P > 1,
    ``sustained`` at each of ``SUSTAINED_LOADS``."""
    out = []
    for name in scenarios:
        if name not in SCENARIOS:
            raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
        count = jobs or DEFAULT_JOBS[name]
        if name == "cpu" and processes and processes > 1:
            out += [Planned(name, count, p, {}) for p in range(1, processes + 1)]
        elif name == "sustained":
            timing = {"duration": duration} if duration else {}
            out += [Planned(name, count, processes, {"load": x, **timing}) for x in SUSTAINED_LOADS]
        else:
            out.append(Planned(name, count, processes, {}))
    return out


def run_planned(
    server_url: str,
    planned: Planned,
    *,
    runs: int,
    progress: Callable[[int, float], None] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    drain_rate: float | None = None,
) -> list[dict[str, Any]]:
    """``runs`` runs of one configuration, each on a fresh database. ``progress(run, done)``
    is told how far each run is; ``drain_rate`` spares ``sustained`` its calibration."""
    import uvloop

    options = dict(planned.options)
    if planned.scenario == "sustained" and drain_rate:
        options["rate"] = options.get("load", 0.5) * drain_rate
    results = []
    for run in range(runs):
        url = fresh_database(server_url)
        report = functools.partial(progress, run) if progress else None
        try:
            coro = SCENARIOS[planned.scenario](
                url, jobs=planned.jobs, processes=planned.processes, progress=report, **options
            )
            results.append({**uvloop.run(coro), "run": run + 1})
            if on_result is not None:
                on_result(results[-1])
        finally:
            drop_database(server_url, url)
    return results


def run_scenario(
    server_url: str, scenario: str, *, runs: int, jobs: int, processes: int | None = None
) -> list[dict[str, Any]]:
    """Run every configuration of ``scenario`` ``runs`` times; one dict per run."""
    results = []
    for planned in plan([scenario], jobs=jobs, processes=processes):
        results += run_planned(server_url, planned, runs=runs)
    return results


def primary(result: dict[str, Any]) -> float:
    """The figure a row's median is taken by: pickup p50 for latency, else jobs/s."""
    if result["scenario"] == "latency":
        return float(result["latency_ms"]["p50"])
    return float(result["jobs_per_s"])


def median_row(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose primary figure is the median (its own counters stay consistent)."""
    ordered = sorted(results, key=primary)
    median = dict(ordered[len(ordered) // 2])
    median["median_of"] = len(results)
    median["jobs_per_s_all"] = [r["jobs_per_s"] for r in results]
    median["jobs_per_s"] = statistics.median(r["jobs_per_s"] for r in results)
    return median


def run_all(server_url: str, planned: list[Planned], *, runs: int) -> list[dict[str, Any]]:
    """Every configuration ``runs`` times, with a progress bar; ``sustained`` offers a
    share of the drain rate measured earlier in this call when there is one."""
    bar = ProgressBar(len(planned) * runs)
    drain_rates: dict[int | None, float] = {}
    results: list[dict[str, Any]] = []
    for item in planned:

        def report(run: int, done: float, label: str = item.label) -> None:
            bar.update(label, done)

        rows = run_planned(
            server_url,
            item,
            runs=runs,
            progress=report,
            on_result=lambda result: bar.finish(describe(result)),
            drain_rate=drain_rates.get(item.processes),
        )
        if item.scenario == "drain":
            drain_rates[item.processes] = float(median_row(rows)["jobs_per_s"])
        results += rows
    return results


def describe(result: dict[str, Any]) -> str:
    """One line per run for people watching."""
    name = " ".join(x for x in (result["scenario"], result["system"], result["variant"]) if x)
    line = (
        f"{name}: {result['jobs_per_s']:,.0f} jobs/s, {result['commits_per_job']:.4f} "
        f"commits/job, {result['wal_bytes_per_job']:,.0f} B WAL/job"
    )
    if "latency_ms" in result:
        lat = result["latency_ms"]
        line += f", latency p50 {lat['p50']:.2f} / p95 {lat['p95']:.2f} / p99 {lat['p99']:.2f} ms"
    return line


def save_results(path: Path, results: list[dict[str, Any]]) -> None:
    """Write ``results`` as JSON lines into ``path``, replacing earlier runs of the same
    configurations and keeping the others (``bench drain`` then ``bench latency`` into one
    folder leaves both)."""

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r.get("scenario"), r.get("system"), r.get("variant", ""))

    fresh = {key(r) for r in results}
    kept = []
    if path.exists():
        lines = path.read_text().splitlines()
        kept = [r for r in map(json.loads, filter(None, lines)) if key(r) not in fresh]
    path.write_text("".join(json.dumps(r) + "\n" for r in [*kept, *results]))


class ProgressBar:
    """A one-line progress bar on stderr (plain text, no dependency), redrawn at most ten
    times a second; on a non-terminal it prints one line per finished configuration."""

    def __init__(self, total: int, *, stream: Any = None) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.done = 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._drawn = 0.0

    def update(self, label: str, fraction: float) -> None:
        now = time.monotonic()
        if not self.tty or (now - self._drawn < 0.1 and fraction < 1.0):
            return
        self._drawn = now
        overall = (self.done + min(max(fraction, 0.0), 1.0)) / max(self.total, 1)
        filled = round(30 * overall)
        bar = "#" * filled + "." * (30 - filled)
        line = f"\r[{bar}] {overall:4.0%} {self.done + 1}/{self.total} {label}"
        self.stream.write(line[:120].ljust(120))
        self.stream.flush()

    def finish(self, summary: str) -> None:
        """One run is over: leave its summary line and move on."""
        self.done += 1
        self.stream.write(("\r" if self.tty else "") + summary.ljust(120 if self.tty else 0) + "\n")
        self.stream.flush()


PRODUCERS: dict[str, Callable[..., Any]] = {
    "produce_one_by_one": produce_one_by_one,
    "produce_at_rate": produce_at_rate,
}


def _producer_main(argv: list[str]) -> None:
    """``python -m awa_fast.bench PRODUCER URL NUMBER...``: run one producer, print JSON."""
    name, url, *numbers = argv
    print(json.dumps(PRODUCERS[name](url, *map(float, numbers))))


if __name__ == "__main__":
    _producer_main(sys.argv[1:])
