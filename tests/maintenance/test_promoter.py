"""The promoter's pass against a real database: due jobs move, future ones stay, the
leader's pause shortens for a job that falls due sooner."""

from __future__ import annotations

from typing import Any

import psycopg

from awa_fast.maintenance.promoter import MIN_PAUSE, Promoter, PromoterConfig
from awa_fast.maintenance.stats import MaintenanceStats
from tests.factories import insert_job
from tests.helpers import job, run
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
