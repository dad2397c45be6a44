"""The Awa SDK's dead-letter calls: moving failed jobs in, reading, reviving (at a time, in a
queue, at a priority) and purging, their filters and cursor, the allow_all guard, unique
keys, and bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_fast
from tests.factories import finish_jobs


def _dead(
    client: awa_fast.Client,
    conn: psycopg.Connection[Any],
    *,
    kind: str = "k",
    queue: str = "q",
    tags: list[str] | None = None,
    reason: str = "broken",
) -> int:
    """A job inserted, failed and moved to the dead-letter queue; its id."""
    job_id = client.insert({}, kind=kind, queue=queue, tags=tags).id
    finish_jobs(conn, "failed", [job_id], attempt=3, run_lease=3)
    assert client.move_failed_to_dlq(job_id, reason) is not None
    return job_id


def test_move_failed_to_dlq_then_read_and_revive_it(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    failed = client.insert({"n": 1}, kind="k", queue="q").id
    completed = client.insert({}, kind="k", queue="q").id
    finish_jobs(conn, "failed", [failed], attempt=3, run_lease=3)
    finish_jobs(conn, "completed", [completed])

    entry = client.move_failed_to_dlq(failed, "bad data")
    assert entry is not None
    assert (entry.job.id, entry.job.state, entry.reason, entry.original_run_lease) == (
        failed,
        "failed",
        "bad data",
        3,
    )
    with pytest.raises(awa_fast.JobNotFound):
        client.get_job(failed)
    assert client.get_dlq_job(failed) == entry
    assert client.move_failed_to_dlq(failed, "again") is None  # no longer failed
    assert client.move_failed_to_dlq(completed, "not failed") is None
    assert client.move_failed_to_dlq(999999, "unknown") is None
    assert client.get_dlq_job(999999) is None
    with pytest.raises(awa_fast.ValidationError, match="reason"):
        client.move_failed_to_dlq(completed, " ")
    assert (client.dlq_depth(), client.dlq_depth(queue="q"), client.dlq_depth(queue="x")) == (
        1,
        1,
        0,
    )

    revived = client.retry_from_dlq(failed, priority=1, queue="elsewhere")
    assert revived is not None
    assert (revived.state, revived.attempt, revived.priority, revived.queue) == (
        "available",
        0,
        1,
        "elsewhere",
    )
    assert revived.errors == entry.job.errors and revived.args == {"n": 1}
    assert client.get_dlq_job(failed) is None and client.dlq_depth() == 0
    assert client.retry_from_dlq(failed) is None  # already revived
    assert client.purge_dlq_job(failed) is False


def test_retry_from_dlq_at_a_later_time(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    later, due = _dead(client, conn), _dead(client, conn)
    when = datetime.now(UTC) + timedelta(hours=1)
    scheduled = client.retry_from_dlq(later, run_at=when)
    assert scheduled is not None and (scheduled.state, scheduled.datetimes.run_at) == (
        "scheduled",
        when,
    )
    past = client.retry_from_dlq(due, run_at=datetime.now(UTC) - timedelta(minutes=1))
    assert past is not None and past.state == "available"
    with pytest.raises(awa_fast.ValidationError, match="run_at"):
        client.retry_from_dlq(later, run_at="in an hour")
    with pytest.raises(awa_fast.ValidationError, match="priority"):
        client.retry_from_dlq(later, priority=9)
    with pytest.raises(awa_fast.ValidationError, match="queue"):
        client.retry_from_dlq(later, queue="")


def test_bulk_calls_need_a_filter_or_allow_all(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    kept = _dead(client, conn)
    for call in (
        lambda: client.bulk_retry_from_dlq(),
        lambda: client.purge_dlq(),
        lambda: client.purge_dlq(before_id=kept + 1),  # a cursor alone is no filter
        lambda: client.bulk_move_failed_to_dlq(reason="x"),
    ):
        with pytest.raises(awa_fast.ValidationError, match="allow_all=True") as refused:
            call()
        assert refused.value.field == "allow_all"
    assert client.dlq_depth() == 1
    assert client.purge_dlq(allow_all=True) == 1
    assert client.bulk_retry_from_dlq(allow_all=True) == 0


def test_bulk_moves_and_filters(client: awa_fast.Client, conn: psycopg.Connection[Any]) -> None:
    ids = {
        (kind, queue, tag): client.insert({}, kind=kind, queue=queue, tags=[tag]).id
        for kind in ("a", "b")
        for queue in ("q1", "q2")
        for tag in ("red", "blue")
    }
    finish_jobs(conn, "failed")
    assert client.bulk_move_failed_to_dlq(queue="q1", reason="batch") == 4
    assert client.bulk_move_failed_to_dlq(kind="a") == 2
    assert client.bulk_move_failed_to_dlq(allow_all=True) == 2
    assert client.dlq_depth_by_queue() == [("q1", 4), ("q2", 4)]
    assert {e.reason for e in client.list_dlq(queue="q1")} == {"batch"}
    assert {e.reason for e in client.list_dlq(queue="q2", kind="a")} == {"manual"}
    red = {e.job.id for e in client.list_dlq(tag="red")}
    assert red == {i for (_, _, tag), i in ids.items() if tag == "red"}

    assert client.bulk_retry_from_dlq(kind="b", tag="red") == 2
    assert client.purge_dlq(queue="q2", tag="blue") == 2
    assert client.purge_dlq(kind="a", queue="q1") == 2
    assert client.dlq_depth() == 2
    assert (
        client.bulk_retry_from_dlq(queue="q1") == 1 and client.bulk_retry_from_dlq(queue="q1") == 0
    )


def test_list_dlq_pages_with_its_cursor(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    """Entries moved in one statement share dlq_at: the cursor's id breaks the tie, and a
    later move comes first."""
    first = [client.insert({}, kind="k").id for _ in range(3)]
    finish_jobs(conn, "failed")
    client.bulk_move_failed_to_dlq(kind="k")
    last = _dead(client, conn)
    newest_first = [last, *sorted(first, reverse=True)]

    pages, cursor = [], {}
    while page := client.list_dlq(limit=2, **cursor):
        pages.append([e.job.id for e in page])
        cursor = {"before_dlq_at": page[-1].dlq_at, "before_id": page[-1].job.id}
    assert pages == [newest_first[:2], newest_first[2:]]
    assert [e.job.id for e in client.list_dlq(before_id=first[2])] == sorted(
        first[:2], reverse=True
    )
    older = client.list_dlq(before_dlq_at=client.get_dlq_job(last).dlq_at)  # type: ignore[union-attr]
    assert {e.job.id for e in older} == set(first)
    assert client.purge_dlq(kind="k", before_id=first[1]) == 1
    with pytest.raises(awa_fast.ValidationError, match="limit"):
        client.list_dlq(limit=0)
    with pytest.raises(awa_fast.ValidationError, match="before_id"):
        client.list_dlq(before_id=0)
    with pytest.raises(awa_fast.ValidationError, match="before_dlq_at"):
        client.purge_dlq(kind="k", before_dlq_at=datetime.now())  # naive


def test_a_live_job_holding_the_unique_key_keeps_the_entry_dead(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    dead = client.insert({"to": "x"}, kind="mail", unique={"by_args": True}).id
    finish_jobs(conn, "failed", [dead])
    client.move_failed_to_dlq(dead, "broken")
    live = client.insert({"to": "x"}, kind="mail", unique={"by_args": True}).id  # key was free

    with pytest.raises(awa_fast.UniqueConflict) as conflict:
        client.retry_from_dlq(dead)
    assert conflict.value.job_id == live
    assert client.bulk_retry_from_dlq(kind="mail") == 0
    assert client.get_dlq_job(dead) is not None

    client.cancel(live)
    assert client.retry_from_dlq(dead).state == "available"  # type: ignore[union-attr]
    with pytest.raises(awa_fast.UniqueConflict) as taken:  # the revived job holds its key
        client.insert({"to": "x"}, kind="mail", unique={"by_args": True})
    assert taken.value.job_id == dead
