"""The single-process runner: claim, execute on uvloop, commit through the outcome ring.

Its parts are the ones the multiprocess pool uses (executor, outcome ring, in-flight table,
committer); here they share one process. Capacity is taken from the in-flight table before a
claim and given back when a handler returns, not when its commit lands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson
import psycopg
from psycopg.types.numeric import Int8BinaryLoader
from psycopg.types.string import ByteaBinaryLoader

from awa_fast import descriptors
from awa_fast._core import InFlight, OutcomeRing
from awa_fast.codec import decode_json
from awa_fast.db.connections import attempts_params, connect_hot, connect_hot_async
from awa_fast.db.migrate import require_migrated
from awa_fast.db.queries import Q
from awa_fast.db.transitions import Target
from awa_fast.descriptors import Descriptor
from awa_fast.errors import ConfigError
from awa_fast.logs import Throttled
from awa_fast.maintenance import periodic
from awa_fast.maintenance.periodic import PeriodicJob
from awa_fast.maintenance.service import Maintenance
from awa_fast.runtime.attempt_writer import AttemptWriter
from awa_fast.runtime.committer import Committer
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.executor import ID, JSONB_BINARY_VERSION, KIND, LEASE, Executor
from awa_fast.runtime.followups import FollowupRegistry
from awa_fast.runtime.hooks import EventType, HookDispatcher, HookRegistry
from awa_fast.runtime.packwatch import PackWatch
from awa_fast.runtime.ratelimit import TokenBucket, check_rate_limit
from awa_fast.runtime.standby import Standby
from awa_fast.runtime.supervisor import Supervisor, retry_delay
from awa_fast.types import JobRow, JobState
from awa_fast.worker import Registry, instant

log = logging.getLogger("awa_fast.runner")

T = TypeVar("T")

CAPACITY_RECHECK = 0.05  # seconds between looks at capacity while claiming waits for it
# What the listener LISTENs to, in order: new jobs, news of packs, admin cancels, and jobs
# started on this host's standby claims.
CHANNELS = ("awa_fast_jobs", "awa_fast_packs", "awa_fast_cancel", "awa_fast_standby")


@dataclass(slots=True)
class Handlers:
    """Everything registered on a client that the runtime needs."""

    registry: Registry
    followups: FollowupRegistry
    hooks: HookRegistry
    schedules: dict[str, PeriodicJob] = field(default_factory=dict)  # by name
    queue_descriptors: dict[str, Descriptor] = field(default_factory=dict)  # by queue
    kind_descriptors: dict[str, Descriptor] = field(default_factory=dict)  # by kind


def shares(concurrency: int, workers: int) -> list[int]:
    """Split a queue's concurrency over workers as evenly as possible (sum is exact)."""
    base, extra = divmod(concurrency, workers)
    return [base + (1 if w < extra else 0) for w in range(workers)]


class Workers(Protocol):
    """Where claimed jobs run: this process, or forked worker processes."""

    count: int

    def prefork(self) -> None: ...

    async def start(self) -> None: ...

    def accepting(self) -> Sequence[int]: ...

    def deliver(self, worker: int, rows: list[tuple[Any, ...]]) -> None: ...

    async def drain(self, timeout: float) -> None: ...

    def evict(self, job_id: int, run_lease: int, *, reason: str) -> None: ...

    def alive(self) -> int:
        """Processes running handlers now (for awa_fast_worker_processes)."""
        ...

    @property
    def exits(self) -> Mapping[str, int]:
        """Worker processes ended, by cause (awa_fast.runtime.pool.EXIT_CAUSES): none
        when handlers run in-process."""
        ...


class LiveRunners:
    """The runners of this process between their start() and stop(), for a reader that is
    on none of their loops (awa_fast.telemetry). While it watches, each runner that stops
    is also handed to it once, after stop(), so that its final counts are read too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # runners start and stop on any loop's thread
        self._live: dict[Runner, None] = {}  # in start order
        self._stopped: list[Runner] | None = None  # None: nobody watches
        self._parents: list[Runner] = []  # a forked child's inheritance: see _forget
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """In a forked child (a pool worker, say): none of these runners runs here, so the
        child starts with none (telemetry it starts would export copies of its parent's
        numbers), and with a free lock (a parent thread may have held it at the fork).
        They stay referenced: a child finalizes nothing of its parent's."""
        self._lock = threading.Lock()
        self._parents += self._live
        self._live, self._stopped = {}, None

    def add(self, runner: Runner) -> None:
        with self._lock:
            self._live[runner] = None

    def remove(self, runner: Runner) -> None:
        with self._lock:
            if runner in self._live:
                del self._live[runner]
                if self._stopped is not None:
                    self._stopped.append(runner)

    def watch(self, on: bool) -> None:
        """Start (or stop) keeping stopped runners for :meth:`take`."""
        with self._lock:
            self._stopped = [] if on else None

    def take(self) -> tuple[list[Runner], list[Runner]]:
        """The live runners, and those stopped since the last take (forgotten now)."""
        with self._lock:
            stopped: list[Runner] = []
            if self._stopped is not None:
                stopped, self._stopped = self._stopped, []
            return list(self._live), stopped


