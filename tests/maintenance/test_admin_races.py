"""Admin statements racing the runtime or each other: one party holds its row lock in an
open transaction, the other's statement waits on it, then the first commits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

import awa_fast
from awa_fast import admin
from tests.factories import finish_jobs, insert_job
from tests.helpers import blocked_call, job


def _behind_open_transaction(
    dsn: str, hold: Callable[[psycopg.Connection[Any]], None], call: Callable[[], object]
) -> object:
    """Run ``hold`` in a transaction, start ``call`` in a thread, wait until the call waits
    on a lock ``hold`` took, commit, and return what ``call`` returned."""
    with psycopg.connect(dsn) as holder:
        hold(holder)
        with blocked_call(dsn, call) as result:
            holder.commit()
    return result[0]


def test_drain_skips_a_job_a_claim_took_meanwhile(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    claimed = insert_job(conn, queue="q")
    waiting = insert_job(conn, queue="q")

    def claim(holder: psycopg.Connection[Any]) -> None:
        holder.execute(
            "UPDATE awa_fast.jobs_hot SET state = 'running', attempt = 1,"
            " run_lease = run_lease + 1, heartbeat_at = now() WHERE id = %s",
            (claimed,),
        )

    drained = _behind_open_transaction(dsn, claim, lambda: client.drain_queue("q"))
    assert drained == 1
    assert (job(dsn, claimed)["state"], job(dsn, claimed)["run_lease"]) == ("running", 1)
    assert job(dsn, waiting)["state"] == "cancelled"


def test_a_dlq_entry_retried_twice_at_once_is_revived_once(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    job_id = client.insert({}, kind="k").id
    finish_jobs(conn, "failed", [job_id])
    client.move_failed_to_dlq(job_id, "broken")
    op = admin.retry_from_dlq(job_id)
    first: list[int | None] = []

    def retry(holder: psycopg.Connection[Any]) -> None:
        first.append(
            op.shape(holder.cursor(row_factory=dict_row).execute(op.sql, op.params).fetchall())
        )

    second = _behind_open_transaction(dsn, retry, lambda: client.retry_from_dlq(job_id))
    assert (first, second) == ([job_id], None)
    rows = conn.execute(
        "SELECT (SELECT count(*) FROM awa_fast.jobs WHERE id = %(id)s),"
        " (SELECT count(*) FROM awa_fast.dlq WHERE id = %(id)s)",
        {"id": job_id},
    ).fetchone()
    assert rows == (1, 0)
    assert job(dsn, job_id)["state"] == "available"


def test_moving_a_failed_job_to_the_dlq_loses_to_a_retry_that_locked_it_first(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    job_id = client.insert({}, kind="k").id
    finish_jobs(conn, "failed", [job_id])
    op = admin.retry(job_id)

    def retry(holder: psycopg.Connection[Any]) -> None:
        holder.execute(op.sql, op.params)

    moved = _behind_open_transaction(dsn, retry, lambda: client.move_failed_to_dlq(job_id, "x"))
    assert moved is None
    assert job(dsn, job_id)["state"] == "available" and client.dlq_depth() == 0
