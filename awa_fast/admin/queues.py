"""Whole queues: pause, resume, drain, their stats, and the storage report over all of
them, apart from the calls on single jobs."""

from __future__ import annotations

from dataclasses import dataclass

from awa_fast import validation
from awa_fast.admin.ops import Op, Rows, pretty, row_count
from awa_fast.db.queries import Q
from awa_fast.errors import ValidationError


@dataclass(frozen=True, slots=True)
class QueueStat:
    """A queue's jobs by state, from the counters the statements that move jobs keep
    (migration 0025): exact, and as cheap to read at any history. ``total_queued`` is every
    unfinished job (running and parked ones included), ``completed_last_hour`` the jobs
    completed in the current minute and the 59 before it, ``lag_seconds`` how long the
    oldest available job has been due; ``paused_by`` is who paused the queue, when given.
    Failed and cancelled jobs count until retention deletes them."""

    queue: str
    total_queued: int
    available: int
    running: int
    scheduled: int
    retryable: int
    waiting_external: int
    failed: int
    cancelled: int
    completed_last_hour: int
    lag_seconds: float | None
    paused: bool
    paused_by: str | None


def _nothing(rows: Rows) -> None:
    return None


def _stats(rows: Rows) -> list[QueueStat]:
    return [QueueStat(**r) for r in rows]


def queue_depth(queue: str) -> Op[int]:
    """``queue``'s available jobs (packed ones included): the depth backpressure checks
    (awa_fast.backpressure), read from the counters, not the jobs; 0 for a queue never
    seen."""
    params = {"queues": [validation.name("queue", queue)]}
    return Op(Q.queue_backlog, params, lambda rows: int(rows[0]["depth"]) if rows else 0)


def pause_queue(queue: str, paused_by: str | None = None) -> Op[None]:
    """Stop claims from ``queue``; ``paused_by`` records who did (shown by queue_stats)."""
    if paused_by is not None and not isinstance(paused_by, str):
        raise ValidationError("paused_by", f"must be a string or None, got {paused_by!r}")
    return Op(
        Q.queue_pause, {"queue": validation.name("queue", queue), "paused_by": paused_by}, _nothing
    )


def resume_queue(queue: str) -> Op[None]:
    return Op(Q.queue_resume, {"queue": queue}, _nothing)


def drain_queue(queue: str) -> Op[int]:
    """Cancel every job of ``queue`` that waits (available, scheduled, retryable, parked on
    a callback); running attempts finish as they would. Returns how many were cancelled."""
    return Op(
        Q.queue_drain, {"queue": validation.name("queue", queue)}, row_count, first=Q.queue_unpack
    )


def queue_stats() -> Op[list[QueueStat]]:
    return Op(Q.queue_stats, {}, _stats)


# The Awa SDK's storage report (``storage_status()``), for awa-fast's one engine: jobs in
# tables of its own, what the SDK would call "canonical", active since the schema was
# installed, with no queue storage to move to. Scripts that read the report's fields get
# the SDK's answer for a cluster that has not started a transition.
_ONE_ENGINE = "awa-fast has one storage engine: there is no queue storage to move to"


def storage_status() -> Op[str]:
    """The Awa SDK's storage-transition report, as pretty JSON."""
    return Op(Q.storage_status, {}, _storage_report)


def _storage_report(rows: Rows) -> str:
    installed_at, backlog = rows[0]["installed_at"], rows[0]["live_backlog"]
    return pretty(
        {
            "current_engine": "canonical",
            "active_engine": "canonical",
            "prepared_engine": None,
            "state": "canonical",
            "transition_epoch": 0,
            "details": {},
            "entered_at": installed_at,
            "updated_at": installed_at,
            "finalized_at": None,
            "canonical_live_backlog": backlog,
            "prepared_queue_storage_schema": None,
            "prepared_schema_ready": False,
            "live_runtime_capability_counts": {},
            "can_enter_mixed_transition": False,
            "enter_mixed_transition_blockers": [_ONE_ENGINE],
            "can_finalize": False,
            "finalize_blockers": [_ONE_ENGINE],
        }
    )
