"""The promoter: moves scheduled and retryable jobs that fell due into the claimable table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.base import Service

MIN_PAUSE = 0.002  # a due job that a concurrent promoter holds: do not spin on it


@dataclass(frozen=True, slots=True)
class PromoterConfig:
    """``interval``: the longest pause between passes; ``batch``: the jobs each of a
    pass's transactions moves."""

    interval: float = 0.25
    batch: int = 2000


class Promoter(Service[PromoterConfig]):
    """Promotes due jobs under ``leader``'s term, counting them in ``stats``."""

    name = "promoter"

    async def step(self, conn: psycopg.AsyncConnection[Any]) -> float:
        """The leader's promotion step: promote, if the earliest deferred job is due, and
        return the seconds until the next step. The look is an unfenced read: a leader with
        nothing due, the common case, opens no fenced transaction four times a second."""
        due_in = await self._due_in(conn)
        if due_in is not None and due_in <= 0:
            await self.run_once(conn)
            due_in = await self._due_in(conn)
        if due_in is None:
            return self.config.interval
        return min(self.config.interval, max(MIN_PAUSE, due_in))

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Move every due job, ``batch`` a transaction; returns how many moved."""
        total = 0
        while True:
            async with self.leader.fenced(conn):
                cur = await conn.execute(Q.job_promote_due, {"limit": self.config.batch})
            total += cur.rowcount
            self.stats.promoted += cur.rowcount
            if cur.rowcount < self.config.batch:
                return total

    async def _due_in(self, conn: psycopg.AsyncConnection[Any]) -> float | None:
        """Seconds until the earliest deferred job is due (None: none waits); a job held by
        a concurrent pass still counts, so a step that could not move it comes back soon."""
        cur = await conn.execute(Q.job_next_due_in)
        row = await cur.fetchone()
        return None if row is None or row[0] is None else float(row[0])