LIVE = LiveRunners()


class Runner:
    """The host side: claims for every worker, heartbeats, promotes, commits.

    Capacity lives in the in-flight table, one counter per (queue, worker) at index
    ``queue * workers + worker``; a claim reserves from the least-loaded workers first, and
    a handler returning releases its unit (before its commit lands). Workers are either this
    process (:class:`~awa_fast.runtime.local.LocalWorkers`) or forked processes
    (:class:`~awa_fast.runtime.pool.ForkedWorkers`); the rest is the same.
    """

    def __init__(
        self,
        dsn: str,
        handlers: Handlers,
        queues: Mapping[str, int],
        config: RunnerConfig,
        *,
        processes: int | None = None,
    ) -> None:
        from awa_fast.runtime.local import LocalWorkers
        from awa_fast.runtime.pool import ForkedWorkers

        self.dsn = dsn
        self.handlers = handlers
        self.queues = dict(queues)
        self._queue_index = {queue: index for index, queue in enumerate(self.queues)}
        self._not_understood = Throttled(log)
        descriptors.check_queues(handlers.queue_descriptors, self.queues)
        self.config = config
        count = 1 if processes is None else processes
        if count < 1:
            raise ConfigError(f"processes must be >= 1, got {processes}")
        capacities = [c for q in self.queues.values() for c in shares(q, count)]
        self.inflight = InFlight(capacities, sum(self.queues.values()) + 64)
        self.ring = OutcomeRing(65536, 128)
        self.hooks = HookDispatcher(handlers.hooks)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.committer = Committer(
            lambda: connect_hot(dsn, application_name="awa-fast committer"),
            self.ring,
            registry=handlers.registry,
            followups=handlers.followups,
            hooks=self.hooks,
            batch_size=config.commit_batch,
            batch_limit=config.commit_batch_max,
            max_delay=config.commit_delay,
            retry_backoff=config.backoff,
            dlq_params=config.dlq_params(),
            on_drain=self.capacity_freed,
            inflight=self.inflight,
        )
        self.workers: Workers = (
            LocalWorkers(self) if processes is None else ForkedWorkers(self, count)
        )
        self.maintenance = Maintenance(dsn, config, handlers, self.hooks)
        # attempts whose cancel flag we set: (when, why), to recycle handlers that ignore it
        self._flagged: dict[tuple[int, int], tuple[float, str]] = {}
        self._wake = asyncio.Event()
        self._watch = asyncio.Lock()  # held by the one idle claimer waiting for news
        self._backlog = False  # the last claim came back full: more may be waiting
        # A queue's claim found too little capacity free: a handler returning is news.
        # Otherwise it is not (it cost an empty claim per batch of jobs finished, half of
        # all claims beside a producer): new jobs announce themselves with a NOTIFY.
        self._starved = False
        # Which queues' claims look at packs.
        self._packs = PackWatch(len(self.queues), every=config.poll_interval)
        self._stopping = False
        self.supervisor = Supervisor(lambda: self._stopping)
        self._commit_stop = threading.Event()
        self._commit_thread: threading.Thread | None = None
        self._services: list[asyncio.Task[None]] = []
        self._claimers: list[asyncio.Task[None]] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._last_beat = 0.0  # time.monotonic() of the last heartbeat that landed
        self._descriptors_due = 0.0  # time.monotonic() of the next descriptor refresh
        self.claimed_by_queue = [0] * len(self.queues)  # jobs claimed, by queue index
        self.claims_by_queue = [0] * len(self.queues)  # claim statements run, by queue index
        self._buckets = [
            TokenBucket(*check_rate_limit(q, config.queue_rate_limits[q]))
            if q in config.queue_rate_limits
            else None
            for q in self.queues
        ]
        self._refill_wake: asyncio.TimerHandle | None = None
        # Standby claims (awa_fast.runtime.standby), for queues whose claims no rate
        # limit holds back: a job started on one is a job whose start took no token.
        self.standby = (
            Standby(
                list(self.queues),
                deadlines=[config.deadline_for(q) for q in self.queues],
                recheck=config.poll_interval,
            )
            if config.standby
            else None
        )
        self._rounds = 0  # claim rounds in flight, whose reservations hold capacity
        # Standby jobs that found no capacity free while rounds were in flight: started
        # (or given back) after them. (queue index, row)
        self._deferred: list[tuple[int, tuple[Any, ...]]] = []
        self._metrics: asyncio.Server | None = None
        self.host_id: int | None = None  # this host's row in awa_fast.hosts, once started

    def make_executor(self, threads: ThreadPoolExecutor | None = None) -> Executor:
        """The executor every worker (local or forked) runs handlers with."""
        return Executor(
            self.handlers.registry,
            self.ring,
            self.inflight,
            self.config.backoff,
            AttemptWriter(self.dsn),
            threads,
            dlq_queues=self.config.dlq_for(list(self.queues)),
        )

    def capacity_index(self, queue_index: int, worker: int) -> int:
        return queue_index * self.workers.count + worker

    # -- health (awa_fast.runtime.health) -------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    def claiming(self) -> bool:
        """Some claim loop is running (each retries a lost connection on its own)."""
        return any(not task.done() for task in self._claimers)

    def loops_down(self) -> tuple[str, ...]:
        """The long-lived loops down now (awa_fast.runtime.supervisor), and the committer
        if its thread has ended before the stop."""
        down = set(self.supervisor.down)
        thread = self._commit_thread
        if thread is not None and not thread.is_alive() and not self._stopping:
            down.add("committer")
        return tuple(sorted(down))

    def heartbeat_age(self, now: float) -> float | None:
        """Seconds since the last heartbeat landed; None before this host registered."""
        return None if self.host_id is None else now - self._last_beat

    def heartbeat_alive(self, now: float) -> bool:
        """The heartbeat loop runs and its last beat landed within two intervals."""
        age = self.heartbeat_age(now)
        running = self._heartbeat is not None and not self._heartbeat.done()
        return running and age is not None and age <= 2 * self.config.heartbeat_interval

    def in_flight_by_queue(self) -> dict[str, int]:
        workers = range(self.workers.count)
        return {
            queue: sum(self.inflight.in_flight(self.capacity_index(q, w)) for w in workers)
            for q, queue in enumerate(self.queues)
        }

    # -- lifecycle ------------------------------------------------------------------------

    def prefork(self) -> None:
        """Fork worker processes now, while this process has no loop, thread or connection."""
        self.workers.prefork()

    async def start(self) -> None:
        """Serve metrics first, so that a port in use refuses to start with nothing
        running; a start that fails later lets the port go again."""
        from awa_fast.runtime.metrics import serve_metrics

        self._loop = asyncio.get_running_loop()
        if self.config.metrics_port is not None:
            self._metrics = await serve_metrics(self, self.config.metrics_port)
        try:
            await self._start()
        except BaseException:
            await self._stop_metrics()
            raise
        LIVE.add(self)

    async def _start(self) -> None:
        await self._at_start(self._require_migrated, what="schema check")
        await self.workers.start()
        await self._at_start(self._register_new_host, what="host registration")
        claim_conns = [
            await self._at_start(self._connect, what="claim connection")
            for _ in range(self.config.claimers)
        ]
        self.hooks.start()
        stop = self._commit_stop
        self._commit_thread = threading.Thread(
            target=self.supervisor.run_thread,
            args=("committer", lambda: self.committer.run(stop), stop),
            name="awa-fast-committer",
            daemon=True,
        )
        self._commit_thread.start()
        self._wake.set()  # claim what is already waiting at once
        run = self.supervisor.run
        self._claimers = [
            asyncio.create_task(run(f"claimer {n}", self._claimer(conn)))
            for n, conn in enumerate(claim_conns)
        ]
        self._heartbeat = asyncio.create_task(run("heartbeat", self._heartbeat_loop))
        self._services = [
            asyncio.create_task(run("listener", self._listen_loop)),
            asyncio.create_task(
                run("maintenance", lambda: self.maintenance.run(lambda: self._stopping))
            ),
            self._heartbeat,
        ]

    async def stop(self, timeout: float | None = None) -> None:
        """Stop claiming; let handlers finish (up to ``timeout``) while heartbeats go on;
        then set cancel flags, stop the workers, and flush the committer."""
        try:
            await self._stop(self.config.shutdown_timeout if timeout is None else timeout)
        finally:
            LIVE.remove(self)

    async def _stop(self, timeout: float) -> None:
        self._stopping = True
        self._wake.set()
        await asyncio.gather(*self._claimers, return_exceptions=True)
        await self._withdraw_standby(start=True)
        await self.workers.drain(timeout)
        await self._withdraw_standby(start=False)
        for task in self._services:
            task.cancel()
        await asyncio.gather(*self._services, return_exceptions=True)
        self._commit_stop.set()
        if self._commit_thread is not None:
            # Bounded: a committer retrying a lost database must not hold the process.
            await asyncio.to_thread(self._commit_thread.join, 2 * self.committer.flush_timeout)
            if self._commit_thread.is_alive():
                log.error("committer still busy at shutdown; unflushed jobs are left to rescue")
        await self._forget_host()
        self.hooks.stop()
        await self._stop_metrics()

    async def _withdraw_standby(self, *, start: bool) -> None:
        """Take back this host's waiting standby claims, and collect the jobs started on
        the others: before the workers drain, to run (``start``); after, to give back
        unstarted, for the jobs whose inserting transaction held a claim through the
        first withdraw and committed during the drain. A database out of reach leaves
        the claims to the leader once this host's row is gone."""
        standby = self.standby
        if standby is None or self.host_id is None:
            return
        try:
            # Not named as a claimer: nothing is claimed on it (benches/cpu_split.py counts
            # the claimers' backends by their name while they are connected).
            conn = await connect_claimer(self.dsn, application_name="awa-fast standby")
            async with conn:
                cur = conn.cursor(binary=True)
                await standby.withdraw(cur, host_id=self.host_id)
                if start:
                    await self._collect(standby, cur)
                    return
                await standby.collect(
                    cur, host_id=self.host_id, now=time.monotonic(), start=self._give_back_late
                )
        except psycopg.OperationalError as exc:
            log.warning("standby claims not withdrawn (%s)", exc)

    async def _stop_metrics(self) -> None:
        """Close the metrics endpoint (kept until the end, so that a probe during the
        drain sees the client shutting down)."""
        server, self._metrics = self._metrics, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _require_migrated(self) -> None:
        """Refuse to start, before anything runs, on a schema older than this code's."""
        await asyncio.to_thread(require_migrated, self.dsn)

    async def _register_new_host(self) -> None:
        """This host's row, and the periodic jobs and descriptors registered on its
        client, on one connection."""
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await periodic.register(conn, list(self.handlers.schedules.values()))
            await descriptors.register(
                conn,
                queues=list(self.handlers.queue_descriptors.values()),
                kinds=list(self.handlers.kind_descriptors.values()),
            )
            self._descriptors_due = time.monotonic() + self.config.descriptor_refresh_every()
            await self._register_host(conn)

    async def _register_host(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A row in awa_fast.hosts before the first claim: claims stamp their rows with
        its id, and the leader rescues them if the row's heartbeat goes stale."""
        name = f"{socket.gethostname()}:{os.getpid()}"
        cur = await conn.execute(Q.host_register, {"name": name})
        row = await cur.fetchone()
        assert row is not None
        self.host_id = int(row[0])
        self._last_beat = time.monotonic()

    async def _forget_host(self) -> None:
        """Remove this host's row once nothing runs here; an attempt still running (its
        handler ignored the shutdown) leaves the row to go stale, and the leader to rescue
        it."""
        ids, _ = self.inflight.running()
        if ids or self.host_id is None:
            return
        with contextlib.suppress(psycopg.Error):
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                await conn.execute(Q.host_forget, {"id": self.host_id})

    def capacity_freed(self) -> None:
        """Handlers returned (a local one, or outcomes the committer drained): wake claiming
        if it waits for capacity. Safe from any thread."""
        if self._starved:
            self._wake_threadsafe()

    def _wake_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    def wake(self) -> None:
        self._wake.set()

    # -- claiming -------------------------------------------------------------------------

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await connect_claimer(self.dsn, application_name="awa-fast claimer")

    async def _at_start(
        self, step: Callable[[], Awaitable[T]], *, what: str, attempts: int = 4
    ) -> T:
        """``step()`` (a connection or the host's registration) for ``start``, which fails
        fast when the database cannot be reached, but not on one session cut off while it
        was being set up (a restart or ``pg_terminate_backend`` at that moment): that is
        retried a few times, as the claim loop retries it later."""
        for attempt in range(attempts - 1):
            try:
                return await step()
            except psycopg.OperationalError as exc:
                log.warning("%s failed at start (%s); retrying", what, exc)
                await asyncio.sleep(retry_delay(attempt))
        return await step()

    def _claimer(self, conn: psycopg.AsyncConnection[Any]) -> Callable[[], Awaitable[None]]:
        """A claim loop to supervise: on ``conn`` first, on a new connection once
        restarted (the loop closes its connection as it ends), which claims at once: the
        round that failed may have taken the news with it."""
        first = [conn]

        async def claim() -> None:
            if first:
                await self._claim_loop(first.pop())
                return
            restarted = await self._connect()
            self._wake.set()
            await self._claim_loop(restarted)

        return claim

    async def _claim_loop(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Claim on ``conn`` until stopping.

        One idle claimer at a time watches for news (a NOTIFY, capacity given back, a full
        batch elsewhere) and claims on it, while any others wait their turn to watch: a
        lone job costs one claim, not one per claimer, and a claim starts alongside one in
        flight only when there is more to take. Clearing the wake-up just before claiming
        means news that arrives later wakes the next watcher."""
        failures = 0
        # One cursor for every claim on a connection (the loop holds the cursor, and reaches
        # its connection through it): a claim's result has the same columns each time, and
        # a new cursor per claim cost the supervisor 50-60 us of its 140-210 (a one-row
        # claim, benches/RESULTS.md).
        cur = conn.cursor(binary=True)
        try:
            while not self._stopping:
                async with self._watch:
                    if not self._backlog and not self._stopping:
                        await self._await_news()
                    self._wake.clear()
                if self._stopping:
                    break
                try:
                    self._backlog = await self._claim_round(cur)
                    failures = 0
                except psycopg.OperationalError as exc:
                    failures += 1
                    log.warning("claim failed (%s); reconnecting", exc)
                    await asyncio.sleep(retry_delay(failures))
                    with contextlib.suppress(psycopg.Error):
                        await cur.connection.close()
                        cur = (await self._connect()).cursor(binary=True)
                    continue
                if self._backlog:
                    self._wake.set()
        finally:
            await cur.connection.close()

    async def _await_news(self) -> None:
        """Wait for news, or for the poll interval.

        While claiming waits for capacity (``_starved``), look again every
        CAPACITY_RECHECK: a worker pushes an outcome just before it gives the capacity
        back, so a wake-up from the committer may come a moment early. ``_starved`` is
        also marked while a claim round runs, so a watcher that came in then checks again
        at the end of its recheck and goes on waiting if that round found capacity. A
        watcher that claimed there instead kept an idle runner's two claimers claiming in
        turn every 50 ms.
        """
        deadline = time.monotonic() + self.config.poll_interval
        while (left := deadline - time.monotonic()) > 0:
            starved = self._starved
            try:
                await asyncio.wait_for(
                    self._wake.wait(), min(CAPACITY_RECHECK, left) if starved else left
                )
                return
            except TimeoutError:
                if starved and self._starved:
                    return

    def _reserve(self, queue_index: int) -> list[tuple[int, int]]:
        """Reserve up to one claim batch of capacity, least-loaded workers first.

        While jobs are in flight, wait until a worthwhile batch is free (half a claim
        batch, at most half the queue's capacity): a claim is a commit, and claiming one
        job each time one finishes would cost a commit per job and starve the handlers of
        CPU. Half a batch, not a whole one, refills the workers sooner while a claim waits
        on its fsync (a drain ran about as fast as with claims of 250, which beat claims
        of 500 by 7-20 %), and a claim still takes up to a whole batch of what has arrived
        (beside a producer, claims of 250 cost their backend 10.0-10.1 us a job, this
        8.1-8.5; benches/RESULTS.md).
        """
        free = self._free_units(queue_index)
        total_free = sum(f for f, _, _ in free)
        capacity = sum(self.inflight.capacity(cap) for _, cap, _ in free)
        threshold = max(1, min(self.config.claim_batch // 2, capacity // 2))
        if total_free < threshold and total_free < capacity:
            return []
        remaining = self.config.claim_batch
        bucket = self._buckets[queue_index]
        if bucket is not None:
            now = time.monotonic()
            remaining = min(remaining, bucket.available(now))
            if not remaining:
                self._wake_at_refill(bucket.wait(now))
                return []
        reserved = self._reserve_units(free, remaining)
        if bucket is not None:
            bucket.spend(sum(n for _, n in reserved))
        return reserved

    def _free_units(self, queue_index: int) -> list[tuple[int, int, int]]:
        """(free units, capacity index, worker) of each accepting worker, most free first."""
        caps = [(self.capacity_index(queue_index, w), w) for w in self.workers.accepting()]
        return sorted(((self.inflight.free(cap), cap, w) for cap, w in caps), reverse=True)

    def _reserve_units(self, free: list[tuple[int, int, int]], count: int) -> list[tuple[int, int]]:
        """Reserve up to ``count`` units from ``free`` (:meth:`_free_units`), in its order:
        (worker, units) per worker that gave any."""
        reserved = []
        for available, cap, worker in free:
            if count == 0 or available == 0:
                break
            got = self.inflight.reserve(cap, min(available, count))
            if got:
                reserved.append((worker, got))
                count -= got
        return reserved

    def _wake_at_refill(self, delay: float) -> None:
        """Claim again once a rate-limited queue has a token (one timer for all queues:
        the earliest is enough, the claim round looks at every queue)."""
        handle = self._refill_wake
        loop = asyncio.get_running_loop()
        if handle is not None:
            if handle.when() <= loop.time() + delay:
                return
            handle.cancel()
        self._refill_wake = loop.call_later(delay, self._refilled)

    def _refilled(self) -> None:
        self._refill_wake = None
        self.wake()

    async def _claim_round(self, cur: psycopg.AsyncCursor[Any]) -> bool:
        """Claim what capacity allows in every queue on ``cur`` (a binary cursor of a claim
        connection); True when a queue gave all that was asked of it (more may be
        waiting). Standby jobs that found capacity reserved by a round start after it."""
        self._rounds += 1
        try:
            return await self._claim_queues(cur)
        finally:
            self._rounds -= 1
            deferred, self._deferred = self._deferred, []
            for queue_index, row in deferred:
                self._start_on_standby(queue_index, row)

    async def _claim_queues(self, cur: psycopg.AsyncCursor[Any]) -> bool:
        full = starved = False
        # Marked before capacity is read: outcomes drained after the read wake the next
        # watcher.
        self._starved = True
        standby = self.standby
        drained: list[int] = []  # queues whose claim took all there was, with room to spare
        if standby is not None and standby.due(time.monotonic()):
            await self._collect(standby, cur)
        for queue_index, queue in enumerate(self.queues):
            reserved = self._reserve(queue_index)
            want = sum(n for _, n in reserved)
            if not want:
                starved = True
                continue
            packs = self._packs.claim(queue_index, now=time.monotonic())
            self.claims_by_queue[queue_index] += 1
            try:
                await cur.execute(
                    Q.job_claim_rows if packs is None else Q.job_claim_batch,
                    {
                        "queue": queue,
                        "limit": want,
                        "deadline_s": self.config.deadline_for(queue),
                        "host_id": self.host_id,
                    },
                )
                rows = await cur.fetchall()
            except BaseException:
                for worker, n in reserved:
                    self.inflight.release(self.capacity_index(queue_index, worker), n)
                self._unspend(queue_index, want)
                raise
            self._unspend(queue_index, want - len(rows))
            if packs is not None:
                self._packs.claimed(queue_index, packs, full=len(rows) == want)
            self._dispatch(rows, queue_index, reserved)
            self.claimed_by_queue[queue_index] += len(rows)
            full = full or len(rows) == want
            if len(rows) < want and self._buckets[queue_index] is None:
                drained.append(queue_index)
        if standby is not None and drained:
            assert self.host_id is not None
            await standby.offer(cur, drained, host_id=self.host_id)
        self._starved = starved
        return full

    async def _collect(self, standby: Standby, cur: psycopg.AsyncCursor[Any]) -> None:
        """Collect our spent standby claims, and start their jobs not started yet."""
        assert self.host_id is not None
        await standby.collect(
            cur,
            host_id=self.host_id,
            now=time.monotonic(),
            start=lambda queue_index, rows: self._start_on_standby(queue_index, *rows),
        )

    def _give_back_late(self, queue_index: int, rows: list[tuple[Any, ...]]) -> None:
        """Jobs started on our standby claims after the drain: back to available."""
        self.give_back(rows, reason="its host stopped before the job started")

    def _start_on_standby(self, queue_index: int, *rows: tuple[Any, ...]) -> None:
        """Start jobs started on our standby claims, as claimed rows are started. One
        that finds no capacity free waits for the claim rounds in flight, which may hold
        it only as a reservation, and goes back to available unstarted (its attempt given
        back) if the queue is still full after them: a queue's concurrency holds."""
        assert self.standby is not None
        reserved = self._reserve_units(self._free_units(queue_index), len(rows))
        taken = sum(n for _, n in reserved)
        self._dispatch(list(rows[:taken]), queue_index, reserved)
        self.claimed_by_queue[queue_index] += taken
        self.standby.started_by_queue[queue_index] += taken
        if self._rounds:
            self._deferred += [(queue_index, row) for row in rows[taken:]]
        else:
            self.give_back(rows[taken:], reason="its queue had no capacity left for it")

    def give_back(self, rows: Sequence[Sequence[Any]], *, reason: str) -> None:
        """Started rows whose handler never started: back to available through the
        committer, unstarted (the attempt is not counted)."""
        payload = orjson.dumps({"reason": reason})
        for row in rows:
            kind = self.handlers.registry.index_of(row[KIND])
            self.ring.push(row[ID], row[LEASE], int(Target.RELEASED), kind, 0.0, payload)

    def _unspend(self, queue_index: int, tokens: int) -> None:
        """Give a rate-limited queue back the tokens of jobs its claim did not start."""
        bucket = self._buckets[queue_index]
        if bucket is not None and tokens:
            bucket.spend(-tokens)

    def _dispatch(
        self, rows: list[tuple[Any, ...]], queue_index: int, reserved: list[tuple[int, int]]
    ) -> None:
        """Hand each worker its share of ``rows``; give back reservations left unused."""
        start = 0
        wants_started = bool(self.handlers.hooks.hooks)
        for worker, n in reserved:
            cap = self.capacity_index(queue_index, worker)
            mine = rows[start : start + n]
            start += len(mine)
            if len(mine) < n:
                self.inflight.release(cap, n - len(mine))
            if not mine:
                continue
            batch = [
                (*row, self.inflight.acquire_slot(row[0], row[1], cap, worker), cap) for row in mine
            ]
            if wants_started:
                for row in mine:
                    if self.hooks.registry.wants(row[2]):
                        self.hooks.submit(EventType.STARTED, started_row(row))
            self.workers.deliver(worker, batch)

    # -- services -------------------------------------------------------------------------

    async def _listen_loop(self) -> None:
        """Wake claiming on new jobs (one NOTIFY per inserting statement), and on news of
        packs (awa_fast.runtime.packwatch); start the jobs started on this host's standby
        claims, and flip cancel flags for admin cancels of attempts running here. Anyone
        may send these notes: each is a hint, read in batches (:meth:`_heard`)."""
        while not self._stopping:
            try:
                # A claimer's connection: collects of standby claims run on it.
                conn = await connect_claimer(self.dsn, application_name="awa-fast listener")
                async with conn:
                    for channel in CHANNELS:
                        await conn.execute(f"LISTEN {channel}")
                    # news may have gone unheard while disconnected
                    self._packs.heard()
                    if self.standby is not None:
                        self.standby.heard()
                    self._wake.set()
                    cur = conn.cursor(binary=True)
                    while True:
                        # what arrived together; notes that come during _heard wait
                        notes = [note async for note in conn.notifies(stop_after=1)]
                        await self._heard(cur, notes)
            except psycopg.OperationalError as exc:
                log.warning("LISTEN connection lost (%s); polling until it is back", exc)
                await asyncio.sleep(self.config.poll_interval)

    async def _heard(self, cur: psycopg.AsyncCursor[Any], notes: list[psycopg.Notify]) -> None:
        """Act on notes heard together, on the listener's connection ``cur``. Nothing is
        started or flagged on a note's word: a standby note has this host collect its spent
        claims, and a cancel note's attempt is flagged once read as cancelled. A note that
        does not parse is logged and skipped. Claimers are woken last: a job started on a
        standby claim of ours takes its unit before a claim round can take them all."""
        cancels: dict[int, int] = {}  # job id -> run lease
        standby = wake = False
        for note in notes:
            try:
                if note.channel == "awa_fast_cancel":
                    job_id, lease = parse_cancel(note.payload)
                    cancels[job_id] = lease
                elif note.channel == "awa_fast_standby":
                    standby = standby or int(note.payload) == self.host_id
                elif note.payload in self._queue_index:
                    if note.channel == "awa_fast_packs":
                        self._packs.heard(self._queue_index[note.payload])
                    wake = True
            except ValueError:
                self._not_understood.warning(
                    "a NOTIFY on %s not understood: %.200r", note.channel, note.payload
                )
        if standby:
            await self._standby_heard(cur)
        if wake:
            self._wake.set()
        if cancels:
            await self._confirm_cancels(cur, cancels)

    async def _standby_heard(self, cur: psycopg.AsyncCursor[Any]) -> None:
        """A job started on one of our standby claims, a note says: collect our spent
        claims at once, on the listener's own connection (no claimer is woken first, nor
        waited for), and wake a claimer to offer a claim again. Stopping, the jobs are
        left to the collect after the drain, which gives them back."""
        standby = self.standby
        if standby is None:
            return
        standby.heard()
        if not self._stopping:
            await self._collect(standby, cur)
        self._wake.set()

    async def _confirm_cancels(self, cur: psycopg.AsyncCursor[Any], noted: dict[int, int]) -> None:
        """Flag the attempts running here that ``noted`` (job id -> run lease) names and
        that an admin has really cancelled (one read for all of them)."""
        running = set(zip(*self.inflight.running(), strict=True))
        asked = {job_id: lease for job_id, lease in noted.items() if (job_id, lease) in running}
        if not asked:
            return
        await cur.execute(Q.job_cancelled_attempts, attempts_params(asked))
        for job_id, lease in await cur.fetchall():
            self._flag(job_id, lease, why="cancelled by admin")

    def _flag(self, job_id: int, lease: int, *, why: str) -> None:
        """Set an attempt's cancel flag (its handler sees job.is_cancelled())."""
        if self.inflight.cancel(job_id, lease) and self._loop is not None:
            self._flagged.setdefault((job_id, lease), (self._loop.time(), why))

    def _unflag(self, ended: list[tuple[int, int]]) -> None:
        """Forget flagged attempts that ended; their workers take jobs again, so claim."""
        for attempt in ended:
            del self._flagged[attempt]
        if ended:
            self.wake()

    def flagged_workers(self) -> set[int]:
        """Workers running an attempt whose cancel flag is set: until it ends, or its
        worker is killed for ignoring it, a worker gets no new jobs. A handler stuck in a
        CPU loop blocks its whole process; a job delivered there would only wait, and be
        lost when the process is killed (a retry once went that way, spending an attempt)."""
        if not self._flagged:
            return set()
        flagged = self._flagged.keys()
        return {
            worker
            for worker in range(self.workers.count)
            if not flagged.isdisjoint(self.inflight.held_by(worker))
        }

    async def _heartbeat_loop(self) -> None:
        await self._periodic(
            self.config.heartbeat_interval, self._heartbeat_once, name="awa-fast heartbeat"
        )

    async def _periodic(self, interval: float, step: Any, *, name: str) -> None:
        """Run ``step(conn)`` every ``interval`` seconds on a connection of its own, which
        pg_stat_activity shows as ``name``."""
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            while not self._stopping:
                try:
                    if conn is None or conn.closed:
                        conn = await connect_hot_async(self.dsn, application_name=name)
                    await step(conn)
                except psycopg.OperationalError as exc:
                    log.warning("%s failed (%s); retrying", getattr(step, "__name__", step), exc)
                    if conn is not None:
                        await conn.close()
                    conn = None
                await asyncio.sleep(interval)
        finally:
            if conn is not None:
                await conn.close()

    async def _heartbeat_once(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """This host's heartbeat (and, when due, its descriptors' refresh), then one UPDATE
        for every attempt running here. Attempts it no longer owns (cancelled, rescued) or
        that are past their deadline get their cancel flag; a handler still running
        ``deadline_grace`` after that has its worker recycled."""
        cur = await conn.execute(Q.host_heartbeat, {"id": self.host_id})
        if await cur.fetchone() is None:
            log.warning(
                "host %s was taken for dead and its attempts rescued; registering again",
                self.host_id,
            )
            await self._register_host(conn)
        self._last_beat = time.monotonic()
        await self._refresh_descriptors(conn)
        ids, leases = self.inflight.running()
        if not ids:
            self._unflag(list(self._flagged))
            return
        running = set(zip(ids, leases, strict=True))
        newest: dict[int, int] = {}  # an older attempt of a job cannot own its row
        for job_id, lease in running:
            newest[job_id] = max(lease, newest.get(job_id, lease))
        params = {**attempts_params(newest), "host_id": self.host_id}
        cur = await conn.execute(Q.job_heartbeat_many, params)
        owned = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
        for attempt in running:
            overdue = owned.get(attempt)
            if overdue is None:
                self._flag(*attempt, why="no longer owned (cancelled, rescued or resolved)")
            elif overdue:
                self._flag(*attempt, why="deadline exceeded")
        assert self._loop is not None
        now = self._loop.time()
        grace = self.config.deadline_grace
        self._unflag([attempt for attempt in self._flagged if attempt not in running])
        for attempt, (since, why) in list(self._flagged.items()):
            if now - since > grace:
                del self._flagged[attempt]
                self.workers.evict(
                    *attempt, reason=f"{why}; its handler ignored cancellation for {grace:g}s"
                )

    async def _refresh_descriptors(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Mark this host's descriptors seen when a refresh is due (riding on the
        heartbeat and its connection), so that retention keeps them while it runs."""
        now = time.monotonic()
        if now < self._descriptors_due:
            return
        mine = [*self.handlers.queue_descriptors.values(), *self.handlers.kind_descriptors.values()]
        await descriptors.refresh(conn, mine)
        self._descriptors_due = now + self.config.descriptor_refresh_every()


def parse_cancel(payload: str) -> tuple[int, int]:
    """The attempt a note on awa_fast_cancel names, ``<job id>:<run lease>`` (ValueError
    for anything else)."""
    job_id, _, lease = payload.partition(":")
    return int(job_id), int(lease)


async def connect_claimer(dsn: str, *, application_name: str) -> psycopg.AsyncConnection[Any]:
    """A hot connection whose claimed rows come back in the shape the executor reads."""
    conn = await connect_hot_async(dsn, application_name=application_name)
    await load_jsonb_payloads(conn)
    # A claimed row's timestamps as the integers Postgres sends (microseconds since
    # 2000-01-01 UTC, whatever the server's TimeZone; awa_fast.worker.instant): a claimed
    # row took the supervisor 0.38 us to load with run_at and created_at as datetimes in
    # UTC, 0.19 with them as integers.
    conn.adapters.register_loader("timestamptz", Int8BinaryLoader)
    return conn


async def load_jsonb_payloads(conn: psycopg.AsyncConnection[Any]) -> None:
    """Have this claim connection load jsonb whole, as its binary payload (a version byte,
    then the JSON text), with psycopg's C bytea loader: decoding happens once, where the
    handler runs, into the handler's own type. A Python loader that cut the version byte
    took 0.43 us of the 0.80 a claimed row costs the supervisor to load; this one takes
    0.05, and the byte is cut where the payload is decoded (executor.json_text)."""
    conn.adapters.register_loader("jsonb", ByteaBinaryLoader)
    cur = await conn.execute("SELECT '{}'::jsonb", binary=True)
    row = await cur.fetchone()
    check_jsonb_payload(row[0] if row else b"")


def check_jsonb_payload(payload: bytes) -> None:
    """Refuse a server whose jsonb binary payload has another version: claiming stops
    there, once a connection, instead of every job failing later as undecodable."""
    version = payload[0] if payload else None
    if version != JSONB_BINARY_VERSION:
        raise psycopg.NotSupportedError(
            f"jsonb binary format version {version}; awa-fast reads {JSONB_BINARY_VERSION}"
        )


def started_row(row: tuple[Any, ...]) -> JobRow:
    """The JobRow a Started event carries, from a claimed row."""
    from awa_fast.runtime.executor import (
        ARGS,
        ATTEMPT,
        CREATED_AT,
        MAX_ATTEMPTS,
        PRIORITY,
        QUEUE,
        RUN_AT,
        TAGS,
        json_text,
    )

    return JobRow(
        id=row[ID],
        kind=row[KIND],
        queue=row[QUEUE],
        args=decode_json(json_text(row[ARGS])),
        state=JobState.Running,
        priority=row[PRIORITY],
        attempt=row[ATTEMPT],
        max_attempts=row[MAX_ATTEMPTS],
        run_at=instant(row[RUN_AT]),
        created_at=instant(row[CREATED_AT]),
        run_lease=row[LEASE],
        tags=row[TAGS],
    )
