"""The maintenance composition: every host runs it; only the elected leader runs the
services, each when it falls due, on one connection.

Each service lives in its own module with the one shape of :mod:`awa_fast.maintenance.base`:
a name, a frozen config, and a ``run_once`` pass that tests drive directly. Every
transaction of a pass that changes rows is fenced by the leader's term
(:meth:`awa_fast.maintenance.leader.Leader.fenced`): a pass of a leader whose term is over
raises :class:`~awa_fast.maintenance.leader.Deposed` having changed nothing. The passes that
run every second or more often look first, with one unfenced read, and open a fenced
transaction only when they have work: that is what an idle leader costs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from awa_fast.db.connections import Database
from awa_fast.lifecycle.followups import FollowupRegistry
from awa_fast.lifecycle.hooks import HookDispatcher
from awa_fast.maintenance.base import Service
from awa_fast.maintenance.batch_ops import BatchOps, BatchOpsConfig
from awa_fast.maintenance.cleaner import Cleaner, CleanerConfig
from awa_fast.maintenance.counts import Counts, CountsConfig
from awa_fast.maintenance.descriptor_cleaner import DescriptorCleaner, DescriptorCleanerConfig
from awa_fast.maintenance.leader import Deposed, Leader
from awa_fast.maintenance.periodic import Periodic, PeriodicConfig
from awa_fast.maintenance.promoter import Promoter, PromoterConfig
from awa_fast.maintenance.rescuer import Rescuer, RescuerConfig
from awa_fast.maintenance.rings import Rings, RingsConfig
from awa_fast.maintenance.stats import MaintenanceStats
from awa_fast.maintenance.vacuum import Vacuum, VacuumConfig

log = logging.getLogger("awa_fast.maintenance")


@dataclass(frozen=True, slots=True)
class MaintenanceConfig:
    """How often the leader's term is renewed, and each service's configuration: the single
    source of their defaults (RunnerConfig's fields take theirs from here)."""

    election_interval: float = 1.0
    promoter: PromoterConfig = field(default_factory=PromoterConfig)
    rescuer: RescuerConfig = field(default_factory=RescuerConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    descriptor_cleaner: DescriptorCleanerConfig = field(default_factory=DescriptorCleanerConfig)
    vacuum: VacuumConfig = field(default_factory=VacuumConfig)
    rings: RingsConfig = field(default_factory=RingsConfig)
    periodic: PeriodicConfig = field(default_factory=PeriodicConfig)
    counts: CountsConfig = field(default_factory=CountsConfig)
    batch_ops: BatchOpsConfig = field(default_factory=BatchOpsConfig)


DEFAULTS = MaintenanceConfig()


class Maintenance:
    """The services built from ``config``, run while this host leads. Rescues enqueue
    ``followups`` and send their events to ``hooks``."""

    def __init__(
        self,
        database: Database,
        config: MaintenanceConfig,
        *,
        followups: FollowupRegistry,
        hooks: HookDispatcher,
    ) -> None:
        self.database = database
        self.config = config
        self.leader = leader = Leader(database, interval=config.election_interval)
        self.stats = stats = MaintenanceStats()
        self.instance = uuid.uuid4()  # recorded as runner_instance by batch operations
        self.promoter = Promoter(leader=leader, stats=stats, config=config.promoter)
        self.rescuer = Rescuer(
            leader=leader,
            stats=stats,
            config=config.rescuer,
            dsn=database.dsn,
            followups=followups,
            hooks=hooks,
        )
        self.cleaner = Cleaner(leader=leader, stats=stats, config=config.cleaner)
        self.descriptor_cleaner = DescriptorCleaner(
            leader=leader, stats=stats, config=config.descriptor_cleaner
        )
        self.vacuum = Vacuum(stats=stats, config=config.vacuum)
        self.rings = Rings(leader=leader, stats=stats, config=config.rings)
        self.periodic = Periodic(leader=leader, stats=stats, config=config.periodic)
        self.counts = Counts(leader=leader, stats=stats, config=config.counts)
        self.batch_ops = BatchOps(
            leader=leader, stats=stats, config=config.batch_ops, runner_instance=self.instance
        )
        # In this order each round: promotion first, so due jobs are claimable soonest.
        self.services: tuple[Service[Any], ...] = (
            self.promoter,
            self.rescuer,
            self.cleaner,
            self.descriptor_cleaner,
            self.vacuum,
            self.rings,
            self.periodic,
            self.counts,
            self.batch_ops,
        )
        self._next_at: dict[str, float] = {}  # when each service is next due, by the loop's clock

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
        """Run each service due at ``now``; returns the pause until the next is due."""
        for service in self.services:
            if now >= self._next_at.get(service.name, 0.0):
                self._next_at[service.name] = now + service.config.interval  # if it fails
                self._next_at[service.name] = now + await service.step(conn)
        return max(0.0, min(self._next_at.values()) - now)
