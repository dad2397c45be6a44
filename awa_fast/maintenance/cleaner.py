"""The cleaner: deletes finished jobs past their retention, per queue where configured."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.stats import MaintenanceStats


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Every ``interval``, delete completed jobs finished ``completed_retention`` ago and
    failed or cancelled ones ``failed_retention`` ago (``queue_retention`` overrides both
    per queue), ``batch`` a transaction."""

    interval: float = 60.0
    batch: int = 1000
    completed_retention: float = 24 * 3600.0
    failed_retention: float = 72 * 3600.0
    queue_retention: Mapping[str, tuple[float, float]] = field(default_factory=dict)


class Cleaner:
    """Deletes under ``leader``'s term, counting in ``stats``."""

    def __init__(self, *, leader: Leader, stats: MaintenanceStats, config: CleanerConfig) -> None:
        self.leader = leader
        self.stats = stats
        self.config = config

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Delete what is past retention, queue by queue; returns how many jobs went. Each
        batch counts the failed ones it deletes per queue as it deletes them (retry_failed's
        ``pruned_failed_count``)."""
        overrides = dict(self.config.queue_retention)
        default = (self.config.completed_retention, self.config.failed_retention)
        total = 0
        for queue, (completed_s, failed_s) in [*overrides.items(), (None, default)]:
            params = {
                "completed_s": completed_s,
                "failed_s": failed_s,
                "limit": self.config.batch,
                "queue": queue,
                "excluded": list(overrides),
            }
            total += await self._delete(conn, params)
        self.stats.deleted += total
        return total

    async def _delete(self, conn: psycopg.AsyncConnection[Any], params: dict[str, Any]) -> int:
        """Delete in batches until one comes back short."""
        total = 0
        while True:
            async with self.leader.fenced(conn):
                cur = await conn.execute(Q.job_delete_expired, params)
                rows: list[tuple[int]] = await cur.fetchall()
            [(deleted,)] = rows
            total += deleted
            if deleted < self.config.batch:
                return total
