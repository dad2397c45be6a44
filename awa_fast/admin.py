"""Admin operations as data: each is one named statement plus how to shape its rows.

``Client`` runs them on a connection, ``AsyncClient`` awaits the same :class:`Op`, so the two
clients cannot drift apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from awa_fast.codec import encode_json
from awa_fast.db.queries import Q
from awa_fast.errors import CallbackNotFound, ValidationError
from awa_fast.producer import positive_seconds
from awa_fast.types import JOB_STATES, JobRow

T = TypeVar("T")
Rows = Sequence[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    sql: str
    params: dict[str, Any]
    shape: Callable[[Rows], T]


@dataclass(frozen=True, slots=True)
class QueueStat:
    queue: str
    available: int
    running: int
    scheduled: int
    retryable: int
    waiting_external: int
    completed: int
    failed: int
    cancelled: int
    paused: bool
    lag_seconds: float | None


def _any(rows: Rows) -> bool:
    return bool(rows)


def _count(rows: Rows) -> int:
    return len(rows)


def _nothing(rows: Rows) -> None:
    return None


def _job(rows: Rows) -> JobRow | None:
    return JobRow.from_row(rows[0]) if rows else None


def _jobs(rows: Rows) -> list[JobRow]:
    return [JobRow.from_row(r) for r in rows]


def _stats(rows: Rows) -> list[QueueStat]:
    return [
        QueueStat(**{**r, "lag_seconds": float(r["lag_seconds"]) if r["lag_seconds"] else None})
        for r in rows
    ]


def get_job(job_id: int) -> Op[JobRow | None]:
    return Op(Q.job_get, {"id": job_id}, _job)


def get_jobs(job_ids: Sequence[int]) -> Op[list[JobRow]]:
    """The jobs of ``job_ids``, in that order (an id with no job is left out)."""

    def in_order(rows: Rows) -> list[JobRow]:
        found = {row["id"]: row for row in rows}
        return [JobRow.from_row(found[i]) for i in job_ids if i in found]

    return Op(Q.job_get_many, {"ids": list(job_ids)}, in_order)


def list_cron_jobs() -> Op[list[dict[str, Any]]]:
    """Every periodic job's row, by name."""
    return Op(Q.cron_list, {}, lambda rows: [dict(row) for row in rows])


def delete_cron_job(name: str) -> Op[bool]:
    """Remove a schedule (a host that still registers it writes it back when it starts)."""
    return Op(Q.cron_delete, {"name": name}, _any)


def cancel(job_id: int, reason: str = "by admin") -> Op[bool]:
    """Cancel a job in any unfinished state; True if it was cancelled."""
    return Op(Q.job_cancel, {"id": job_id, "reason": reason}, _any)


def retry(job_id: int) -> Op[bool]:
    """Run a failed or cancelled job again (attempts reset); True if it was queued."""
    return Op(Q.job_retry, {"id": job_id, "kind": None, "queue": None}, _any)


def retry_failed(*, kind: str | None = None, queue: str | None = None) -> Op[int]:
    return Op(Q.job_retry, {"id": None, "kind": kind, "queue": queue}, _count)


def pause_queue(queue: str) -> Op[None]:
    return Op(Q.queue_pause, {"queue": queue}, _nothing)


def resume_queue(queue: str) -> Op[None]:
    return Op(Q.queue_resume, {"queue": queue}, _nothing)


def queue_stats() -> Op[list[QueueStat]]:
    return Op(Q.queue_stats, {}, _stats)


def list_jobs(
    *,
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    limit: int = 100,
) -> Op[list[JobRow]]:
    if state is not None and state not in JOB_STATES:
        raise ValidationError("state", f"must be one of {', '.join(JOB_STATES)}, got {state!r}")
    if limit < 1:
        raise ValidationError("limit", f"must be >= 1, got {limit}")
    return Op(Q.job_list, {"state": state, "kind": kind, "queue": queue, "limit": limit}, _jobs)


