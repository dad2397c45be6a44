"""Periodic jobs, the leader's side: schedules kept in ``awa_fast.cron_jobs``, and the service
that enqueues them when they fall due (:mod:`awa_fast.lifecycle.schedules` registers them).

Every host that runs handlers writes its schedules to the table when it starts; the leader
evaluates every row of the table each ``cron_interval``, including rows other deployments
registered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from awa_fast import cron
from awa_fast.db.queries import Q
from awa_fast.errors import ValidationError
from awa_fast.lifecycle.schedules import PeriodicJob
from awa_fast.maintenance.base import Service

log = logging.getLogger("awa_fast.maintenance")

# A catch_up schedule back from a long outage enqueues its missed fires over several
# passes, this many a pass, so that one schedule cannot hold the leader for long.
CATCH_UP_PER_PASS = 100


async def register(conn: psycopg.AsyncConnection[Any], jobs: list[PeriodicJob]) -> None:
    """Write ``jobs`` to the table (insert, or update a changed definition)."""
    async with conn.cursor() as cur:
        await cur.executemany(Q.cron_register, [job.params() for job in jobs])


class Owed(NamedTuple):
    """A schedule's fires due, in order, and its last fire as read (None: never fired)."""

    name: str
    previous: datetime | None
    fires: list[datetime]


async def owed(conn: psycopg.AsyncConnection[Any], *, now: datetime | None = None) -> list[Owed]:
    """What every schedule owes by ``now`` (the server's clock when None): its latest fire
    (``coalesce``) or each missed fire in order (``catch_up``). A read: :func:`enqueue`
    writes what it found, and a fire another leader took meanwhile is skipped there. A row
    this code cannot read (an expression or time zone it does not know) is logged and
    skipped: it must not stop the others."""
    cur = await conn.execute(Q.cron_due)
    found = []
    for name, expression, zone_name, policy, last, since, server_now in await cur.fetchall():
        try:
            schedule, zone = cron.parse(expression), cron.zone(zone_name)
        except ValidationError as exc:
            log.warning("periodic job %r skipped: %s", name, exc, extra={"periodic_job": name})
            continue
        if policy == "coalesce":  # the latest fire only: the others are skipped
            fires = schedule.fires(since, now or server_now, zone)[-1:]
        else:
            fires = schedule.fires(since, now or server_now, zone, limit=CATCH_UP_PER_PASS)
        if fires:
            found.append(Owed(name, last, fires))
    return found


async def enqueue(conn: psycopg.AsyncConnection[Any], owed: list[Owed]) -> int:
    """Enqueue the fires of ``owed``, each only if its schedule's last fire is still the one
    read before it; returns how many jobs were enqueued."""
    enqueued = 0
    for name, previous, fires in owed:
        for fire in fires:
            inserted = await conn.execute(
                Q.cron_enqueue, {"name": name, "previous": previous, "fire_at": fire}
            )
            if inserted.rowcount == 0:  # another leader enqueued it, or the row changed
                break
            enqueued += 1
            previous = fire
    return enqueued


@dataclass(frozen=True, slots=True)
class PeriodicConfig:
    """Every ``interval``, enqueue what the schedules owe."""

    interval: float = 1.0


class Periodic(Service[PeriodicConfig]):
    """Enqueues under ``leader``'s term, counting in ``stats``."""

    name = "periodic"

    async def run_once(
        self, conn: psycopg.AsyncConnection[Any], *, now: datetime | None = None
    ) -> int:
        """Enqueue the fires due by ``now`` (the server's clock when None); returns how
        many jobs were enqueued."""
        due = await owed(conn, now=now)  # looked at unfenced: mostly nothing
        if not due:
            return 0
        async with self.leader.fenced(conn):
            enqueued = await enqueue(conn, due)
        self.stats.periodic += enqueued
        return enqueued
