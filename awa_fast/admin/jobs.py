"""Reading and changing single jobs: get, find, list, a job's follow-ups, cancel, retry,
retry_failed, discard_failed, delete and the holder of a unique key, kept apart from the
queue-wide calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from awa_fast import validation
from awa_fast.admin.ops import UNCLAIMED_KEY_STATES, Op, Rows, any_rows, revived_one, row_count
from awa_fast.codec import encode_args
from awa_fast.db.queries import Q
from awa_fast.errors import JobNotFound, ValidationError
from awa_fast.types import JOB_STATES, JobRow
from awa_fast.unique import unique_key


def _jobs(rows: Rows) -> list[JobRow]:
    return [JobRow.from_row(r) for r in rows]


def get_job(job_id: int) -> Op[JobRow]:
    """The job, waiting, running or finished; :class:`JobNotFound` when there is none (a
    dead-lettered job is :func:`~awa_fast.admin.dlq.get_dlq_job`'s)."""

    def found(rows: Rows) -> JobRow:
        if not rows:
            raise JobNotFound(job_id)
        return JobRow.from_row(rows[0])

    return Op(Q.job_get, {"id": validation.job_id(job_id)}, found)


def find_job(job_id: int) -> Op[JobRow | None]:
    """The job, or None: for reading back a job a statement just changed, which retention
    or a purge may have removed since."""
    return Op(
        Q.job_get,
        {"id": validation.job_id(job_id)},
        lambda rows: JobRow.from_row(rows[0]) if rows else None,
    )


def get_jobs(job_ids: Sequence[int]) -> Op[list[JobRow]]:
    """The jobs of ``job_ids``, in that order (an id with no job is left out)."""

    def in_order(rows: Rows) -> list[JobRow]:
        found = {row["id"]: row for row in rows}
        return [JobRow.from_row(found[i]) for i in job_ids if i in found]

    return Op(Q.job_get_many, {"ids": [validation.job_id(i) for i in job_ids]}, in_order)


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


def list_followups(job_id: int, *, limit: int = 100) -> Op[list[JobRow]]:
    """The follow-ups the job's transitions inserted (their ``parent_id`` is ``job_id``),
    oldest first, at most ``limit``; a dead-lettered one shows as failed."""
    if limit < 1:
        raise ValidationError("limit", f"must be >= 1, got {limit}")
    params = {"id": validation.job_id(job_id), "limit": limit}
    return Op(Q.job_list_followups, params, _jobs)


def cancel(job_id: int, reason: str = "by admin") -> Op[bool]:
    """Cancel a job in any unfinished state; True if it was cancelled."""
    params = {"id": validation.job_id(job_id), "reason": reason}
    return Op(Q.job_cancel, params, any_rows, first=Q.job_unpack)


def retry(job_id: int) -> Op[int | None]:
    """Run a failed, cancelled or parked (waiting_external) job again, attempts reset, as
    the Awa SDK's retry does; its id if it was queued, None for a job in any other state. A
    parked job's callback is cleared with it, so that a late answer finds no job. A live
    job holding its unique key meanwhile raises UniqueConflict naming that job."""
    params = {
        "id": validation.job_id(job_id),
        "kind": None,
        "queue": None,
        "unique_states": UNCLAIMED_KEY_STATES,
    }
    return Op(Q.job_retry, params, revived_one)


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
    params = {"id": None, "kind": kind, "queue": queue, "unique_states": UNCLAIMED_KEY_STATES}
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
    return Op(Q.job_discard_failed, {"kind": validation.name("kind", kind)}, row_count)


def delete_jobs(job_ids: Sequence[int]) -> Op[list[int]]:
    """Delete the jobs of ``job_ids`` that are not running (cancel a running one instead,
    so that its handler hears of it), wherever they wait or lie finished; the ids deleted,
    ascending. A dead-lettered job is :func:`~awa_fast.admin.dlq.purge_dlq_job`'s."""
    params = {"ids": [validation.int_in("id", i, 1, validation.MAX_JOB_ID) for i in job_ids]}
    return Op(
        Q.job_delete_many,
        params,
        lambda rows: sorted(row["id"] for row in rows),
        first=Q.job_unpack_many,
    )


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
