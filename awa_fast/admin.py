"""Admin operations as data: each is one named statement plus how to shape its rows.

``Client`` runs them on a connection, ``AsyncClient`` awaits the same :class:`Op`, so the two
clients cannot drift apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

import orjson

from awa_fast import callback_rules, validation
from awa_fast.codec import encode_args, encode_json
from awa_fast.db.queries import Q
from awa_fast.errors import CallbackNotFound, JobNotFound, UniqueConflict, ValidationError
from awa_fast.producer import unique_key
from awa_fast.types import (
    DEFAULT_CALLBACK_TIMEOUT,
    DEFAULT_UNIQUE_STATES,
    JOB_STATES,
    JobRow,
    JobState,
)

T = TypeVar("T")
Rows = Sequence[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """A statement, its parameters and what its rows become. ``first``, when given, runs
    before it with the same parameters, as a statement of its own: it unpacks the packs
    holding the jobs ``sql`` acts on (migration 0016), so that ``sql``, which gets a
    snapshot of its own, finds them as rows."""

    sql: str
    params: dict[str, Any]
    shape: Callable[[Rows], T]
    first: str | None = None


@dataclass(frozen=True, slots=True)
class Locked(Generic[T]):
    """An operation decided under a row lock: ``lock`` reads and locks rows, and its shape
    returns the result, or the Op that acts on what it read. Both clients run the two in one
    transaction, so nothing changes the rows between the reading and the acting."""

    lock: Op[T | Op[T]]


@dataclass(frozen=True, slots=True)
class QueueStat:
    """A queue's jobs by state. ``total_queued`` is every unfinished job (running and
    parked ones included), ``completed_last_hour`` the completions of the last hour,
    ``lag_seconds`` how long the oldest available job has been due; ``paused_by`` is who
    paused the queue, when given. Failed and cancelled jobs count until retention deletes
    them."""

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


def _any(rows: Rows) -> bool:
    return bool(rows)


def _count(rows: Rows) -> int:
    return len(rows)


def _nothing(rows: Rows) -> None:
    return None


def _jobs(rows: Rows) -> list[JobRow]:
    return [JobRow.from_row(r) for r in rows]


def _stats(rows: Rows) -> list[QueueStat]:
    return [QueueStat(**r) for r in rows]


def get_job(job_id: int) -> Op[JobRow]:
    """The job, waiting, running or finished; :class:`JobNotFound` when there is none (a
    dead-lettered job is :func:`get_dlq_job`'s)."""

    def found(rows: Rows) -> JobRow:
        if not rows:
            raise JobNotFound(job_id)
        return JobRow.from_row(rows[0])

    return Op(Q.job_get, {"id": job_id}, found)


def find_job(job_id: int) -> Op[JobRow | None]:
    """The job, or None: for reading back a job a statement just changed, which retention
    or a purge may have removed since."""
    return Op(Q.job_get, {"id": job_id}, lambda rows: JobRow.from_row(rows[0]) if rows else None)


def get_jobs(job_ids: Sequence[int]) -> Op[list[JobRow]]:
    """The jobs of ``job_ids``, in that order (an id with no job is left out)."""

    def in_order(rows: Rows) -> list[JobRow]:
        found = {row["id"]: row for row in rows}
        return [JobRow.from_row(found[i]) for i in job_ids if i in found]

    return Op(Q.job_get_many, {"ids": list(job_ids)}, in_order)


def dump_job(job_id: int) -> Op[str]:
    """A job and its lifecycle as pretty JSON, in the Awa SDK's shape (``awa job dump``):
    ``job`` (every column), ``summary``, ``timeline`` and, for a dead-lettered job,
    ``dlq``. Raises JobNotFound for an id with no job ("job not found: ID", as the SDK)."""

    def shape(rows: Rows) -> str:
        if not rows:
            raise JobNotFound(job_id)
        return _dump(dict(rows[0]))

    return Op(Q.job_dump, {"id": job_id}, shape)


_HISTORY_NOTES = [
    "Historical attempts are reconstructed from errors[]: awa-fast keeps no table of runs.",
    "Only the current attempt has live progress, callback, and metadata fields.",
]


_NOT_RUN = "The job has not been claimed yet; attempt 0 is the pre-run snapshot."


def dump_run(job_id: int, attempt: int | None = None) -> Op[str]:
    """One attempt of a job as pretty JSON, in the Awa SDK's shape (``awa job dump-run``):
    the current attempt from the job's row (attempt 0 before its first claim, and again
    after a retry resets the count), an earlier one from the error it recorded. Raises
    JobNotFound for an id with no job (as the SDK), ValidationError for an attempt it
    cannot show, with the SDK's wording (:func:`_run` says which)."""
    if attempt is not None:
        attempt = validation.int_in("attempt", attempt, 0, 2**31 - 1)

    def shape(rows: Rows) -> str:
        if not rows:
            raise JobNotFound(job_id)
        return _pretty(_run(dict(rows[0]), attempt))

    return Op(Q.job_dump, {"id": job_id}, shape)


def _run(job: dict[str, Any], attempt: int | None) -> dict[str, Any]:
    """The SDK's rules: the current attempt (0 included) comes from the row. Another one
    comes from its entry in errors[] (the last entry, should a retry have run it twice):
    below the current attempt, or any attempt once a retry has reset the count to 0 (its
    entries are all the job has run). Past the current attempt, or 0 once the job has
    run, there is none; neither is an attempt without an entry."""
    current, job_id = job["attempt"], job["id"]
    selected = current if attempt is None else attempt
    now = selected == current
    entry = next((e for e in reversed(job["errors"]) if e.get("attempt") == selected), None)
    if not now and current and not 0 < selected < current:
        raise ValidationError(
            "attempt",
            f"attempt {selected} is not available for job {job_id}; current attempt is {current}",
        )
    if not now and entry is None:
        raise ValidationError(
            "attempt",
            f"attempt {selected} is not present in the recorded error history for job {job_id}",
        )
    terminal = None if entry is None else bool(entry.get("terminal"))
    return {
        "job_id": job_id,
        "kind": job["kind"],
        "queue": job["queue"],
        "selected_attempt": selected,
        "current_attempt": current,
        "current_run_lease": job["run_lease"],
        "selected_run_lease": job["run_lease"] if now else None,
        "source": "current_job_row" if now else "error_history",
        # An earlier attempt ended in its entry: failed if that was terminal, else retried.
        "state": job["state"] if now else ("failed" if terminal else "retryable"),
        "started_at": job["attempted_at"] if now else None,
        "finished_at": job["finalized_at"] if now else entry and entry.get("at"),
        "error": entry and entry.get("error"),
        "terminal": terminal,
        "progress": job["progress"] if now else None,
        "metadata": job["metadata"] if now else None,
        "callback": (
            {"id": str(job["callback_id"]), "timeout_at": job["callback_timeout_at"]}
            if now and job["callback_id"] is not None
            else None
        ),
        "raw_error_entry": entry,
        "notes": _HISTORY_NOTES if not now else [_NOT_RUN] if not current else [],
    }


def _dump(row: dict[str, Any]) -> str:
    reason, dlq_at = row.pop("dlq_reason"), row.pop("dlq_at")
    job: dict[str, Any] = {
        k: v.astimezone(UTC) if isinstance(v, datetime) else v for k, v in row.items()
    }
    state, errors = JobState(job["state"]), job["errors"]
    finished = state in (JobState.Completed, JobState.Failed, JobState.Cancelled)
    dump: dict[str, Any] = {
        "job": job,
        "summary": {
            "original_priority": job["priority"],
            "can_retry": reason is None and state in (JobState.Failed, JobState.Cancelled),
            "can_cancel": reason is None and not finished,
            "error_count": len(errors),
            "latest_error": errors[-1] if errors else None,
        },
        "timeline": _timeline(job, state, finished),
    }
    if reason is not None:
        dump["dlq"] = {"reason": reason, "dlq_at": dlq_at, "original_run_lease": job["run_lease"]}
    return _pretty(dump)


def _pretty(value: object) -> str:
    """Indented JSON, times in UTC with a Z, bytes (a unique key) as hex."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z, default=_hex).decode()


def _hex(value: object) -> str:
    """orjson's fallback: bytes (a unique key) as hex."""
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot encode {type(value).__name__}")


def _event(
    at: datetime, label: str, state: str | None, *, detail: str | None = None, error: bool = False
) -> dict[str, Any]:
    return {"timestamp": at, "label": label, "state": state, "detail": detail, "is_error": error}


def _timeline(job: dict[str, Any], state: JobState, finished: bool) -> list[dict[str, Any]]:
    """Created, each recorded error, the last attempt's start and the finish, by time."""
    attempt = job["attempt"]
    events = [_event(job["created_at"], "Created", None)]
    for entry in job["errors"]:
        at = entry.get("at") if isinstance(entry, dict) else None
        if isinstance(at, str):
            label = (
                "Error" if entry.get("attempt") is None else f"Attempt {entry['attempt']} failed"
            )
            when = datetime.fromisoformat(at).astimezone(UTC)
            events.append(_event(when, label, "failed", detail=entry.get("error"), error=True))
    if job["attempted_at"] is not None:
        if state is JobState.WaitingExternal:
            label, shown = f"Attempt {attempt} — waiting for callback", state.value
        else:
            label = f"Attempt {attempt} {'started' if finished else 'running'}"
            shown = "running" if finished else state.value
        events.append(_event(job["attempted_at"], label, shown))
    if finished and job["finalized_at"] is not None:
        plural = "" if attempt == 1 else "s"
        label = {
            JobState.Completed: f"Completed (attempt {attempt})",
            JobState.Failed: f"Failed after {attempt} attempt{plural}",
        }.get(state, "Cancelled")
        events.append(_event(job["finalized_at"], label, state.value))
    return sorted(events, key=lambda event: event["timestamp"])


def list_cron_jobs() -> Op[list[dict[str, Any]]]:
    """Every periodic job's row, by name."""
    return Op(Q.cron_list, {}, lambda rows: [dict(row) for row in rows])


def list_queue_descriptors() -> Op[list[dict[str, Any]]]:
    """Every queue descriptor's row, by queue (awa_fast.descriptors)."""
    return _descriptors("queue")


def list_job_kind_descriptors() -> Op[list[dict[str, Any]]]:
    """Every job-kind descriptor's row, by kind (awa_fast.descriptors)."""
    return _descriptors("kind")


def _descriptors(scope: str) -> Op[list[dict[str, Any]]]:
    """The rows of one scope, each named by its scope ("queue": ..., or "kind": ...)."""

    def shape(rows: Rows) -> list[dict[str, Any]]:
        return [
            {scope: row["name"], **{k: v for k, v in row.items() if k != "name"}} for row in rows
        ]

    return Op(Q.descriptor_list, {"scope": scope}, shape)


def delete_cron_job(name: str) -> Op[bool]:
    """Remove a schedule (a host that still registers it writes it back when it starts)."""
    return Op(Q.cron_delete, {"name": name}, _any)


def cancel(job_id: int, reason: str = "by admin") -> Op[bool]:
    """Cancel a job in any unfinished state; True if it was cancelled."""
    return Op(Q.job_cancel, {"id": job_id, "reason": reason}, _any, first=Q.job_unpack)


# A revived job's unique key whose claim is gone is taken with the default live states.
_UNCLAIMED_KEY_STATES = list(DEFAULT_UNIQUE_STATES)


def retry(job_id: int) -> Op[int | None]:
    """Run a failed, cancelled or parked (waiting_external) job again, attempts reset, as
    the Awa SDK's retry does; its id if it was queued, None for a job in any other state. A
    parked job's callback is cleared with it, so that a late answer finds no job. A live
    job holding its unique key meanwhile raises UniqueConflict naming that job."""
    params = {"id": job_id, "kind": None, "queue": None, "unique_states": _UNCLAIMED_KEY_STATES}
    return Op(Q.job_retry, params, _revived_one)


@dataclass(frozen=True, slots=True, repr=False)
class RetryFailedResult:
    """What ``retry_failed`` did, in the Awa SDK's names: ``jobs``, the jobs moved back to
    available, as they now are, by id; ``matched``, the failed jobs the filter found. The
    difference stayed where it was or went elsewhere: a job whose unique key a live job
    holds stays failed, and one that another retry, a move to the dead-letter queue or
    retention took while this ran is gone. ``pruned_failed_count`` is how many failed jobs
    retention has deleted from the queue (from every queue without a queue filter) since
    migration 0014, so that a shortfall has an explanation; None when filtering by kind,
    as retention counts them by queue only."""

    jobs: list[JobRow]
    matched: int
    pruned_failed_count: int | None

    def __repr__(self) -> str:
        # The SDK's shape: the jobs by count, so a log line stays one line.
        return (
            f"RetryFailedResult(jobs={len(self.jobs)}, matched={self.matched}, "
            f"pruned_failed_count={self.pruned_failed_count})"
        )


def retry_failed(*, kind: str | None = None, queue: str | None = None) -> Op[RetryFailedResult]:
    """Run every failed job of ``kind`` and ``queue`` again (each None for any)."""
    params = {"id": None, "kind": kind, "queue": queue, "unique_states": _UNCLAIMED_KEY_STATES}
    return Op(Q.job_retry, params, _retried)


def _retried(rows: Rows) -> RetryFailedResult:
    """job_retry's rows: the requeued jobs (held-off ones have no id), and on every row
    the counts."""
    return RetryFailedResult(
        jobs=[JobRow.from_row(row) for row in rows if row["id"] is not None],
        matched=rows[0]["matched"],
        pruned_failed_count=rows[0]["pruned_failed_count"],
    )


def discard_failed(kind: str) -> Op[int]:
    """Delete every failed job of ``kind``; returns how many."""
    return Op(Q.job_discard_failed, {"kind": validation.name("kind", kind)}, _count)


def unique_key_holder(
    kind: str,
    *,
    queue: str | None = None,
    args: object = None,
    period_bucket: int | None = None,
) -> Op[int | None]:
    """The oldest unfinished job with the unique key of these components; give each of
    ``queue``, ``args`` and ``period_bucket`` exactly when the insert's UniqueOpts took it
    (``by_queue``, ``by_args``, ``by_period``), as the Awa SDK asks."""
    key = unique_key(
        validation.name("kind", kind),
        queue=None if queue is None else validation.name("queue", queue),
        args=None if args is None else encode_args(args).decode(),
        period_bucket=None
        if period_bucket is None
        else validation.int_in("period_bucket", period_bucket, 0, 2**63 - 1),
    )
    return Op(
        Q.job_select_by_unique_key, {"key": key}, lambda rows: rows[0]["id"] if rows else None
    )


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
        Q.queue_drain, {"queue": validation.name("queue", queue)}, _count, first=Q.queue_unpack
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
    return _pretty(
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
        validation.int_in("before_id", before_id, 1, 2**63 - 1)
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
    return Op(Q.dlq_get, {"id": job_id}, _dlq_one)


def dlq_depth(*, queue: str | None = None) -> Op[int]:
    return Op(Q.dlq_depth, {"queue": queue}, lambda rows: int(rows[0]["depth"]))


def dlq_depth_by_queue() -> Op[list[tuple[str, int]]]:
    """Entries per queue, deepest first."""
    return Op(Q.dlq_depth_by_queue, {}, lambda rows: [(r["queue"], r["depth"]) for r in rows])


def _revived_one(rows: Rows) -> int | None:
    """The revived job's id; None if there was no such entry. An entry held off by a live
    job with its unique key raises UniqueConflict naming that job, and stays."""
    for row in rows:
        if row["holder"] is not None:
            raise UniqueConflict(row["holder"])
    return rows[0]["id"] if rows else None


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
        "id": job_id,
        "kind": None,
        "queue": None,
        "tag": None,
        "run_at": validation.run_at(run_at),
        "priority": None if priority is None else validation.int_in("priority", priority, 1, 4),
        "new_queue": None if queue is None else validation.name("queue", queue),
        "unique_states": _UNCLAIMED_KEY_STATES,
    }
    return Op(Q.dlq_retry, params, _revived_one)


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
    fixed = {"unique_states": _UNCLAIMED_KEY_STATES}
    return Op(Q.dlq_retry, {**params, **unchanged, **fixed}, _revived_count)


def _reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError("reason", f"must be a non-empty string, got {reason!r}")
    return reason


def move_failed_to_dlq(job_id: int, reason: str) -> Op[DlqEntry | None]:
    """Move a failed job into the dead-letter queue; None if it is not failed."""
    params = {"id": job_id, "kind": None, "queue": None, "reason": _reason(reason)}
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
    return Op(Q.dlq_move_failed, params, _count)


def purge_dlq_job(job_id: int) -> Op[bool]:
    params = {"id": job_id, "kind": None, "queue": None, "tag": None, **_cursor(None, None)}
    return Op(Q.dlq_purge, params, _any)


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
    return Op(Q.dlq_purge, {**params, **_cursor(before_id, before_dlq_at)}, _count)


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
    callback_id: str,
    state: str,
    *,
    payload: str | None = None,
    error: dict[str, str] | None = None,
) -> Op[JobRow]:
    """The job on ``callback_id`` completed with ``payload`` (JSON text), failed with the
    ``error`` entry (its text under "error", and any detail), or made available again."""
    params = {
        "callback_id": _callback_id(callback_id),
        "state": state,
        "payload": payload,
        "error": None if error is None else orjson.dumps(error).decode(),
    }
    return Op(Q.callback_resolve, params, _answered(callback_id))


