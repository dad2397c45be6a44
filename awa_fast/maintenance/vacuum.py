"""The vacuum: VACUUMs the job tables once their dead rows pass a threshold, since under a
sustained load the claim index fills with dead entries faster than autovacuum removes them,
and every claim walks them.

A VACUUM removes only the dead tuples no snapshot can still see. While one transaction holds
the oldest snapshot (a report, a stuck session, a standby's feedback), the dead tuples stay
past the threshold, and VACUUMing the table again would walk it for nothing, every pass,
holding a lock that makes the ring's rotation of jobs_hot (the thing that does free its
partitions, by TRUNCATE, under such a hold) find it busy. So a table is vacuumed again only
once the oldest transaction id held is another than at its last VACUUM."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.base import Service
from awa_fast.maintenance.stats import MaintenanceStats

log = logging.getLogger("awa_fast.maintenance")


@dataclass(frozen=True, slots=True)
class VacuumConfig:
    """Every ``interval``, vacuum each job table with ``dead_tuples`` dead rows or more."""

    interval: float = 2.0
    dead_tuples: int = 20_000


class Vacuum(Service[VacuumConfig]):
    """Vacuums, counting the tables in ``stats``. Not fenced by the leader's term: VACUUM
    runs outside any transaction, and one run by a deposed leader changes no row."""

    name = "vacuum"

    def __init__(self, *, stats: MaintenanceStats, config: VacuumConfig) -> None:  # no term
        self.stats = stats
        self.config = config
        self._vacuumed_at: dict[str, str] = {}  # table -> the oldest xid held at its VACUUM
        self._reported: str | None = None  # the oldest xid last warned of

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> list[str]:
        """Vacuum the tables due; returns their names. One process and no ANALYZE, so the
        vacuum leaves the cores to the committer: the hot statements' plans do not depend
        on fresh statistics, and autovacuum still analyzes on its own schedule."""
        cur = await conn.execute(Q.job_tables_dead_tuples)
        due = [name for name, dead in await cur.fetchall() if dead >= self.config.dead_tuples]
        if not due:
            return []
        cur = await conn.execute(Q.oldest_xmin)
        row = await cur.fetchone()
        oldest = row[0] if row is not None else None
        vacuumed = []
        for name in due:
            if oldest is not None and self._vacuumed_at.get(name) == oldest:
                continue  # held by the same transaction as at its last VACUUM
            await conn.execute(f"VACUUM (PARALLEL 0) awa_fast.{name}")
            vacuumed.append(name)
            if oldest is not None:
                self._vacuumed_at[name] = oldest
            else:
                self._vacuumed_at.pop(name, None)
        self._report_held(due, vacuumed, oldest)
        self.stats.vacuumed += len(vacuumed)
        return vacuumed

    def _report_held(self, due: list[str], vacuumed: list[str], oldest: str | None) -> None:
        held = [name for name in due if name not in vacuumed]
        if held and oldest != self._reported:
            log.warning(
                "%s: dead tuples past %d that no VACUUM can remove until transaction id %s is"
                " no longer held (see pg_stat_activity.backend_xmin)",
                ", ".join(held),
                self.config.dead_tuples,
                oldest,
                extra={"tables": held, "oldest_xmin": oldest},
            )
        self._reported = oldest if held else None
