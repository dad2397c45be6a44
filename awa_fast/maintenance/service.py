"""The maintenance composition: every host runs it; only the elected leader runs the
services, each on its own interval, on one connection.

Each service lives in its own module and does its work in one ``run_once`` pass, which
tests drive directly. Every transaction of a pass that changes rows is fenced by the
leader's term (:meth:`awa_fast.maintenance.leader.Leader.fenced`): a pass of a leader
whose term is over raises :class:`~awa_fast.maintenance.leader.Deposed` having changed
nothing. The passes that run every second or more often look first, with one unfenced
read, and open a fenced transaction only when they have work: that is what an idle leader
costs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import psycopg

from awa_fast.db.connections import Database
from awa_fast.maintenance.batch_ops import BatchOps, BatchOpsConfig
from awa_fast.maintenance.cleaner import Cleaner, CleanerConfig
from awa_fast.maintenance.counts import Counts, CountsConfig
from awa_fast.maintenance.cron import Cron, CronConfig
from awa_fast.maintenance.descriptor_cleaner import DescriptorCleaner, DescriptorCleanerConfig
from awa_fast.maintenance.leader import Deposed, Leader
from awa_fast.maintenance.promoter import Promoter, PromoterConfig
from awa_fast.maintenance.rescuer import Rescuer, RescuerConfig
from awa_fast.maintenance.rings import Rings, RingsConfig
from awa_fast.maintenance.stats import MaintenanceStats
from awa_fast.maintenance.vacuum import Vacuum, VacuumConfig
from awa_fast.runtime.followups import FollowupRegistry
from awa_fast.runtime.hooks import HookDispatcher

if TYPE_CHECKING:
    from awa_fast.runtime.config import RunnerConfig

log = logging.getLogger("awa_fast.maintenance")


class Registered(Protocol):
    """What maintenance reads of a runner's handlers: the follow-ups rescues enqueue."""

    @property
    def followups(self) -> FollowupRegistry: ...


class ServiceConfigs(NamedTuple):
    """Each service's configuration."""

    promoter: PromoterConfig
    rescuer: RescuerConfig
    cleaner: CleanerConfig
    descriptor_cleaner: DescriptorCleanerConfig
    vacuum: VacuumConfig
    cron: CronConfig
    batch_ops: BatchOpsConfig
    counts: CountsConfig


def service_configs(config: RunnerConfig) -> ServiceConfigs:
    """The services' configurations from the runner's settings, which name them."""
    return ServiceConfigs(
        promoter=PromoterConfig(interval=config.promote_interval, batch=config.promote_batch),
        rescuer=RescuerConfig(
            interval=config.rescue_interval,
            backstop_interval=config.backstop_interval,
            batch=config.rescue_batch,
            heartbeat_staleness=config.heartbeat_staleness,
            deadline_grace=config.deadline_grace,
            backoff=config.backoff,
            dlq=config.dlq_params(),
        ),
        cleaner=CleanerConfig(
            interval=config.cleanup_interval,
            batch=config.cleanup_batch,
            completed_retention=config.completed_retention,
            failed_retention=config.failed_retention,
            queue_retention=config.queue_retention,
        ),
        descriptor_cleaner=DescriptorCleanerConfig(
            interval=config.cleanup_interval, retention=config.descriptor_retention
        ),
        vacuum=VacuumConfig(interval=config.vacuum_interval, dead_tuples=config.vacuum_dead_tuples),
        cron=CronConfig(interval=config.cron_interval),
        batch_ops=BatchOpsConfig(interval=config.batch_interval, chunk=config.batch_chunk),
        counts=CountsConfig(interval=config.count_interval),
    )


