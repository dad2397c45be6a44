"""Periodic (cron) jobs: schedules registered in code, kept in ``awa_fast.cron_jobs``, and
enqueued by the maintenance leader when they fall due.

A schedule is validated when it is registered (its expression, time zone, args and
options), so a bad one fails at start-up, not at its first fire. Every host that runs
handlers writes its schedules to the table when it starts; the leader evaluates every row
of the table each ``cron_interval``, including rows other deployments registered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypedDict, Unpack

import psycopg

from awa_fast import cron, validation
from awa_fast.codec import kind_of
from awa_fast.db.queries import Q
from awa_fast.errors import ValidationError
from awa_fast.producer import prepare
from awa_fast.types import InsertRequest

log = logging.getLogger("awa_fast.maintenance")

POLICIES = ("coalesce", "catch_up")
# A catch_up schedule back from a long outage enqueues its missed fires over several
# passes, this many a pass, so that one schedule cannot hold the leader for long.
CATCH_UP_PER_PASS = 100


@dataclass(frozen=True, slots=True)
class PeriodicJob:
    """A validated schedule: the row ``cron_register`` writes."""

    name: str
    cron_expr: str
    timezone: str
    kind: str
    queue: str
    args: str  # JSON text
    priority: int
    max_attempts: int
    tags: tuple[str, ...]
    metadata: str  # JSON text
    missed_fire_policy: str

    def params(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cron_expr": self.cron_expr,
            "timezone": self.timezone,
            "kind": self.kind,
            "queue": self.queue,
            "args": self.args,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "tags": list(self.tags),
            "metadata": self.metadata,
            "missed_fire_policy": self.missed_fire_policy,
        }


class PeriodicOptions(TypedDict, total=False):
    """Keyword options of ``client.periodic`` (the Awa SDK's)."""

    timezone: str
    queue: str
    priority: int
    max_attempts: int
    tags: list[str] | None
    metadata: dict[str, Any] | None
    missed_fire_policy: str


def periodic_job(
    name: str, cron_expr: str, args_type: type, args: object, **options: Unpack[PeriodicOptions]
) -> PeriodicJob:
    """Validate a schedule; raises :class:`ValidationError` naming the field at fault."""
    unknown = options.keys() - PeriodicOptions.__annotations__.keys()
    if unknown:
        raise ValidationError("options", f"unknown option(s) {', '.join(sorted(unknown))}")
    timezone = options.get("timezone", "UTC")
    missed_fire_policy = options.get("missed_fire_policy", "coalesce")
    validation.name("name", name)
    cron.parse(cron_expr)
    cron.zone(timezone)
    if missed_fire_policy not in POLICIES:
        raise ValidationError(
            "missed_fire_policy",
            f"must be one of {', '.join(POLICIES)}, got {missed_fire_policy!r}",
        )
    if not isinstance(args, args_type):
        raise ValidationError("args", f"must be a {args_type.__name__}, got {type(args).__name__}")
    job = prepare(
        InsertRequest(
            args,
            kind=kind_of(args_type),
            queue=options.get("queue", "default"),
            priority=options.get("priority", 2),
            max_attempts=options.get("max_attempts", 25),
            tags=options.get("tags"),
            metadata=options.get("metadata"),
        )
    )
    return PeriodicJob(
        name=name,
        cron_expr=cron_expr,
        timezone=timezone,
        kind=job.kind,
        queue=job.options.queue,
        args=job.args,
        priority=job.options.priority,
        max_attempts=job.options.max_attempts,
        tags=job.options.tags,
        metadata=job.options.metadata,
        missed_fire_policy=missed_fire_policy,
    )


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
