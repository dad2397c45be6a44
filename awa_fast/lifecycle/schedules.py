"""Periodic jobs as code registers them: a schedule, validated when it is registered (its
expression, time zone, args and options), so that a bad one fails at start-up, not at its
first fire. The leader's side, which enqueues them, is :mod:`awa_fast.maintenance.periodic`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from awa_fast import cron, validation
from awa_fast.codec import kind_of
from awa_fast.errors import ValidationError
from awa_fast.producer import prepare
from awa_fast.types import InsertRequest

POLICIES = ("coalesce", "catch_up")


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
