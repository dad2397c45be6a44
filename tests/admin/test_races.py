"""Admin statements racing the runtime or each other: one party holds its row lock in an
open transaction, the other's statement waits on it, then the first commits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

import awa_fast
from awa_fast import admin
from awa_fast.db.queries import Q
from tests.factories import finish_jobs, insert_job, rescue_params
from tests.helpers import blocked_call, job, wait_until


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


def _parked(conn: psycopg.Connection[Any]) -> tuple[int, str]:
    """A job parked on a callback after its first attempt, as a handler returning
    WaitForCallback leaves it: (its id, its callback id)."""
    job_id = insert_job(conn, state="waiting_external", attempt=1, run_lease=1)
    row = conn.execute(
        "UPDATE awa_fast.jobs_hot SET callback_id = gen_random_uuid(),"
        " callback_timeout_at = now() + interval '1 hour', attempted_at = now()"
        " WHERE id = %s RETURNING callback_id::text",
        (job_id,),
    ).fetchone()
    assert row is not None
    return job_id, row[0]


def _raised(call: Callable[[], object]) -> Callable[[], object]:
    """``call``, returning the exception it raises instead (blocked_call runs it in a
    thread, where a raise would be lost)."""

    def calling() -> object:
        try:
            return call()
        except Exception as exc:
            return exc

    return calling


def test_a_callback_waiting_on_a_retry_of_its_parked_job_finds_nothing(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """The retry locked the parked row first and clears its callback id: the callback,
    once the retry commits, must not complete the revived job."""
    job_id, callback_id = _parked(conn)
    op = admin.retry(job_id)
    retried: list[int | None] = []

    def retry(holder: psycopg.Connection[Any]) -> None:
        retried.append(
            op.shape(holder.cursor(row_factory=dict_row).execute(op.sql, op.params).fetchall())
        )

    late = _behind_open_transaction(
        dsn, retry, _raised(lambda: client.complete_external(callback_id, {"late": 1}))
    )
    assert retried == [job_id]
    assert isinstance(late, awa_fast.CallbackNotFound) and late.callback_id == callback_id
    row = job(dsn, job_id)
    assert (row["state"], row["attempt"], row["callback_id"], row["callback_result"]) == (
        "available",
        0,
        None,
        None,
    )


def test_a_retry_waiting_on_a_callback_resolving_the_job_leaves_it_resolved(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """The callback locked the parked row first and completes the job: the retry, once the
    callback commits, finds no parked job and acts on nothing."""
    job_id, callback_id = _parked(conn)
    op = admin.complete_external(callback_id, {"paid": 1})

    def resolve(holder: psycopg.Connection[Any]) -> None:
        holder.execute(op.sql, op.params)

    retried = _behind_open_transaction(dsn, resolve, lambda: client.retry(job_id))
    assert retried is None
    row = job(dsn, job_id)
    assert (row["state"], row["attempt"], row["callback_result"]) == ("completed", 1, {"paid": 1})


def test_a_timeout_rescue_waiting_on_a_retry_of_its_parked_job_finds_nothing(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    """The callback timeout's rescue reaches the row by (id, run_lease, waiting_external):
    the revived job keeps its lease until its next claim, so the state alone must turn a
    rescue that waited on the retry's lock away, recording no error."""
    job_id, _ = _parked(conn)
    op = admin.retry(job_id)
    rescue = rescue_params(
        job_id, lease=1, message="callback timed out", from_state="waiting_external"
    )
    rescued: list[int] = []
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as sweeper:
        holder.execute(op.sql, op.params)
        pid = sweeper.info.backend_pid

        def sweep() -> None:
            rescued.append(len(sweeper.execute(Q.job_rescue_many, rescue).fetchall()))

        thread = threading.Thread(target=sweep)
        thread.start()
        wait_until(lambda: _waits_on_a_lock(conn, pid), timeout=10, what="the rescue to wait")
        holder.commit()
        thread.join()
    assert rescued == [0]
    row = job(dsn, job_id)
    assert (row["state"], row["attempt"], row["errors"]) == ("available", 0, [])


def _waits_on_a_lock(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return bool(row and row[0])
