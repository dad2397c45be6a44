"""The calls on single jobs (admin/jobs.py): cancel, also of a running attempt, retry,
get, list, a job's follow-ups, retry_failed, discard_failed, delete and
cancel_by_unique_key."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast import admin
from tests.factories import finish_jobs, insert_followup, insert_job
from tests.helpers import await_until, job, run

FAST = {"heartbeat_interval": 0.1, "rescue_interval": 0.1, "promote_interval": 0.05}


@dataclass
class Task:
    do: str


@dataclass
class Note:
    text: str


def test_admin_cancel_reaches_the_running_handler(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    observed: list[bool] = []

    @client.task(Task)
    async def task(job: awa_fast.Job[Task]) -> None:
        while not job.is_cancelled():
            await asyncio.sleep(0.01)
        observed.append(True)
        return None  # success after cancel: stale, must not complete the job

    async def main() -> int:
        async with client:
            row = await client.insert(Task("wait"))
            await client.start({"default": 1}, **FAST)
            await await_until(lambda: job(dsn, row.id)["state"] == "running")
            cancelled = await client.cancel(row.id)
            assert cancelled is not None and cancelled.state == "cancelled"
            await await_until(lambda: observed == [True], timeout=5, what="the handler to see it")
            await client.shutdown()
            return row.id

    job_id = run(main())
    final = job(dsn, job_id)
    assert final["state"] == "cancelled"
    assert final["errors"][-1]["error"] == "cancelled: by admin"


def test_cancel_retry_and_stats_on_idle_jobs(client: awa_fast.Client, dsn: str) -> None:
    queued = client.insert(Task("x"), queue="q1")
    later = client.insert(Task("y"), queue="q2", run_at=datetime.now(UTC) + timedelta(hours=1))
    assert client.cancel(queued.id).state == "cancelled"  # type: ignore[union-attr]
    assert client.cancel(later.id).state == "cancelled"  # type: ignore[union-attr]
    assert client.cancel(queued.id) is None  # already finished
    assert client.retry(queued.id).state == "available"  # type: ignore[union-attr]
    stats = {s.queue: s for s in client.queue_stats()}
    assert (stats["q1"].available, stats["q2"].cancelled) == (1, 1)
    assert [j.id for j in client.list_jobs(state="cancelled")] == [later.id]
    assert [j.id for j in client.list_jobs(queue="q1", kind="task")] == [queued.id]
    with pytest.raises(awa_fast.ValidationError):
        client.list_jobs(state="nope")


@pytest.mark.parametrize("state", ["available", "running", "scheduled", "retryable", "completed"])
def test_retry_leaves_a_job_it_does_not_revive_alone(
    client: awa_fast.Client, conn: Any, dsn: str, state: str
) -> None:
    """retry revives failed, cancelled and parked jobs; on any other job it returns None
    and changes nothing."""
    job_id = insert_job(conn, state=state, attempt=1, run_lease=1)
    before = job(dsn, job_id)
    assert client.retry(job_id) is None
    assert job(dsn, job_id) == before


def test_get_job_of_no_job_raises_naming_it(dsn: str) -> None:
    """As the SDK's ``get_job``: a missing job is an error (an AwaError a ported except
    clause catches, and a LookupError), from both clients alike."""
    with awa_fast.Client(dsn) as client:
        kept = client.insert(Task("x"))
        assert client.get_job(kept.id) == kept
        with pytest.raises(awa_fast.JobNotFound, match=f"job not found: {kept.id + 1}") as raised:
            client.get_job(kept.id + 1)
        assert raised.value.job_id == kept.id + 1
        assert isinstance(raised.value, awa_fast.AwaError | LookupError)

    async def main() -> None:
        async with awa_fast.AsyncClient(dsn) as client:
            with pytest.raises(awa_fast.JobNotFound, match=f"job not found: {kept.id + 1}"):
                await client.get_job(kept.id + 1)

    run(main())


def test_retry_failed_requeues_failed_jobs(client: awa_fast.Client, dsn: str, conn: Any) -> None:
    ids = [client.insert(Task(str(i)), queue="q").id for i in range(3)]
    finish_jobs(conn, "failed", attempt=25)
    assert client.retry_failed(queue="other").jobs == []
    assert [j.id for j in client.retry_failed(queue="q").jobs] == ids
    assert {job(dsn, i)["state"] for i in ids} == {"available"}
    assert {job(dsn, i)["attempt"] for i in ids} == {0}


def test_discard_failed_deletes_failed_jobs_of_a_kind(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    failed = [client.insert({"n": i}, kind="a").id for i in range(2)]
    other_kind = client.insert({}, kind="b").id
    completed = client.insert({}, kind="a").id
    finish_jobs(conn, "failed", [*failed, other_kind])
    finish_jobs(conn, "completed", [completed])
    assert client.discard_failed("a") == 2
    with pytest.raises(awa_fast.JobNotFound):
        client.get_job(failed[0])
    assert job(dsn, other_kind)["state"] == "failed" and job(dsn, completed)["state"] == "completed"
    assert client.discard_failed("a") == 0
    with pytest.raises(awa_fast.ValidationError, match="kind"):
        client.discard_failed("")


def test_cancel_by_unique_key_matches_the_components_the_insert_hashed(
    client: awa_fast.Client,
) -> None:
    by_args = client.insert(Note("hi"), unique_opts={"by_args": True})
    assert client.cancel_by_unique_key("note", args={"text": "other"}) is None
    assert client.cancel_by_unique_key("note", args=Note("hi"), queue="default") is None
    cancelled = client.cancel_by_unique_key("note", args=Note("hi"))
    assert cancelled is not None and (cancelled.id, cancelled.state) == (by_args.id, "cancelled")
    assert client.cancel_by_unique_key("note", args=Note("hi")) is None  # already finished

    by_queue = client.insert(Note("x"), queue="mail", unique={"by_args": False, "by_queue": True})
    assert client.cancel_by_unique_key("note") is None
    assert client.cancel_by_unique_key("note", queue="mail").id == by_queue.id  # type: ignore[union-attr]

    period = 3600
    by_period = client.insert(Note("p"), unique={"by_args": False, "by_period": period})
    bucket = int(time.time()) // period
    assert client.cancel_by_unique_key("note", period_bucket=bucket).id == by_period.id  # type: ignore[union-attr]
    with pytest.raises(awa_fast.ValidationError, match="period_bucket"):
        client.cancel_by_unique_key("note", period_bucket=-1)


def test_cancel_by_unique_key_takes_the_oldest_of_two_holders(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """A key enforced in `available` only lets a second job in once the first runs; the
    SDK cancels the oldest unfinished one, the running attempt, first."""
    first = client.insert(Note("k"), unique={"states": ["available"]})
    conn.execute(
        "UPDATE awa_fast.jobs_hot SET state = 'running', attempt = 1, run_lease = 1,"
        " heartbeat_at = now() WHERE id = %s",
        (first.id,),
    )
    second = client.insert(Note("k"), unique={"states": ["available"]})
    assert client.cancel_by_unique_key("note", args=Note("k")).id == first.id  # type: ignore[union-attr]
    assert client.cancel_by_unique_key("note", args=Note("k")).id == second.id  # type: ignore[union-attr]
    assert {job(dsn, first.id)["state"], job(dsn, second.id)["state"]} == {"cancelled"}


def test_list_followups_finds_a_jobs_followups_wherever_they_are(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    parent = client.insert({"n": 1}, kind="parent").id
    waiting = insert_followup(conn, parent)
    scheduled = insert_followup(conn, parent, run_at=datetime.now(UTC) + timedelta(hours=1))
    done, dead = insert_followup(conn, parent), insert_followup(conn, parent)
    finish_jobs(conn, "completed", [done])
    finish_jobs(conn, "failed", [dead])
    client.move_failed_to_dlq(dead, "gave up")
    insert_followup(conn, waiting)  # a follow-up's own follow-up is not its parent's
    found = client.run_op(admin.list_followups(parent))
    assert [(j.id, j.state, j.parent_id) for j in found] == [
        (waiting, "available", parent),
        (scheduled, "scheduled", parent),
        (done, "completed", parent),
        (dead, "failed", parent),
    ]
    assert [j.id for j in client.run_op(admin.list_followups(parent, limit=2))] == [
        waiting,
        scheduled,
    ]
    assert client.run_op(admin.list_followups(done)) == []
    assert client.get_job(waiting).parent_id == parent
    with pytest.raises(awa_fast.ValidationError):
        admin.list_followups(parent, limit=0)


def test_jobs_a_user_inserts_have_no_parent(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    one = client.insert({"n": 1}, kind="k")
    uniform = client.insert_many([{"n": i} for i in range(3)], kind="k")
    mixed = client.insert_many([{"n": 1}, awa_fast.InsertRequest({"n": 2}, kind="other")], kind="k")
    packed = client.insert_many([{"n": i} for i in range(100)], kind="k")
    rows = client.run_op(admin.get_jobs([one.id, *uniform, *mixed, packed[0]]))
    assert one.parent_id is None and len(rows) == 7
    assert [row.parent_id for row in rows] == [None] * 7
    assert conn.execute(
        "SELECT count(*) FROM awa_fast.jobs WHERE parent_id IS NOT NULL"
    ).fetchone() == (0,)


def test_delete_takes_jobs_in_every_state_but_running(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    ids = {
        state: insert_job(conn, state=state)
        for state in ("available", "running", "waiting_external", "scheduled", "failed")
    }
    packed = client.insert_many([{"n": i} for i in range(5)], kind="bulk", queue="bulk")
    deleted = client.run_op(admin.delete_jobs([*ids.values(), packed[2], 999_999]))
    assert deleted == sorted([*(v for k, v in ids.items() if k != "running"), packed[2]])
    left = [row[0] for row in conn.execute("SELECT id FROM awa_fast.jobs ORDER BY id")]
    assert left == sorted([ids["running"], *packed[:2], *packed[3:]])


@pytest.mark.parametrize("bad", ["12", 2.0, True, 2**63, None])
def test_a_job_id_that_is_no_bigint_is_refused_by_name(dsn: str, bad: Any) -> None:
    """Before, each reached Postgres and came back as its error (invalid input syntax,
    bigint out of range, no such function or operator)."""
    client = awa_fast.Client(dsn)
    try:
        kept = client.insert(Note("kept"))
        calls = {
            "get_job": lambda: client.get_job(bad),
            "cancel": lambda: client.cancel(bad),
            "retry": lambda: client.retry(bad),
            "dump_job": lambda: client.dump_job(bad),
            "retry_from_dlq": lambda: client.retry_from_dlq(bad),
            "purge_dlq_job": lambda: client.purge_dlq_job(bad),
            "move_failed_to_dlq": lambda: client.move_failed_to_dlq(bad, "why"),
        }
        for name, call in calls.items():
            with pytest.raises(awa_fast.ValidationError, match="job_id: must be an integer") as e:
                call()
            assert e.value.field == "job_id", name
        assert job(dsn, kept.id)["state"] == "available"
        # An id below 1 is a lookup that finds nothing, as in the Awa SDK.
        with pytest.raises(awa_fast.JobNotFound):
            client.get_job(-1)
        assert client.cancel(0) is None
    finally:
        client.close()
