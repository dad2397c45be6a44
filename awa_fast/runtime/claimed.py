"""A claimed job as it travels from the claim to the handler.

Claims and standby collects read rows as :class:`Claimed` (the columns of the
``claim_columns`` fragment in awa_fast/db/sql/jobs.sql, in order). Its jsonb columns hold
jsonb's binary payload, a version byte and then the JSON text, and its timestamps are
microseconds since 2000-01-01 UTC: both as Postgres sends them, decoded only where the
handler runs (:func:`json_text`, :func:`awa_fast.worker.instant`). A worker gets each job
as a :class:`Delivered`, with the in-flight slot and capacity unit it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg

JSONB_BINARY_VERSION = 1


class Claimed(NamedTuple):
    id: int
    run_lease: int
    kind: str
    queue: str
    args: bytes
    attempt: int
    max_attempts: int
    priority: int
    tags: list[str]
    metadata: bytes | None  # NULL when empty
    errors: bytes | None  # NULL when empty
    progress: bytes | None
    run_at: int
    created_at: int
    deadline_at: int | None  # NULL in a queue with no deadline


class Delivered(NamedTuple):
    """A claimed job handed to a worker, with the in-flight slot and capacity unit it
    holds until its handler returns."""

    job: Claimed
    slot: int
    capacity: int

    @classmethod
    def of(cls, fields: Sequence[Any]) -> Delivered:
        """A delivered job from its plain encoding (a worker's pipe carries lists)."""
        job, slot, capacity = fields
        return cls(Claimed._make(job), slot, capacity)


def json_text(payload: bytes) -> bytes:
    """The JSON text of a claimed jsonb column: its binary payload but the version byte,
    which claim connections check once (:func:`check_jsonb_payload`)."""
    return payload[1:]


def check_jsonb_payload(payload: bytes) -> None:
    """Refuse a server whose jsonb binary payload has another version: claiming stops
    there, once a connection, instead of every job failing later as undecodable."""
    version = payload[0] if payload else None
    if version != JSONB_BINARY_VERSION:
        raise psycopg.NotSupportedError(
            f"jsonb binary format version {version}; awa-fast reads {JSONB_BINARY_VERSION}"
        )
