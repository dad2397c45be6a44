"""retry_failed's result (the Awa SDK's RetryFailedResult): the jobs it requeued, the
failed jobs its filter found, and the failed jobs retention has deleted from the queue, with
retention and a second retry racing it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import awa_fast
from awa_fast import admin
from tests.factories import finish_jobs
from tests.helpers import blocked_call, job, leading, run
from tests.maintenance.support import maintenance as build_maintenance

LONG_AGO = (datetime.now(UTC) - timedelta(days=30)).isoformat()


def _failed(client: awa_fast.Client, conn: Any, queue: str, kind: str, **columns: object) -> int:
    """A failed job of ``queue`` and ``kind`` (finished ``columns``, e.g. long ago)."""
    job_id = client.insert({}, kind=kind, queue=queue).id
    finish_jobs(conn, "failed", [job_id], attempt=25, **columns)
    return job_id


def _sealed(conn: Any) -> dict[str, object]:
    """Columns that put a finished job in a sealed partition of jobs_done, one retention
    frees whole at its next pass once the job is past retention (migration 0030)."""
    [(slot,)] = conn.execute("SELECT (awa_fast.done_slot() + 1) % 8").fetchall()
    return {"slot": slot}


OWN_RETENTION = {"q": (3600.0, 3600.0)}  # queue q's jobs go by DELETE, a row at a time


def _clean(dsn: str, **config: Any) -> int:
    """The leader's retention step (the cleaner's run_once), on a connection of its own."""

    async def clean() -> int:
        async with (
            leading(build_maintenance(dsn, **config)) as maintenance,
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
        ):
            return await maintenance.cleaner.run_once(conn)

    return run(clean())


def test_jobs_and_matched_by_queue_kind_or_both(client: awa_fast.Client, conn: Any) -> None:
    a1, a2 = _failed(client, conn, "q1", "ka"), _failed(client, conn, "q1", "ka")
    b1 = _failed(client, conn, "q1", "kb")
    a3, b3 = _failed(client, conn, "q2", "ka"), _failed(client, conn, "q2", "kb")
    cancelled = client.insert({}, kind="ka", queue="q1").id
    client.cancel(cancelled)  # not failed: neither retried nor matched

    both = client.retry_failed(queue="q1", kind="kb")
    assert ([j.id for j in both.jobs], both.matched, both.pruned_failed_count) == ([b1], 1, None)
    by_kind = client.retry_failed(kind="ka")
    assert ([j.id for j in by_kind.jobs], by_kind.matched) == ([a1, a2, a3], 3)
    assert by_kind.pruned_failed_count is None
    by_queue = client.retry_failed(queue="q2")
    assert ([j.id for j in by_queue.jobs], by_queue.matched) == ([b3], 1)
    assert by_queue.pruned_failed_count == 0
    nothing = client.retry_failed(queue="q1")
    assert (nothing.jobs, nothing.matched, nothing.pruned_failed_count) == ([], 0, 0)

    # Each job comes back as it now is: available, attempts reset.
    retried = [*both.jobs, *by_kind.jobs, *by_queue.jobs]
    assert {(j.state, j.attempt) for j in retried} == {(awa_fast.JobState.Available, 0)}
    assert retried == [client.get_job(j.id) for j in retried]
    assert job(client.dsn, cancelled)["state"] == "cancelled"


def test_a_failed_job_whose_unique_key_a_live_job_holds_is_matched_not_retried(
    client: awa_fast.Client, conn: Any
) -> None:
    unique = awa_fast.UniqueOpts(by_args=True)
    held = client.insert({"day": "mon"}, kind="report", queue="q", unique=unique).id
    free = client.insert({"day": "tue"}, kind="report", queue="q", unique=unique).id
    finish_jobs(conn, "failed", [held, free])
    holder = client.insert({"day": "mon"}, kind="report", queue="q", unique=unique).id

    result = client.retry_failed(queue="q")
    assert ([j.id for j in result.jobs], result.matched) == ([free], 2)
    assert job(client.dsn, held)["state"] == "failed"
    assert job(client.dsn, holder)["state"] == "available"


def test_retention_counts_the_failed_jobs_it_deletes_per_queue(
    client: awa_fast.Client, conn: Any, dsn: str
) -> None:
    """The count grows with each retention step that frees failed jobs of the queue, by
    partition and by a queue's own retention; completed and cancelled ones are not counted,
    and neither are failed ones not yet past retention."""
    for queue in ("q1", "q1"):
        _failed(client, conn, queue, "k", finalized_at=LONG_AGO, **_sealed(conn))
    _failed(client, conn, "q2", "k", finalized_at=LONG_AGO)  # in the partition in use
    for state in ("completed", "cancelled"):
        old = client.insert({}, kind="k", queue="q1").id
        finish_jobs(conn, state, [old], finalized_at=LONG_AGO, **_sealed(conn))
    recent = _failed(client, conn, "q1", "k")
    # four by the sealed partition's TRUNCATE, q2's by its own retention's DELETE
    assert _clean(dsn, cleanup_batch=1, queue_retention={"q2": (3600.0, 3600.0)}) == 5

    result = client.retry_failed(queue="q1")
    assert ([j.id for j in result.jobs], result.matched) == ([recent], 1)
    assert result.pruned_failed_count == 2
    assert client.retry_failed(queue="q2").pruned_failed_count == 1
    assert client.retry_failed().pruned_failed_count == 3  # every queue's
    assert client.retry_failed(kind="k").pruned_failed_count is None
    assert client.retry_failed(queue="q1", kind="k").pruned_failed_count is None

    _failed(client, conn, "q1", "k", finalized_at=LONG_AGO, **_sealed(conn))
    assert _clean(dsn) == 1
    assert client.retry_failed(queue="q1").pruned_failed_count == 3


def test_the_async_client_returns_the_same_result(dsn: str, conn: Any) -> None:
    with awa_fast.Client(dsn) as client:
        failed = _failed(client, conn, "q", "k")

    async def retry() -> awa_fast.RetryFailedResult:
        async with awa_fast.AsyncClient(dsn) as client:
            return await client.retry_failed(queue="q")

    result = run(retry())
    assert isinstance(result, awa_fast.RetryFailedResult)
    assert ([j.id for j in result.jobs], result.matched, result.pruned_failed_count) == (
        [failed],
        1,
        0,
    )


def test_the_result_is_frozen_and_its_repr_counts_the_jobs(
    client: awa_fast.Client, conn: Any
) -> None:
    _failed(client, conn, "q", "k")
    result = client.retry_failed(queue="q")
    assert repr(result) == "RetryFailedResult(jobs=1, matched=1, pruned_failed_count=0)"
    with pytest.raises(AttributeError):
        result.matched = 2  # type: ignore[misc]


def test_two_retries_at_once_retry_each_job_once_and_the_second_matched_them(
    client: awa_fast.Client, conn: Any, dsn: str
) -> None:
    ids = [_failed(client, conn, "q", "k") for _ in range(2)]
    op = admin.retry_failed(queue="q")
    with psycopg.connect(dsn) as holder:
        rows = holder.cursor(row_factory=dict_row).execute(op.sql, op.params).fetchall()
        first = op.shape(rows)
        with blocked_call(dsn, lambda: client.retry_failed(queue="q")) as outcome:
            holder.commit()
    assert ([j.id for j in first.jobs], first.matched) == (ids, 2)
    [second] = outcome
    assert isinstance(second, awa_fast.RetryFailedResult)
    assert (second.jobs, second.matched) == ([], 2)  # found, then gone when it locked them
    assert {job(dsn, i)["state"] for i in ids} == {"available"}


def test_a_failed_job_retention_deletes_while_a_retry_waits_is_matched_not_retried(
    client: awa_fast.Client, conn: Any, dsn: str
) -> None:
    """The retry's scan finds the job, its lock waits on retention's delete, and finds it
    gone: matched, not retried; the count the retry read in its snapshot does not have it
    yet (each failed job is counted once), the next retry's does."""
    pruned = _failed(client, conn, "q", "k", finalized_at=LONG_AGO)

    async def clean_and_race() -> list[object]:
        async with (
            leading(build_maintenance(dsn, queue_retention=OWN_RETENTION)) as maintenance,
            await psycopg.AsyncConnection.connect(dsn) as holder,
        ):
            await holder.execute("SELECT 1")  # the transaction the delete waits in
            assert await maintenance.cleaner.run_once(holder) == 1  # not committed yet
            with blocked_call(dsn, lambda: client.retry_failed(queue="q")) as outcome:
                await holder.commit()
        return outcome

    [result] = run(clean_and_race())
    assert isinstance(result, awa_fast.RetryFailedResult)
    assert (result.jobs, result.matched, result.pruned_failed_count) == ([], 1, 0)
    after = client.retry_failed(queue="q")
    assert (after.matched, after.pruned_failed_count) == (0, 1)
    with pytest.raises(awa_fast.JobNotFound):
        client.get_job(pruned)


@pytest.mark.parametrize("by", ["partition", "own retention"])
def test_retention_skips_a_failed_job_a_retry_has_locked(
    client: awa_fast.Client, conn: Any, dsn: str, by: str
) -> None:
    """Retention does not wait on a retry's locks: it skips the job (a partition whose
    lock it cannot take at once waits for the next pass), which the retry then requeues,
    and counts nothing."""
    where = _sealed(conn) if by == "partition" else {}
    retried = _failed(client, conn, "q", "k", finalized_at=LONG_AGO, **where)
    own = OWN_RETENTION if by == "own retention" else {}
    op = admin.retry_failed(queue="q")
    with psycopg.connect(dsn) as holder:
        holder.execute(op.sql, op.params)
        assert _clean(dsn, queue_retention=own) == 0
    assert job(dsn, retried)["state"] == "available"
    assert client.retry_failed(queue="q").pruned_failed_count == 0
    assert _clean(dsn, queue_retention=own) == 0  # nothing left past retention
