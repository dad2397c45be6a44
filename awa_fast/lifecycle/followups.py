"""Transactional follow-ups: jobs inserted in the same transaction as the transition that
triggers them (docs/followups-and-events.md). A ``make`` that raises, or an insert that fails, rolls
the transition back; the job stays running until it is retried or rescued."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from awa_fast import producer, producer_sync
from awa_fast.codec import Decoder, trigger_of
from awa_fast.errors import ConfigError
from awa_fast.lifecycle.transitions import Outcome
from awa_fast.types import JobRow

Make = Callable[[Any, JobRow, "OutcomeContext"], object]


@dataclass(frozen=True, slots=True)
class OutcomeContext:
    """What the triggering outcome knows: error and attempt (retried, exhausted),
    next_run_at (retried), reason (cancelled, rescued)."""

    outcome: Outcome
    attempt: int
    error: str | None = None
    next_run_at: datetime | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Spec:
    kind: str
    decode: Decoder
    make: Make


@dataclass(slots=True)
class FollowupRegistry:
    specs: dict[tuple[Outcome, str], list[Spec]] = field(default_factory=dict)

    def add(self, outcome: Outcome, trigger: type | str, make: Make) -> None:
        kind, decode = trigger_of(trigger)
        if not callable(make):
            raise ConfigError(f"follow-up make for {trigger!r} must be callable")
        spec = Spec(kind, decode, make)
        self.specs.setdefault((outcome, kind), []).append(spec)

    def for_(self, outcome: Outcome | None, kind: str | None) -> Sequence[Spec]:
        if outcome is None or kind is None:
            return ()
        return self.specs.get((outcome, kind), ())

    def __bool__(self) -> bool:
        return bool(self.specs)


def followup_jobs(
    specs: Sequence[Spec], row: JobRow, raw_args: bytes, ctx: OutcomeContext
) -> list[producer.PreparedJob]:
    """Run every spec's ``make`` on the triggering job: the jobs to insert, validated."""
    jobs: list[producer.PreparedJob] = []
    for spec in specs:
        made = spec.make(spec.decode(raw_args), row, ctx)
        requests = made if isinstance(made, list | tuple) else [made]
        jobs.extend(
            producer.prepare(producer.request_of(request, {}))
            for request in requests
            if request is not None
        )
    return jobs


def insert_followups(
    conn: psycopg.Connection[Any],
    specs: Sequence[Spec],
    row: JobRow,
    raw_args: bytes,
    ctx: OutcomeContext,
) -> list[int]:
    """Insert the follow-ups of ``row``'s transition on ``conn``'s transaction, each
    naming ``row`` as its parent (its parent_id)."""
    return [
        producer_sync.insert_prepared(conn, job, parent_id=row.id).id
        for job in followup_jobs(specs, row, raw_args, ctx)
    ]


async def insert_followups_async(
    conn: psycopg.AsyncConnection[Any],
    specs: Sequence[Spec],
    row: JobRow,
    raw_args: bytes,
    ctx: OutcomeContext,
) -> list[int]:
    """:func:`insert_followups` on an asyncio connection (a handler's own transaction)."""
    return [
        (await producer.insert_prepared_async(conn, job, parent_id=row.id)).id
        for job in followup_jobs(specs, row, raw_args, ctx)
    ]
