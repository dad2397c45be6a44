"""A job and its attempts as the Awa SDK's JSON dumps (``awa job dump``, ``dump-run``):
formatting only, so the SDK's shapes and wording live in one place."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from awa_fast import validation
from awa_fast.admin.ops import Op, Rows, pretty
from awa_fast.db.queries import Q
from awa_fast.errors import JobNotFound, ValidationError
from awa_fast.types import JobState


def dump_job(job_id: int) -> Op[str]:
    """A job and its lifecycle as pretty JSON, in the Awa SDK's shape (``awa job dump``):
    ``job`` (every column), ``summary``, ``timeline`` and, for a dead-lettered job,
    ``dlq``. Raises JobNotFound for an id with no job ("job not found: ID", as the SDK)."""

    def shape(rows: Rows) -> str:
        if not rows:
            raise JobNotFound(job_id)
        return _dump(dict(rows[0]))

    return Op(Q.job_dump, {"id": validation.job_id(job_id)}, shape)


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
        return pretty(_run(dict(rows[0]), attempt))

    return Op(Q.job_dump, {"id": validation.job_id(job_id)}, shape)


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
    return pretty(dump)


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
