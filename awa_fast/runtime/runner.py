"""The runner: builds the runtime's parts, starts them, and stops them in order.

One runner serves one client's queues on this host. Its parts each own one concern and
get their collaborators explicitly (docs/architecture.md has the picture):

* the claimer claims for every worker and dispatches (awa_fast.runtime.claim.claimer);
* the listener turns NOTIFYs into wake-ups, standby starts and cancel flags, once the rows
  confirm them (awa_fast.runtime.claim.listener);
* the heartbeat renews the host and its attempts and recycles ignored cancels
  (awa_fast.runtime.host.heartbeat);
* the committer thread commits the outcome ring (awa_fast.runtime.committer);
* maintenance runs the leader's tasks (awa_fast.maintenance);
* the workers run handlers: this process (awa_fast.runtime.work.local) or forked processes
  (awa_fast.runtime.work.pool), through a narrow
  :class:`~awa_fast.runtime.work.context.WorkerContext`.

The long-lived loops are restarted when they fail (awa_fast.runtime.loops). Readers outside the
runtime see a :class:`~awa_fast.runtime.snapshot.Snapshot`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import psycopg

from awa_fast import descriptors
from awa_fast._core import InFlight, OutcomeRing
from awa_fast.db.connections import Database, connect_hot, held_open, planner_settings_missing
from awa_fast.db.migrate import require_migrated
from awa_fast.lifecycle.handlers import Handlers
from awa_fast.lifecycle.hooks import HookDispatcher
from awa_fast.lifecycle.transitions import Target
from awa_fast.maintenance import periodic
from awa_fast.maintenance.service import Maintenance
from awa_fast.runtime.capacity import Capacity, Workers
from awa_fast.runtime.claim.claimer import Claimer, ClaimerConfig, in_flight_by_queue
from awa_fast.runtime.claim.listener import Listener, ListenerConfig
from awa_fast.runtime.claim.packwatch import PackWatch
from awa_fast.runtime.claim.shares import Weights
from awa_fast.runtime.claim.standby import Standby
from awa_fast.runtime.claimed import Claimed
from awa_fast.runtime.committer import Committer
from awa_fast.runtime.config import RunnerConfig, count
from awa_fast.runtime.host.flags import CancelFlags
from awa_fast.runtime.host.heartbeat import Heartbeat, HeartbeatConfig
from awa_fast.runtime.host.row import Host, QueueSettings
from awa_fast.runtime.loops import Loops, retry_delay
from awa_fast.runtime.metrics import serve_metrics
from awa_fast.runtime.snapshot import LIVE, Snapshot
from awa_fast.runtime.work.context import WorkerContext, push_unstarted
from awa_fast.runtime.work.local import LocalWorkers
from awa_fast.runtime.work.pool import EXIT_CAUSES, ForkedWorkers

log = logging.getLogger("awa_fast.runner")
PLANNER_SETTINGS_MISSING = "behind the transaction pooler, hot planner settings are not in effect"

T = TypeVar("T")


class Runner:
    """The host side of one client: claims, heartbeats, listens, commits, maintains."""

    def __init__(
        self,
        dsn: str,
        handlers: Handlers,
        queues: Mapping[str, int],
        config: RunnerConfig,
        *,
        processes: int | None = None,
    ) -> None:
        descriptors.check_queues(handlers.queue_descriptors, queues)
        workers = 1 if processes is None else count("processes", processes, low=1)
        # How every part connects, the workers' too: given to each, not looked up.
        self.database = database = Database(dsn, pooled=config.transaction_pooling)
        self.handlers = handlers
        self.config = config
        self.queues = dict(queues)
        self.capacity = Capacity(self.queues, workers, config.held_ahead)
        self.inflight = InFlight(self.capacity.counters(), self.capacity.slots() + 64)
        self.ring = OutcomeRing(65536, 128)
        self.hooks = HookDispatcher(handlers.hooks)
        self.host = Host(
            database,
            session=database.session(direct=config.direct_dsn),
            queues=self._host_queues(),
        )
        self._stopping = False
        self.loops = Loops(lambda: self._stopping)
        self.flags = CancelFlags(self.inflight, workers=workers, on_ended=self._wake)
        self.workers: Workers = self._workers(processes)
        self.claimer = self._claimer()
        self.listener = Listener(
            database.session(direct=config.direct_dsn),
            ListenerConfig(reconnect_delay=config.poll_interval),
            host=self.host,
            claimer=self.claimer,
            inflight=self.inflight,
            flags=self.flags,
        )
        self.heartbeat = Heartbeat(
            HeartbeatConfig.of(config, list(self.queues)),
            host=self.host,
            inflight=self.inflight,
            flags=self.flags,
            workers=self.workers,
            descriptors=[*handlers.queue_descriptors.values(), *handlers.kind_descriptors.values()],
        )
        self.committer = self._committer()
        self.maintenance = Maintenance(
            database, config.maintenance(), followups=handlers.followups, hooks=self.hooks
        )
        self._commit_stop = threading.Event()
        self._commit_thread: threading.Thread | None = None
        self._claimers: list[asyncio.Task[None]] = []
        self._services: list[asyncio.Task[None]] = []
        self._metrics: asyncio.Server | None = None

    # -- building -------------------------------------------------------------------------

    def _host_queues(self) -> dict[str, QueueSettings]:
        limits, prefetch = self.config.queue_rate_limits, self.capacity.prefetch
        return {
            queue: QueueSettings(
                concurrency=concurrency, rate_limit=limits.get(queue), prefetch=prefetch
            )
            for queue, concurrency in self.queues.items()
        }

    def _workers(self, processes: int | None) -> Workers:
        context = WorkerContext(
            database=self.database,
            config=self.config,
            capacity=self.capacity,
            registry=self.handlers.registry,
            followups=self.handlers.followups,
            inflight=self.inflight,
            ring=self.ring,
            wake=self._wake,
            capacity_freed=self._capacity_freed,
            flagged_workers=self.flags.workers,
        )
        if processes is None:
            return LocalWorkers(context)
        return ForkedWorkers(context, processes)

    def _claimer(self) -> Claimer:
        queues = list(self.queues)
        standby = None
        if self.config.standby:
            deadlines = [self.config.deadline_for(q) for q in queues]
            standby = Standby(queues, deadlines=deadlines, recheck=self.config.poll_interval)
        return Claimer(
            self.database,
            ClaimerConfig.of(self.config, queues),
            capacity=self.capacity,
            inflight=self.inflight,
            workers=self.workers,
            host=self.host,
            hooks=self.hooks,
            give_back=self._give_back,
            standby=standby,
            packs=PackWatch(len(queues), every=self.config.poll_interval),
        )

    def _committer(self) -> Committer:
        config = self.config
        return Committer(
            lambda: connect_hot(self.database, application_name="awa-fast committer"),
            self.ring,
            registry=self.handlers.registry,
            followups=self.handlers.followups,
            hooks=self.hooks,
            config=config.committer(),
            on_drain=self._capacity_freed,
            inflight=self.inflight,
        )

    def _wake(self) -> None:
        self.claimer.wake()

    def _capacity_freed(self) -> None:
        self.claimer.capacity_freed()

    def _give_back(self, jobs: list[Claimed], reason: str) -> None:
        push_unstarted(self.ring, self.handlers.registry, jobs, reason=reason)

    # -- reading --------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    def snapshot(self) -> Snapshot:
        """This runner's numbers now (safe from any thread)."""
        now = time.monotonic()

        def by_queue(numbers: list[int]) -> dict[str, int]:
            return dict(zip(self.queues, numbers, strict=True))

        standby = self.claimer.standby
        stats, upkeep = self.committer.stats, self.maintenance.stats
        running, prefetched = self._attempts_by_queue()
        return Snapshot(
            queues=dict(self.queues),
            weights=self._weights(),
            in_flight=in_flight_by_queue(self.capacity, self.inflight),
            running=running,
            prefetched=prefetched,
            claimed=by_queue(self.claimer.claimed_by_queue),
            claims=by_queue(self.claimer.claims_by_queue),
            started_on_standby=by_queue(
                standby.started_by_queue if standby else [0] * len(self.queues)
            ),
            committed={t.name.lower(): self.committer.committed_by_code[t] for t in Target},
            stale=stats.stale,
            batches=stats.batches,
            failed_batches=stats.failed_batches,
            worker_processes=self.workers.alive(),
            worker_exits={cause: self.workers.exits.get(cause, 0) for cause in EXIT_CAUSES},
            leader=self.maintenance.leader.is_leader,
            heartbeat_age=self.host.age(now),
            promoted=upkeep.promoted,
            rescued=dict(upkeep.rescued),
            deleted=upkeep.deleted,
            claiming=any(not task.done() for task in self._claimers),
            heartbeat_alive=self.heartbeat.alive(now),
            stopping=self._stopping,
            loops_down=self._loops_down(),
        )

    def _weights(self) -> dict[str, tuple[int, int]]:
        """Weighted mode's (min_workers, weight) of each queue; none outside it."""
        config, queues = self.config, list(self.queues)
        weights = Weights.of(config.global_max_workers, config.queue_weights, queues)
        if weights is None:
            return {}
        return {q: (weights.minimums[i], weights.weights[i]) for i, q in enumerate(queues)}

    def _attempts_by_queue(self) -> tuple[dict[str, int], dict[str, int]]:
        """The slots held, by queue: running (their handler started) and prefetched
        (claimed ahead, waiting in their worker); the units a claim round reserves are in
        neither."""
        names = list(self.queues)
        running, prefetched = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
        for _, _, counter, started in self.inflight.attempts():
            (running if started else prefetched)[names[counter // self.capacity.workers]] += 1
        return running, prefetched

    def _loops_down(self) -> tuple[str, ...]:
        """The supervised loops down now, the committer if its thread has ended before the
        stop, and the workers' fork server once it has ended."""
        down = set(self.loops.down) | set(self.workers.down)
        thread = self._commit_thread
        if thread is not None and not thread.is_alive() and not self._stopping:
            down.add("committer")
        return tuple(sorted(down))

    # -- lifecycle ------------------------------------------------------------------------

    def prefork(self) -> None:
        """Fork worker processes now, while this process has no loop, thread or connection."""
        self.workers.prefork()

    async def start(self) -> None:
        """Serve metrics first, so that a port in use refuses to start with nothing
        running; a start that fails later lets the port and the host's row go again."""
        self.claimer.bind(asyncio.get_running_loop())
        if self.config.metrics_port is not None:
            self._metrics = await serve_metrics(self, self.config.metrics_port)
        try:
            await self._start()
        except BaseException:
            await self.host.forget()  # a row registered before the failure, and its lock
            await self._stop_metrics()
            raise
        LIVE.add(self)

    async def _start(self) -> None:
        await at_start(
            lambda: asyncio.to_thread(require_migrated, self.database.dsn), what="schema check"
        )
        await self.workers.start()
        await at_start(self._register, what="host registration")
        claim_conns = await self._claim_connections()
        if self.database.pooled:
            await self._warn_of_planner_settings(claim_conns[0])
        self.hooks.start()
        stop = self._commit_stop
        self._commit_thread = threading.Thread(
            target=self.loops.run_thread,
            args=("committer", lambda: self.committer.run(stop), stop),
            name="awa-fast-committer",
            daemon=True,
        )
        self._commit_thread.start()
        self.claimer.wake()  # claim what is already waiting at once
        run, stopping = self.loops.run, lambda: self._stopping
        self._claimers = [
            asyncio.create_task(run(f"claimer {n}", self.claimer.loop(conn)))
            for n, conn in enumerate(claim_conns)
        ]
        self._services = [
            asyncio.create_task(run("heartbeat", lambda: self.heartbeat.run(stopping))),
            asyncio.create_task(run("listener", lambda: self.listener.run(stopping))),
        ]
        if self.config.run_maintenance:  # else left to other hosts (maintenance-only ones)
            self._services.append(
                asyncio.create_task(run("maintenance", lambda: self.maintenance.run(stopping)))
            )

    async def _warn_of_planner_settings(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Say so when the pooler's sessions lack the hot planner settings, which the runtime
        cannot apply through it: without ``jit = off`` a large queue's claims compile
        themselves, each taking hundreds of milliseconds."""
        missing = await planner_settings_missing(conn)
        if missing:
            log.warning(
                "%s: %s; set them in the pooler's database entry (docs/pgbouncer.md)",
                PLANNER_SETTINGS_MISSING,
                ", ".join(missing),
                extra={"settings": missing},
            )

    async def _claim_connections(self) -> list[psycopg.AsyncConnection[Any]]:
        """One connection per claimer; those made are closed if a later one fails."""
        conns: list[psycopg.AsyncConnection[Any]] = []
        try:
            for _ in range(self.config.claimers):
                conns.append(await at_start(self.claimer.connect, what="claim connection"))
        except BaseException:
            for conn in conns:
                await conn.close()
            raise
        return conns

    async def _register(self) -> None:
        await register(self.database, self.handlers, self.host)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop claiming; let handlers finish (up to ``timeout``) while heartbeats go on;
        then set cancel flags, stop the workers, and flush the committer."""
        try:
            await self._stop(self.config.shutdown_timeout if timeout is None else timeout)
        finally:
            LIVE.remove(self)

    async def _stop(self, timeout: float) -> None:
        self._stopping = True
        self.claimer.stop()
        await asyncio.gather(*self._claimers, return_exceptions=True)
        await self.claimer.withdraw_standby(start=True)
        await self.workers.drain(timeout)
        await self.claimer.withdraw_standby(start=False)
        for task in self._services:
            task.cancel()
        await asyncio.gather(*self._services, return_exceptions=True)
        self._commit_stop.set()
        if self._commit_thread is not None:
            # Bounded: a committer retrying a lost database must not hold the process.
            await asyncio.to_thread(
                self._commit_thread.join, 2 * self.committer.config.flush_timeout
            )
            if self._commit_thread.is_alive():
                log.error("committer still busy at shutdown; unflushed jobs are left to rescue")
        if not self.inflight.running()[0]:
            await self.host.forget()
        else:  # the lock goes: the leader rescues what still runs
            await self.host.close()
        self.hooks.stop()
        await self._stop_metrics()

    async def _stop_metrics(self) -> None:
        """Close the metrics endpoint (kept until the end, so that a probe during the
        drain sees the client shutting down)."""
        server, self._metrics = self._metrics, None
        if server is not None:
            server.close()
            await server.wait_closed()


async def register(database: Database, handlers: Handlers, host: Host) -> None:
    """The periodic jobs and descriptors registered on a client, on one connection, then
    its host's row, on the host's own (awa_fast.runtime.host.row)."""
    async with await psycopg.AsyncConnection.connect(
        database.dsn,
        autocommit=True,
        application_name="awa-fast runner",
        prepare_threshold=database.prepare_threshold(),
        **held_open(database.dsn),
    ) as conn:
        await periodic.register(conn, list(handlers.schedules.values()))
        await descriptors.register(
            conn,
            queues=list(handlers.queue_descriptors.values()),
            kinds=list(handlers.kind_descriptors.values()),
        )
    await host.register()


async def at_start(step: Callable[[], Awaitable[T]], *, what: str, attempts: int = 4) -> T:
    """``step()`` for ``start``, which fails fast when the database cannot be reached, but
    not on one session cut off while it was being set up (a restart or
    ``pg_terminate_backend`` at that moment): that is retried a few times."""
    for attempt in range(attempts - 1):
        try:
            return await step()
        except psycopg.OperationalError as exc:
            log.warning("%s failed at start (%s); retrying", what, exc)
            await asyncio.sleep(retry_delay(attempt))
    return await step()
