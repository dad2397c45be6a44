"""The cron service: enqueues the periodic jobs whose schedules fell due
(:mod:`awa_fast.maintenance.periodic`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from awa_fast.maintenance import periodic
from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.stats import MaintenanceStats


@dataclass(frozen=True, slots=True)
class CronConfig:
    """Every ``interval``, enqueue what the schedules owe."""

    interval: float = 1.0


class Cron:
    """Enqueues under ``leader``'s term, counting in ``stats``."""

    def __init__(self, *, leader: Leader, stats: MaintenanceStats, config: CronConfig) -> None:
        self.leader = leader
        self.stats = stats
        self.config = config

    async def run_once(
        self, conn: psycopg.AsyncConnection[Any], *, now: datetime | None = None
    ) -> int:
        """Enqueue the fires due by ``now`` (the server's clock when None); returns how
        many jobs were enqueued."""
        owed = await periodic.owed(conn, now=now)  # looked at unfenced: mostly nothing
        if not owed:
            return 0
        async with self.leader.fenced(conn):
            enqueued = await periodic.enqueue(conn, owed)
        self.stats.periodic += enqueued
        return enqueued