@dataclass(frozen=True, slots=True)
class DlqEntry:
    job: JobRow
    reason: str
    dlq_at: Any


def _dlq(rows: Rows) -> list[DlqEntry]:
    return [DlqEntry(JobRow.from_row(r), r["dlq_reason"], r["dlq_at"]) for r in rows]


def list_dlq(
    *, kind: str | None = None, queue: str | None = None, limit: int = 100
) -> Op[list[DlqEntry]]:
    return Op(Q.dlq_list, {"kind": kind, "queue": queue, "limit": limit}, _dlq)


def retry_from_dlq(job_id: int) -> Op[bool]:
    """Move a dead-lettered job back to available with fresh attempts."""
    return Op(Q.dlq_retry, {"id": job_id}, _any)


def purge_dlq(*, kind: str | None = None, queue: str | None = None) -> Op[int]:
    return Op(Q.dlq_purge, {"kind": kind, "queue": queue}, _count)


def _callback_id(callback_id: str) -> str:
    try:
        return str(uuid.UUID(str(callback_id)))
    except ValueError:
        raise ValidationError("callback_id", f"not a callback id: {callback_id!r}") from None


def _payload(payload: object) -> str | None:
    return None if payload is None else encode_json("payload", payload).decode()


def _answered(callback_id: str) -> Callable[[Rows], JobRow]:
    """The job a callback statement answered, as it now is; CallbackNotFound if none."""

    def shape(rows: Rows) -> JobRow:
        if not rows:
            raise CallbackNotFound(callback_id)
        return JobRow.from_row(rows[0])

    return shape


def _resolve(
    callback_id: str, state: str, *, payload: object = None, error: str | None = None
) -> Op[JobRow]:
    params = {
        "callback_id": _callback_id(callback_id),
        "state": state,
        "payload": _payload(payload),
        "error": error,
    }
    return Op(Q.callback_resolve, params, _answered(callback_id))


def complete_external(callback_id: str, payload: object = None) -> Op[JobRow]:
    """Complete the job waiting on ``callback_id``, with ``payload`` as its callback_result."""
    return _resolve(callback_id, "completed", payload=payload)


def fail_external(callback_id: str, error: str) -> Op[JobRow]:
    return _resolve(callback_id, "failed", error=f"callback failed: {error}")


def retry_external(callback_id: str) -> Op[JobRow]:
    """Give the parked job another attempt (the callback's attempt counts as used)."""
    return _resolve(callback_id, "available")


def resume_external(callback_id: str, payload: object = None) -> Op[JobRow]:
    """Hand ``payload`` to the handler waiting on ``callback_id`` (``job.wait_for_callback``):
    its job goes back to running, the same attempt, and the handler decides the outcome. A
    parked job (its handler returned WaitForCallback) has no handler to resume: it is
    resolved by complete/fail/retry_external, and resuming it raises CallbackNotFound."""
    params = {"callback_id": _callback_id(callback_id), "payload": _payload(payload)}

    def shape(rows: Rows) -> JobRow:
        if rows and not rows[0]["resumed"]:
            raise CallbackNotFound(
                callback_id,
                f"job {rows[0]['id']} is parked (its handler returned WaitForCallback and "
                "waits for no payload): resolve it with complete_external, fail_external "
                "or retry_external",
            )
        return _answered(callback_id)(rows)

    return Op(Q.callback_resume, params, shape)


def heartbeat_callback(callback_id: str, timeout_seconds: float = 3600.0) -> Op[JobRow]:
    """The external system behind ``callback_id`` is still at work: its job, waiting on it,
    times out ``timeout_seconds`` from now instead."""
    params = {
        "callback_id": _callback_id(callback_id),
        "timeout_s": positive_seconds("timeout_seconds", timeout_seconds),
    }
    return Op(Q.callback_heartbeat, params, _answered(callback_id))
