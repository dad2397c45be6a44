"""The vacuum: VACUUMs the job tables once their dead rows pass a threshold, since under a
sustained load the claim index fills with dead entries faster than autovacuum removes them,
and every claim walks them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.stats import MaintenanceStats


@dataclass(frozen=True, slots=True)
class VacuumConfig:
    """Every ``interval``, vacuum each job table with ``dead_tuples`` dead rows or more."""

    interval: float = 2.0
    dead_tuples: int = 20_000


class Vacuum:
    """Vacuums, counting the tables in ``stats``. Not fenced by the leader's term: VACUUM
    runs outside any transaction, and one run by a deposed leader changes no row."""

    def __init__(self, *, stats: MaintenanceStats, config: VacuumConfig) -> None:
        self.stats = stats
        self.config = config

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> list[str]:
        """Vacuum the tables due; returns their names. One process and no ANALYZE, so the
        vacuum leaves the cores to the committer: the hot statements' plans do not depend
        on fresh statistics, and autovacuum still analyzes on its own schedule."""
        cur = await conn.execute(Q.job_tables_dead_tuples)
        due = [name for name, dead in await cur.fetchall() if dead >= self.config.dead_tuples]
        for name in due:
            await conn.execute(f"VACUUM (PARALLEL 0) awa_fast.{name}")
        self.stats.vacuumed += len(due)
        return due
