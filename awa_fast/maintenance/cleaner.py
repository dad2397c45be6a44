"""The cleaner: frees finished jobs past their retention, per queue where configured.

Finished jobs go by partition: jobs_done is a ring of eight (migration 0030), turned once a
period (the completed retention over six), and a sealed partition whose newest job is past
the completed retention is emptied by TRUNCATE, the jobs it still keeps (failed and
cancelled ones, kept longer, and those of queues kept longer) moved out first
(``awa_fast.done_free``). So a job goes between its retention and its retention plus the
completed retention and a period, and no finished row is deleted one by one, but for the
queues with a retention shorter than the default: the ring cannot free their jobs as soon
as they ask, so they are deleted once past it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa_fast.db.queries import Q
from awa_fast.maintenance.base import Service

# Periods in a completed retention: the ring's eight partitions hold six periods of jobs
# still kept, the one in use and one emptied for the next turn.
DONE_PERIODS = 6


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Every ``interval``, free completed jobs finished ``completed_retention`` ago and
    failed or cancelled ones ``failed_retention`` ago, by partition (each goes at most the
    completed retention and a sixth of it later); ``queue_retention`` overrides both per
    queue, deleting ``batch`` rows a transaction."""

    interval: float = 60.0
    batch: int = 1000
    completed_retention: float = 24 * 3600.0
    failed_retention: float = 72 * 3600.0
    queue_retention: Mapping[str, tuple[float, float]] = field(default_factory=dict)


class Cleaner(Service[CleanerConfig]):
    """Deletes under ``leader``'s term, counting in ``stats``."""

    name = "cleaner"

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Free what is past retention; returns how many jobs went. Failed jobs freed are
        counted per queue as they go (retry_failed's ``pruned_failed_count``)."""
        overrides = dict(self.config.queue_retention)
        total = await self._free_partitions(conn, overrides)
        for queue, (completed_s, failed_s) in self._shorter(overrides).items():
            params = {
                "completed_s": completed_s,
                "failed_s": failed_s,
                "limit": self.config.batch,
                "queue": queue,
            }
            total += await self._delete(conn, params)
        self.stats.deleted += total
        return total

    def _shorter(self, overrides: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        """The queues that keep a state's jobs for less than the ring does: theirs go row
        by row. A queue kept longer needs nothing more: its jobs move along until their
        retention ends, then go with a partition."""
        keep = (self.config.completed_retention, self.config.failed_retention)
        return {
            queue: pair
            for queue, pair in overrides.items()
            if pair[0] < keep[0] or pair[1] < keep[1]
        }

    async def _free_partitions(
        self, conn: psycopg.AsyncConnection[Any], overrides: dict[str, tuple[float, float]]
    ) -> int:
        """Turn the ring of finished jobs when due and free its partitions past retention."""
        params = {
            "completed_s": self.config.completed_retention,
            "failed_s": self.config.failed_retention,
            "queues": Jsonb(overrides),
            "period_s": self.config.completed_retention / DONE_PERIODS,
        }
        async with self.leader.fenced(conn):
            cur = await conn.execute(Q.done_free, params)
            row = await cur.fetchone()
        return int(row[0]) if row is not None else 0

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
