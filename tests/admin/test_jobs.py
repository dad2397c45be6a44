"""Admin operations and recovery in one process: cancel, retry, pause/resume, stats,
deadlines, and scheduled jobs running on time."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import awa_fast
from tests.factories import finish_jobs, insert_job
from tests.helpers import await_until, job, run, run_until, settled, states

FAST = {"heartbeat_interval": 0.1, "rescue_interval": 0.1, "promote_interval": 0.05}


@dataclass
class Task:
    do: str


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


def test_pause_stops_claiming_and_resume_restarts_it(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(Task)(lambda job: None)

    async def main() -> None:
        async with client:
            await client.pause_queue("held")
            held = await client.insert(Task("held"), queue="held")
            marker = await client.insert(Task("marker"), queue="open")
            await client.start({"held": 2, "open": 2}, **FAST)
            await await_until(lambda: job(dsn, marker.id)["state"] == "completed")
            assert job(dsn, held.id)["state"] == "available"
            assert {s.queue: s.paused for s in await client.queue_stats()}["held"] is True
            await client.resume_queue("held")
            await await_until(lambda: job(dsn, held.id)["state"] == "completed", timeout=10)
            await client.shutdown()

    run(main())


def test_handler_hanging_past_its_deadline_is_cancelled_and_retried(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Task)
    async def task(job: awa_fast.Job[Task]) -> None:
        if job.attempt == 1:
            await asyncio.sleep(3600)  # hangs, ignoring its cancel flag

    async def main() -> int:
        async with client:
            row = await client.insert(Task("hang"))
            await run_until(
                client,
                {"default": 1},
                lambda: job(dsn, row.id)["state"] == "completed",
                timeout=30,
                deadline=0.5,
                deadline_grace=0.3,
                backoff=awa_fast.Backoff(0.05),
                **FAST,
            )
            return row.id

    final = job(dsn, run(main()))
    assert final["attempt"] == 2
    assert final["errors"][0]["error"].startswith("deadline exceeded"), final["errors"]


def test_scheduled_jobs_run_within_one_promotion_interval(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(Task)(lambda job: None)
    interval = 0.2

    async def main() -> int:
        async with client:
            await client.start({"default": 5}, promote_interval=interval)
            when = datetime.now(UTC) + timedelta(seconds=1)
            row = await client.insert(Task("later"), run_at=when)
            assert row.state == "scheduled"
            await await_until(lambda: settled(dsn) and "scheduled" not in states(dsn))
            await client.shutdown()
            return row.id

    final = job(dsn, run(main()))
    delay = (final["attempted_at"] - final["run_at"]).total_seconds()
    assert 0 <= delay <= interval + 0.3, delay
