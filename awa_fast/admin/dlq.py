"""The dead-letter queue: moving failed jobs in, reading, reviving and purging, with the
guard that keeps a bulk call from emptying it by an empty filter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from awa_fast import validation
from awa_fast.admin.ops import UNCLAIMED_KEY_STATES, Op, Rows, any_rows, revived_one, row_count
from awa_fast.db.queries import Q
from awa_fast.errors import ValidationError
from awa_fast.types import JobRow


@dataclass(frozen=True, slots=True)
class DlqEntry:
    """A dead-lettered job, why it died, when, and the run lease of its last attempt."""

    job: JobRow
    reason: str
    dlq_at: datetime
    original_run_lease: int


def _dlq_entry(row: dict[str, Any]) -> DlqEntry:
    return DlqEntry(JobRow.from_row(row), row["dlq_reason"], row["dlq_at"], row["run_lease"])


def _dlq(rows: Rows) -> list[DlqEntry]:
    return [_dlq_entry(r) for r in rows]


def _dlq_one(rows: Rows) -> DlqEntry | None:
    return _dlq_entry(rows[0]) if rows else None


def _scoped(operation: str, allow_all: bool, **filters: object) -> None:
    """Refuse a bulk operation over the whole dead-letter queue (or every failed job)
    unless asked for by ``allow_all``: an empty filter from a form or a script must not
    revive or delete everything (the Awa SDK's guard)."""
    if not allow_all and all(value is None for value in filters.values()):
        names = ", ".join(filters)
        raise ValidationError(
            "allow_all", f"{operation} needs at least one of {names}, or allow_all=True"
        )


def _cursor(before_id: int | None, before_dlq_at: datetime | None) -> dict[str, Any]:
    if before_id is not None:
        validation.int_in("before_id", before_id, 1, validation.MAX_JOB_ID)
    if before_dlq_at is not None:
        before_dlq_at = validation.instant("before_dlq_at", before_dlq_at)
    return {"before_id": before_id, "before_dlq_at": before_dlq_at}


def list_dlq(
    *,
    kind: str | None = None,
    queue: str | None = None,
    tag: str | None = None,
    before_id: int | None = None,
    before_dlq_at: datetime | None = None,
    limit: int = 100,
) -> Op[list[DlqEntry]]:
    """Newest first; the next page is below the last entry's ``(dlq_at, job.id)``."""
    if limit < 1:
        raise ValidationError("limit", f"must be >= 1, got {limit}")
    params = {"kind": kind, "queue": queue, "tag": tag, "limit": limit}
    return Op(Q.dlq_list, {**params, **_cursor(before_id, before_dlq_at)}, _dlq)


def get_dlq_job(job_id: int) -> Op[DlqEntry | None]:
    return Op(Q.dlq_get, {"id": validation.job_id(job_id)}, _dlq_one)


def dlq_depth(*, queue: str | None = None) -> Op[int]:
    """Entries of ``queue`` (None: of every queue), from the counters."""
    return Op(Q.state_count, {"state": "dlq", "queue": queue}, lambda rows: int(rows[0]["count"]))


def dlq_depth_by_queue() -> Op[list[tuple[str, int]]]:
    """Entries per queue, deepest first."""
    return Op(Q.dlq_depth_by_queue, {}, lambda rows: [(r["queue"], r["depth"]) for r in rows])


def _revived_count(rows: Rows) -> int:
    """How many were revived (entries held off by a live job's unique key stay)."""
    return sum(1 for row in rows if row["holder"] is None)


def retry_from_dlq(
    job_id: int,
    *,
    run_at: datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
) -> Op[int | None]:
    """Move a dead-lettered job back with fresh attempts: available now, or scheduled at a
    later ``run_at``, in ``queue`` and at ``priority`` when given. Returns its id, None if
    it is not in the dead-letter queue."""
    params = {
        "id": validation.job_id(job_id),
        "kind": None,
        "queue": None,
        "tag": None,
        "run_at": validation.run_at(run_at),
        "priority": None if priority is None else validation.int_in("priority", priority, 1, 4),
        "new_queue": None if queue is None else validation.name("queue", queue),
        "unique_states": UNCLAIMED_KEY_STATES,
    }
    return Op(Q.dlq_retry, params, revived_one)


def bulk_retry_from_dlq(
    *,
    kind: str | None = None,
    queue: str | None = None,
    tag: str | None = None,
    allow_all: bool = False,
) -> Op[int]:
    """Revive every dead-lettered job matching the filters (available now); returns how
    many. An entry whose unique key a live job holds stays in the dead-letter queue."""
    _scoped("bulk_retry_from_dlq", allow_all, kind=kind, queue=queue, tag=tag)
    params = {"id": None, "kind": kind, "queue": queue, "tag": tag}
    unchanged = {"run_at": None, "priority": None, "new_queue": None}
    fixed = {"unique_states": UNCLAIMED_KEY_STATES}
    return Op(Q.dlq_retry, {**params, **unchanged, **fixed}, _revived_count)


def _reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError("reason", f"must be a non-empty string, got {reason!r}")
    return reason


def move_failed_to_dlq(job_id: int, reason: str) -> Op[DlqEntry | None]:
    """Move a failed job into the dead-letter queue; None if it is not failed."""
    params = {
        "id": validation.job_id(job_id),
        "kind": None,
        "queue": None,
        "reason": _reason(reason),
    }
    return Op(Q.dlq_move_failed, params, _dlq_one)


def bulk_move_failed_to_dlq(
    *,
    kind: str | None = None,
    queue: str | None = None,
    reason: str = "manual",
    allow_all: bool = False,
) -> Op[int]:
    _scoped("bulk_move_failed_to_dlq", allow_all, kind=kind, queue=queue)
    params = {"id": None, "kind": kind, "queue": queue, "reason": _reason(reason)}
    return Op(Q.dlq_move_failed, params, row_count)


def purge_dlq_job(job_id: int) -> Op[bool]:
    params = {
        "id": validation.job_id(job_id),
        "kind": None,
        "queue": None,
        "tag": None,
        **_cursor(None, None),
    }
    return Op(Q.dlq_purge, params, any_rows)


def purge_dlq(
    *,
    kind: str | None = None,
    queue: str | None = None,
    tag: str | None = None,
    before_id: int | None = None,
    before_dlq_at: datetime | None = None,
    allow_all: bool = False,
) -> Op[int]:
    """Delete the dead-lettered jobs matching the filters (a cursor alone is no filter);
    returns how many."""
    _scoped("purge_dlq", allow_all, kind=kind, queue=queue, tag=tag)
    params = {"id": None, "kind": kind, "queue": queue, "tag": tag}
    return Op(Q.dlq_purge, {**params, **_cursor(before_id, before_dlq_at)}, row_count)