class Maintenance:
    """The services built from a runner's ``config``, run while this host leads."""

    def __init__(
        self, database: Database, config: RunnerConfig, handlers: Registered, hooks: HookDispatcher
    ) -> None:
        self.database = database
        self.config = config
        self.leader = leader = Leader(database, interval=config.election_interval)
        self.stats = stats = MaintenanceStats()
        self.instance = uuid.uuid4()  # recorded as runner_instance by batch operations
        configs = service_configs(config)
        self.promoter = Promoter(leader=leader, stats=stats, config=configs.promoter)
        self.rescuer = Rescuer(
            dsn=database.dsn,
            leader=leader,
            followups=handlers.followups,
            hooks=hooks,
            stats=stats,
            config=configs.rescuer,
        )
        self.cleaner = Cleaner(leader=leader, stats=stats, config=configs.cleaner)
        self.descriptor_cleaner = DescriptorCleaner(
            leader=leader, stats=stats, config=configs.descriptor_cleaner
        )
        self.vacuum = Vacuum(stats=stats, config=configs.vacuum)
        self.rings = Rings(leader=leader, stats=stats, config=RingsConfig())
        self.cron = Cron(leader=leader, stats=stats, config=configs.cron)
        self.batch_ops = BatchOps(
            leader=leader, runner_instance=self.instance, config=configs.batch_ops
        )
        self.counts = Counts(leader=leader, stats=stats, config=configs.counts)
        self._next_at: dict[str, float] = {}  # when each pass is next due, by the loop's clock

    async def run(self, stopping: Callable[[], bool]) -> None:
        """Run the passes that are due, round after round, until ``stopping()``; a failed
        election ends it, for its supervisor."""
        conn: psycopg.AsyncConnection[Any] | None = None
        election: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        try:
            await self.leader.check()
            # renewals on a task of their own: a long pass must not let the term lapse
            election = asyncio.create_task(self._elect(), name="awa-fast election")
            while not stopping():
                if election.done():
                    election.result()  # its exception ends this loop, for its supervisor
                pause = self.promoter.config.interval
                try:
                    if self.leader.is_leader:
                        if conn is None or conn.closed:
                            conn = await self.leader.connect(
                                application_name="awa-fast maintenance"
                            )
                        pause = await self._round(conn, loop.time())
                except Deposed:
                    pass  # the leader logged it; its next election decides what follows
                except psycopg.OperationalError as exc:
                    if conn is None or conn.broken:  # not a deadlock: the server went
                        self.leader.unreachable()
                    log.warning("maintenance pass failed (%s); retrying", exc)
                    if conn is not None:
                        await conn.close()
                    conn = None
                await asyncio.sleep(pause)
        finally:
            try:
                if election is not None:
                    election.cancel()
                    await asyncio.gather(election, return_exceptions=True)  # raised above
            finally:  # a stop's cancel may land in that wait, if the loop ended just before
                if conn is not None:
                    await conn.close()
                await self.leader.close()

    async def _elect(self) -> None:
        """Renew the term (or try for one) every election interval."""
        while True:
            await asyncio.sleep(self.config.election_interval)
            await self.leader.check()

    async def _round(self, conn: psycopg.AsyncConnection[Any], now: float) -> float:
        """Promote what is due, then run each other pass due at ``now``; returns the pause
        before the next round."""
        pause = await self.promoter.step(conn)
        rescue = self.rescuer.config
        if self._due("rescue", rescue.interval, now):
            backstop = self._due("backstop", rescue.backstop_interval, now)
            await self.rescuer.run_once(conn, backstop=backstop)
        if self._due("clean", self.cleaner.config.interval, now):
            await self.cleaner.run_once(conn)
        if self._due("descriptors", self.descriptor_cleaner.config.interval, now):
            await self.descriptor_cleaner.run_once(conn)
        if self._due("vacuum", self.vacuum.config.interval, now):
            await self.vacuum.run_once(conn)
        if self._due("rings", self.rings.config.interval, now):
            await self.rings.run_once(conn)
        if self._due("cron", self.cron.config.interval, now):
            await self.cron.run_once(conn)
        if self._due("counts", self.counts.config.interval, now):
            await self.counts.run_once(conn)
        batch_due = self._due("batch", self.batch_ops.config.interval, now)
        if batch_due and await self.batch_ops.run_once(conn) is not None:
            self._next_at["batch"] = now  # an operation with work left goes on next round
        return pause

    def _due(self, name: str, interval: float, now: float) -> bool:
        """Whether pass ``name`` is due at ``now`` (each is, at first); if so, it is next
        due ``interval`` seconds later."""
        if now < self._next_at.get(name, 0.0):
            return False
        self._next_at[name] = now + interval
        return True
