"""The claimer: claim loops, capacity reservation, rate limits, dispatch, standby starts.

Capacity lives in the in-flight table (:class:`~awa_fast.runtime.capacity.Capacity`). A
claim reserves units from the least-loaded workers first, and a handler returning
releases its unit before its commit lands. Up to ``claimers`` loops claim at once, each on
its own connection, so one flushes while the next is planned; only one idle loop at a time
watches for news (a NOTIFY, capacity given back, a full batch elsewhere), so a lone job
costs one claim, not one per loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.numeric import Int8BinaryLoader
from psycopg.types.string import ByteaBinaryLoader

from awa_fast._core import InFlight
from awa_fast.codec import decode_json
from awa_fast.db.connections import Database, connect_hot_async, connect_or_close
from awa_fast.db.queries import Q
from awa_fast.lifecycle.hooks import EventType, HookDispatcher
from awa_fast.runtime.capacity import Capacity, Workers
from awa_fast.runtime.claim.packwatch import PackWatch
from awa_fast.runtime.claim.ratelimit import TokenBucket
from awa_fast.runtime.claim.shares import Shares, Weights, within
from awa_fast.runtime.claim.standby import Standby
from awa_fast.runtime.claimed import (
    Claimed,
    Delivered,
    check_jsonb_payload,
    json_text,
)
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.host.row import Host
from awa_fast.runtime.loops import retry_delay
from awa_fast.types import JobRow, JobState, iso
from awa_fast.worker import instant

log = logging.getLogger("awa_fast.claimer")


@dataclass(frozen=True, slots=True)
class ClaimerConfig:
    claim_batch: int = 500  # jobs a claim takes at most
    claimers: int = 2  # claim loops, each on its own connection
    poll_interval: float = 1.0  # claim at least this often while idle
    capacity_recheck: float = 0.05  # between looks at capacity while a claim waits for it
    deadlines: tuple[float | None, ...] = ()  # an attempt's run time (None: no limit)
    rate_limits: tuple[tuple[float, int] | None, ...] = ()  # (rate, burst), by queue index
    # by queue index: a claim batch of its own, and seconds of priority aging
    claim_batches: tuple[int | None, ...] = ()
    agings: tuple[float | None, ...] = ()
    weights: Weights | None = None  # weighted mode (awa_fast.runtime.claim.shares)

    @classmethod
    def of(cls, config: RunnerConfig, queues: list[str]) -> ClaimerConfig:
        return cls(
            claim_batch=config.claim_batch,
            claimers=config.claimers,
            poll_interval=config.poll_interval,
            deadlines=tuple(config.deadline_for(q) for q in queues),
            rate_limits=tuple(config.queue_rate_limits.get(q) for q in queues),
            claim_batches=tuple(config.queue_claim_batches.get(q) for q in queues),
            agings=tuple(config.queue_aging.get(q) for q in queues),
            weights=Weights.of(config.global_max_workers, config.queue_weights, queues),
        )

    def batch(self, queue_index: int) -> int:
        """The most jobs one claim of ``queue_index`` takes."""
        own = self.claim_batches[queue_index] if self.claim_batches else None
        return self.claim_batch if own is None else own

    def aging(self, queue_index: int) -> float | None:
        return self.agings[queue_index] if self.agings else None


@dataclass(slots=True)
class Round:
    """What one claim round did."""

    claimed: list[int]  # jobs claimed, by queue index
    full: bool  # a queue gave all that was asked of it: more may be waiting
    starved: bool  # a queue had too little capacity free to claim


class Claimer:
    def __init__(
        self,
        database: Database,
        config: ClaimerConfig,
        *,
        capacity: Capacity,
        inflight: InFlight,
        workers: Workers,
        host: Host,
        hooks: HookDispatcher,
        give_back: Callable[[list[Claimed], str], None],
        standby: Standby | None,
        packs: PackWatch,
    ) -> None:
        self.database = database
        self.config = config
        self.queues = list(capacity.queues)
        self._capacity = capacity
        # Each queue's counters, every worker's (the pool's size is fixed at its start).
        self._counters = [
            [capacity.index(q, w) for w in range(capacity.workers)] for q in range(len(self.queues))
        ]
        self._inflight = inflight
        self._workers = workers
        self._host = host
        self._hooks = hooks
        self._give_back = give_back
        self.standby = standby
        self.packs = packs
        self._buckets = [
            None if limit is None else TokenBucket(*limit) for limit in config.rate_limits
        ]
        self._shares = Shares(
            config.weights, lambda: list(in_flight_by_queue(capacity, inflight).values())
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._watch = asyncio.Lock()  # held by the one idle claim loop waiting for news
        self._backlog = False  # the last claim came back full: more may be waiting
        # A queue's claim found too little capacity free: a handler returning is news.
        # Otherwise it is not: new jobs announce themselves with a NOTIFY.
        self._starved = False
        self._refill_wake: asyncio.TimerHandle | None = None
        self._rounds = 0  # claim rounds in flight, whose reservations hold capacity
        # A round found capacity reserved by another one in flight, whose claim may have
        # run before the news that woke it: claim again once the rounds in flight end.
        self._claim_after_rounds = False
        # Standby jobs that found no capacity free while rounds were in flight: started
        # (or given back) after them.
        self._deferred: list[tuple[int, Claimed]] = []
        self._stopping = False
        # Each queue's latest claim statement, done once its jobs are handed out.
        self._last_claim: list[asyncio.Future[None] | None] = [None] * len(self.queues)
        self.claimed_by_queue = [0] * len(self.queues)
        self.claims_by_queue = [0] * len(self.queues)  # claim statements run

    # -- news -----------------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the claim loops run on, for wake-ups from other threads."""
        self._loop = loop

    def wake(self) -> None:
        self._wake.set()

    def capacity_freed(self) -> None:
        """Handlers returned: wake claiming if it waits for capacity and a queue now has
        enough free to claim. Safe from any thread (the committer calls it as each batch
        of outcomes drains): a wake-up that finds too little free costs the loop a round,
        and a handler its core, for nothing. A wake-up already set is not sent again: the
        round it starts reads capacity after clearing it, so it sees this news too."""
        loop = self._loop
        if (
            self._starved
            and not self._wake.is_set()
            and loop is not None
            and not loop.is_closed()
            and (self._shares.weighted or any(map(self._claimable, range(len(self.queues)))))
        ):
            loop.call_soon_threadsafe(self._wake.set)

    def _claimable(self, queue_index: int) -> bool:
        """Whether the free units of ``queue_index``'s counters, every worker's, are worth
        a claim (:meth:`reserve` asks the same of the accepting workers' alone)."""
        counters = self._counters[queue_index]
        free = sum(map(self._inflight.free, counters))
        return self._worth_a_claim(queue_index, free, sum(map(self._inflight.capacity, counters)))

    def stop(self) -> None:
        """Claim no more: the claim loops end after the round they are in."""
        self._stopping = True
        self._wake.set()

    # -- loops ----------------------------------------------------------------------------

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        return await connect_claimer(self.database, application_name="awa-fast claimer")

    def loop(self, conn: psycopg.AsyncConnection[Any]) -> Callable[[], Awaitable[None]]:
        """A claim loop to supervise: on ``conn`` first, on a new connection once
        restarted, which claims at once (the round that failed may have taken the news
        with it)."""
        first = [conn]

        async def claim() -> None:
            if first:
                await self._claim_loop(first.pop())
                return
            restarted = await self.connect()
            self._wake.set()
            await self._claim_loop(restarted)

        return claim

    async def _claim_loop(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Claim on ``conn`` until stopping. Clearing the wake-up just before claiming
        means news that arrives later wakes the next watcher."""
        failures = 0
        # One cursor for every claim on a connection: the result's shape never changes.
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
                    self._backlog = (await self.claim_round(cur)).full
                    failures = 0
                except psycopg.OperationalError as exc:
                    failures += 1
                    log.warning("claim failed (%s); reconnecting", exc)
                    await asyncio.sleep(retry_delay(failures))
                    with contextlib.suppress(psycopg.Error):
                        await cur.connection.close()
                        cur = (await self.connect()).cursor(binary=True)
                    # Claim again at once, not at the next poll: the round that failed
                    # took the news with it, and a reconnect that failed is tried again.
                    self._wake.set()
                    continue
                if self._backlog:
                    self._wake.set()
        finally:
            await cur.connection.close()

    async def _await_news(self) -> None:
        """Wait for news, or for the poll interval.

        While claiming waits for capacity (``_starved``), look again every
        ``capacity_recheck``: a worker pushes an outcome just before it gives the capacity
        back, so a wake-up from the committer may come a moment early. A watcher that
        came in during a round checks again at the end of its recheck, and goes on waiting
        if that round found capacity.
        """
        deadline = time.monotonic() + self.config.poll_interval
        recheck = self.config.capacity_recheck
        while (left := deadline - time.monotonic()) > 0:
            starved = self._starved
            try:
                await asyncio.wait_for(self._wake.wait(), min(recheck, left) if starved else left)
                return
            except TimeoutError:
                if starved and self._starved:
                    return

    # -- one round ------------------------------------------------------------------------

    async def claim_round(self, cur: psycopg.AsyncCursor[Any]) -> Round:
        """Claim what capacity allows in every queue on ``cur`` (a binary cursor of a claim
        connection). Standby jobs that found capacity reserved by this round start after it."""
        self._rounds += 1
        try:
            return await self._claim_queues(cur)
        finally:
            self._rounds -= 1
            if self._claim_after_rounds and not self._rounds:
                self._claim_after_rounds = False
                self._wake.set()
            deferred, self._deferred = self._deferred, []
            for queue_index, job in deferred:
                self.start_on_standby(queue_index, [job])

    async def _claim_queues(self, cur: psycopg.AsyncCursor[Any]) -> Round:
        done = Round([0] * len(self.queues), full=False, starved=False)
        # Marked before capacity is read: outcomes drained after the read wake the next
        # watcher.
        self._starved = True
        standby = self.standby
        drained: list[int] = []  # queues whose claim took all there was, with room to spare
        if standby is not None and standby.due(time.monotonic()):
            await self.collect(cur)
        for queue_index, queue in enumerate(self.queues):
            reserved = self.reserve(queue_index)
            want = sum(n for _, n in reserved)
            if not want:
                done.starved = True
                self._claim_after_rounds = self._claim_after_rounds or self._rounds > 1
                continue
            claim = self._claim_queue(cur, queue_index, queue, reserved)
            jobs = await self._in_claim_order(queue_index, reserved, claim)
            self._shares.claimed(queue_index, wanted=want, got=len(jobs))
            self.claimed_by_queue[queue_index] += len(jobs)
            done.claimed[queue_index] = len(jobs)
            done.full = done.full or len(jobs) == want
            if len(jobs) < want and self._buckets[queue_index] is None:
                drained.append(queue_index)
        if standby is not None and drained:
            assert self._host.id is not None
            await standby.offer(cur, drained, host_id=self._host.id)
        self._starved = done.starved
        return done

    async def _in_claim_order(
        self,
        queue_index: int,
        reserved: list[tuple[int, int]],
        claim: Coroutine[Any, Any, list[Claimed]],
    ) -> list[Claimed]:
        """Run ``claim`` (for ``reserved``) and hand its jobs out, after the jobs of the
        queue's claim issued before it on another loop: that claim took the jobs ahead in
        claim order, and a worker starts what it holds in the order it is handed it."""
        before = self._last_claim[queue_index]
        mine = self._last_claim[queue_index] = asyncio.get_running_loop().create_future()
        try:
            jobs = await claim
            try:
                if before is not None and not before.done():
                    await asyncio.wait([before])
            finally:  # claimed jobs are handed out, even by a round cancelled here
                self._dispatch(jobs, queue_index, reserved)
            return jobs
        finally:
            mine.set_result(None)

    async def _claim_queue(
        self,
        cur: psycopg.AsyncCursor[Any],
        queue_index: int,
        queue: str,
        reserved: list[tuple[int, int]],
    ) -> list[Claimed]:
        """One claim statement for ``reserved`` units of ``queue``."""
        want = sum(n for _, n in reserved)
        packs = self.packs.claim(queue_index, now=time.monotonic())
        self.claims_by_queue[queue_index] += 1
        params = {
            "queue": queue,
            "limit": want,
            "deadline_s": self.config.deadlines[queue_index],
            "host_id": self._host.id,
            "aging_s": self.config.aging(queue_index),
        }
        statement = Q.job_claim_rows if packs is None else Q.job_claim_batch
        if params["aging_s"] is not None:
            statement = Q.job_claim_aged  # rows and packs alike, in aged order
        try:
            await cur.execute(statement, params)
            jobs = [Claimed._make(row) for row in await cur.fetchall()]
        except BaseException:
            for worker, n in reserved:
                self._inflight.release(self._capacity.index(queue_index, worker), n)
            self._unspend(queue_index, want)
            raise
        self._unspend(queue_index, want - len(jobs))
        if packs is not None:
            self.packs.claimed(queue_index, packs, full=len(jobs) == want)
        return jobs

    # -- capacity -------------------------------------------------------------------------

    def reserve(self, queue_index: int) -> list[tuple[int, int]]:
        """Reserve up to one claim batch of capacity, least-loaded workers first:
        (worker, units) per worker that gave any.

        While jobs are in flight, wait until a worthwhile batch is free (half a claim
        batch, at most half the queue's capacity): a claim is a commit, and claiming one
        job each time one finishes would cost a commit per job (benches/RESULTS.md,
        "Design measurements").
        """
        free = self._free_units(queue_index)
        total_free = sum(f for f, _, _ in free)
        capacity = sum(self._inflight.capacity(cap) for _, cap, _ in free)
        ceiling = self._shares.ceiling(queue_index)
        capacity = capacity if ceiling is None else min(capacity, ceiling)
        if not self._worth_a_claim(queue_index, total_free, capacity):
            return []
        remaining = self.config.batch(queue_index)
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

    def _worth_a_claim(self, queue_index: int, free: int, capacity: int) -> bool:
        """Whether ``free`` units of a queue's ``capacity`` are worth a claim's commit: half
        a claim batch, at most half the capacity, or all of it."""
        threshold = max(1, min(self.config.batch(queue_index) // 2, capacity // 2))
        return free >= threshold or free >= capacity

    def _free_units(self, queue_index: int) -> list[tuple[int, int, int]]:
        """(free units, capacity index, worker) of each accepting worker, most free first,
        no more in all than the queue's share allows."""
        caps = [(self._capacity.index(queue_index, w), w) for w in self._workers.accepting()]
        free = sorted(((self._inflight.free(cap), cap, w) for cap, w in caps), reverse=True)
        return within(free, self._shares.room(queue_index))

    def _reserve_units(self, free: list[tuple[int, int, int]], count: int) -> list[tuple[int, int]]:
        """Reserve up to ``count`` units from ``free`` (:meth:`_free_units`), in its order."""
        reserved = []
        for available, cap, worker in free:
            if count == 0 or available == 0:
                break
            got = self._inflight.reserve(cap, min(available, count))
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

    def _unspend(self, queue_index: int, tokens: int) -> None:
        """Give a rate-limited queue back the tokens of jobs its claim did not start."""
        bucket = self._buckets[queue_index]
        if bucket is not None and tokens:
            bucket.spend(-tokens)

    def _dispatch(
        self, jobs: list[Claimed], queue_index: int, reserved: list[tuple[int, int]]
    ) -> None:
        """Hand each worker its share of ``jobs``; give back reservations left unused."""
        start = 0
        wants_started = bool(self._hooks.registry.hooks)
        given = self._spread(len(jobs), queue_index, reserved)
        for (worker, n), count in zip(reserved, given, strict=True):
            cap = self._capacity.index(queue_index, worker)
            mine = jobs[start : start + count]
            start += count
            if count < n:
                self._inflight.release(cap, n - count)
            if not mine:
                continue
            acquire = self._inflight.acquire_slot
            batch = [
                Delivered(job, acquire(job.id, job.run_lease, cap, worker), cap) for job in mine
            ]
            if wants_started:
                for job in mine:
                    if self._hooks.registry.wants(job.kind):
                        self._hooks.submit(EventType.STARTED, started_row(job))
            self._workers.deliver(worker, batch)

    def _spread(self, count: int, queue_index: int, reserved: list[tuple[int, int]]) -> list[int]:
        """How many of ``count`` jobs each reservation takes: each job goes to the worker
        holding fewest of the queue's jobs, within its reservation, so that a claim that
        came back short still spreads over the workers (a worker holds more jobs than it
        runs at once: prefetch)."""
        if count >= sum(n for _, n in reserved):
            return [n for _, n in reserved]
        index = self._capacity.index
        heap = [
            (self._inflight.in_flight(index(queue_index, worker)) - n, i)
            for i, (worker, n) in enumerate(reserved)
        ]
        heapq.heapify(heap)
        given = [0] * len(reserved)
        for _ in range(count):
            held, i = heapq.heappop(heap)
            given[i] += 1
            if given[i] < reserved[i][1]:
                heapq.heappush(heap, (held + 1, i))
        return given

    # -- standby claims -------------------------------------------------------------------

    async def collect(self, cur: psycopg.AsyncCursor[Any]) -> None:
        """Collect our spent standby claims, and start their jobs not started yet."""
        assert self.standby is not None and self._host.id is not None
        await self.standby.collect(
            cur, host_id=self._host.id, now=time.monotonic(), start=self.start_on_standby
        )

    def start_on_standby(self, queue_index: int, jobs: list[Claimed]) -> None:
        """Start jobs started on our standby claims, as claimed jobs are started. One that
        finds no capacity free waits for the claim rounds in flight, which may hold it
        only as a reservation, and is given back unstarted if the queue is still full
        after them: a queue's concurrency holds."""
        assert self.standby is not None
        reserved = self._reserve_units(self._free_units(queue_index), len(jobs))
        taken = sum(n for _, n in reserved)
        self._dispatch(jobs[:taken], queue_index, reserved)
        self.claimed_by_queue[queue_index] += taken
        self.standby.started_by_queue[queue_index] += taken
        if self._rounds:
            self._deferred += [(queue_index, job) for job in jobs[taken:]]
        elif jobs[taken:]:
            self._give_back(jobs[taken:], "its queue had no capacity left for it")

    async def withdraw_standby(self, *, start: bool) -> None:
        """Take back this host's waiting standby claims, and collect the jobs started on
        the others: before the workers drain, to run (``start``); after, to give back
        unstarted, for jobs whose inserting transaction held a claim through the first
        withdraw. A database out of reach leaves the claims to the leader once this
        host's row is gone."""
        standby, host_id = self.standby, self._host.id
        if standby is None or host_id is None:
            return
        try:
            # Not named as a claimer: nothing is claimed on it.
            conn = await connect_claimer(self.database, application_name="awa-fast standby")
            async with conn:
                cur = conn.cursor(binary=True)
                await standby.withdraw(cur, host_id=host_id)
                if start:
                    await self.collect(cur)
                    return
                await standby.collect(
                    cur, host_id=host_id, now=time.monotonic(), start=self._give_back_late
                )
        except psycopg.OperationalError as exc:
            log.warning("standby claims not withdrawn (%s)", exc)

    def _give_back_late(self, queue_index: int, jobs: list[Claimed]) -> None:
        self._give_back(jobs, "its host stopped before the job started")


def in_flight_by_queue(capacity: Capacity, inflight: InFlight) -> Mapping[str, int]:
    """Attempts running now, by queue."""
    workers = range(capacity.workers)
    return {
        queue: sum(inflight.in_flight(capacity.index(q, w)) for w in workers)
        for q, queue in enumerate(capacity.queues)
    }


async def connect_claimer(
    database: Database, *, application_name: str
) -> psycopg.AsyncConnection[Any]:
    """A hot connection whose claimed rows load as :class:`Claimed` expects them; closed,
    not dropped, if the caller is cancelled meanwhile."""
    return await connect_or_close(_open_claimer(database, application_name))


async def _open_claimer(database: Database, application_name: str) -> psycopg.AsyncConnection[Any]:
    conn = await connect_hot_async(database, application_name=application_name)
    try:
        await load_jsonb_payloads(conn)
    except BaseException:
        await conn.close()
        raise
    # Timestamps as the integers Postgres sends (awa_fast.worker.instant decodes them).
    conn.adapters.register_loader("timestamptz", Int8BinaryLoader)
    return conn


async def load_jsonb_payloads(conn: psycopg.AsyncConnection[Any]) -> None:
    """Have this claim connection load jsonb whole, as its binary payload, with psycopg's
    C bytea loader: decoding happens once, where the handler runs, into the handler's
    own type (benches/RESULTS.md, "Design measurements")."""
    conn.adapters.register_loader("jsonb", ByteaBinaryLoader)
    cur = await conn.execute("SELECT '{}'::jsonb", binary=True)
    row = await cur.fetchone()
    check_jsonb_payload(row[0] if row else b"")


def started_row(job: Claimed) -> JobRow:
    """The JobRow a Started event carries."""
    return JobRow(
        id=job.id,
        kind=job.kind,
        queue=job.queue,
        args=decode_json(json_text(job.args)),
        state=JobState.Running,
        priority=job.priority,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        run_at=iso(instant(job.run_at)),
        created_at=iso(instant(job.created_at)),
        run_lease=job.run_lease,
        tags=job.tags,
    )
