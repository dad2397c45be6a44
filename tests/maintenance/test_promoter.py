"""The promoter's pass against a real database: due jobs move, future ones stay, the
leader's pause shortens for a job that falls due sooner, and a step with nothing due takes
no fenced transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from awa_fast.maintenance.leader import FENCE_KEY
from awa_fast.maintenance.promoter import MIN_PAUSE, Promoter, PromoterConfig
from awa_fast.maintenance.stats import MaintenanceStats
from tests.factories import insert_job
from tests.helpers import await_until, job, lock_waiters, run
from tests.maintenance.support import leader, one_pass


def _promoter(dsn: str, **config: Any) -> Promoter:
    return Promoter(leader=leader(dsn), stats=MaintenanceStats(), config=PromoterConfig(**config))


def _step(dsn: str) -> float:
    promoter = _promoter(dsn, interval=10.0)
    return run(one_pass(promoter.leader, promoter.step))


def test_the_leader_wakes_when_the_next_deferred_job_falls_due(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    assert _step(dsn) == 10.0  # nothing waits
    later = insert_job(conn, state="scheduled")
    conn.execute(
        "UPDATE awa_fast.jobs_deferred SET run_at = now() + interval '1 hour' WHERE id = %s",
        (later,),
    )
    assert _step(dsn) == 10.0  # not before
    soon = insert_job(conn, state="scheduled")
    conn.execute(
        "UPDATE awa_fast.jobs_deferred SET run_at = clock_timestamp() + interval '3 seconds'"
        " WHERE id = %s",
        (soon,),
    )
    assert 0 < _step(dsn) <= 3.0
    conn.execute(
        "UPDATE awa_fast.jobs_deferred SET run_at = now() - interval '1 second' WHERE id = %s",
        (soon,),
    )
    with psycopg.connect(conn.info.dsn) as other:  # a concurrent pass holds the due job
        other.execute("SELECT 1 FROM awa_fast.jobs_deferred WHERE id = %s FOR UPDATE", (soon,))
        assert _step(dsn) == MIN_PAUSE
    assert _step(dsn) == 10.0  # it moved; the one due in an hour is all that waits
    assert job(dsn, soon)["state"] == "available"


def test_promotion_moves_due_jobs_and_leaves_future_ones(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    due = [insert_job(conn, state="scheduled") for _ in range(5)]
    future = insert_job(conn, state="retryable")
    conn.execute(
        "UPDATE awa_fast.jobs_deferred SET run_at = now() + interval '1 hour' WHERE id = %s",
        (future,),
    )
    promoter = _promoter(dsn, batch=2)
    assert run(one_pass(promoter.leader, promoter.run_once)) == 5
    assert {job(dsn, i)["state"] for i in due} == {"available"}
    assert job(dsn, future)["state"] == "retryable"
    assert promoter.stats.promoted == 5


def test_a_step_takes_the_fence_only_when_a_job_is_due(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """With the fence lock held against it (as a new term's election would hold it), a
    step with nothing due still returns, since it only looked; one with a job due waits
    for the fence, and then moves the job."""
    promoter = _promoter(dsn, interval=10.0)

    async def main(fence: psycopg.Connection[Any]) -> None:
        assert await promoter.leader.check()
        try:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
                fence.execute("SELECT pg_advisory_lock(%s)", (FENCE_KEY,))
                async with asyncio.timeout(10):  # a step that took the fence waits here
                    assert await promoter.step(c) == 10.0
                due = insert_job(conn, state="scheduled")
                step = asyncio.create_task(promoter.step(c))
                await await_until(lambda: lock_waiters(dsn) == 1, what="the step to wait")
                assert job(dsn, due)["state"] == "scheduled"
                fence.execute("SELECT pg_advisory_unlock_all()")
                assert await step == 10.0
                assert job(dsn, due)["state"] == "available"
        finally:
            await promoter.leader.close()

    with psycopg.connect(dsn, autocommit=True) as fence:
        run(main(fence))