def complete_external(callback_id: str, payload: object = None) -> Op[JobRow]:
    """Complete the job waiting on ``callback_id``, with ``payload`` as its callback_result."""
    return _resolve(callback_id, "completed", payload=_payload(payload))


def fail_external(callback_id: str, error: str) -> Op[JobRow]:
    return _resolve(callback_id, "failed", error={"error": f"callback failed: {error}"})


def retry_external(callback_id: str) -> Op[JobRow]:
    """Give the parked job another attempt (the callback's attempt counts as used)."""
    return _resolve(callback_id, "available")


@dataclass(frozen=True, slots=True)
class ResolveResult:
    """What :func:`resolve_callback` did: ``outcome`` is "completed" (``job`` completed with
    ``payload``, transformed when on_complete matched), "failed" (``job`` failed) or
    "ignored" (the job still waits on its callback; ``reason`` says why)."""

    outcome: Literal["completed", "failed", "ignored"]
    job: JobRow | None = None
    payload: Any = None
    reason: str | None = None

    def is_completed(self) -> bool:
        return self.outcome == "completed"

    def is_failed(self) -> bool:
        return self.outcome == "failed"

    def is_ignored(self) -> bool:
        return self.outcome == "ignored"


def resolve_callback(
    callback_id: str, payload: object = None, default_action: str = "ignore"
) -> Locked[ResolveResult]:
    """Decide the job waiting on ``callback_id`` by the CEL expressions its handler gave
    ``register_callback`` (callback_rules.py has the SDK's rules), falling back on
    ``default_action`` ("complete", "fail" or "ignore"). The row stays locked from reading
    the expressions to acting on them, so of two resolves of one callback only the first
    acts; the second finds it spent (CallbackNotFound), as after any other answer."""
    action = callback_rules.default_action_of(default_action)
    params = {"callback_id": _callback_id(callback_id)}
    given = _payload(payload)

    def decide(rows: Rows) -> ResolveResult | Op[ResolveResult]:
        if not rows:
            raise CallbackNotFound(callback_id)
        verdict = callback_rules.decide(rows[0]["callback_rules"], given, action)
        if verdict.outcome == "ignored":
            return ResolveResult("ignored", reason=verdict.reason)
        state = "completed" if verdict.outcome == "completed" else "failed"
        op = _resolve(callback_id, state, payload=verdict.payload, error=verdict.error)
        return Op(op.sql, op.params, lambda rows: _resolved_as(verdict, op.shape(rows)))

    return Locked(Op(Q.callback_lock, params, decide))


def _resolved_as(verdict: callback_rules.Verdict, job: JobRow) -> ResolveResult:
    if verdict.outcome == "completed":
        return ResolveResult("completed", job=job, payload=job.callback_result)
    return ResolveResult("failed", job=job)


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


def heartbeat_callback(
    callback_id: str, timeout_seconds: float = DEFAULT_CALLBACK_TIMEOUT
) -> Op[JobRow]:
    """The external system behind ``callback_id`` is still at work: its job, waiting on it,
    times out ``timeout_seconds`` from now instead."""
    params = {
        "callback_id": _callback_id(callback_id),
        "timeout_s": validation.positive_seconds("timeout_seconds", timeout_seconds),
    }
    return Op(Q.callback_heartbeat, params, _answered(callback_id))
