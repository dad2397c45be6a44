"""Insert jobs in any state, straight into storage (River's testfactory): the tests of
committer and maintenance need states the public API never produces directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import psycopg

from awa_fast import producer, producer_sync
from awa_fast.db.connections import IdMap
from awa_fast.types import InsertRequest

# Every table that holds jobs (packs hold available ones).
JOB_TABLES = ("jobs_hot", "job_packs", "jobs_deferred", "jobs_done", "dlq")
TABLE_OF_STATE = {
    "available": "jobs_hot",
    "running": "jobs_hot",
    "waiting_external": "jobs_hot",
    "scheduled": "jobs_deferred",
    "retryable": "jobs_deferred",
    "completed": "jobs_done",
    "failed": "jobs_done",
    "cancelled": "jobs_done",
}


def insert_job(
    conn: psycopg.Connection[Any],
    *,
    kind: str = "noop",
    queue: str = "default",
    args: dict[str, Any] | None = None,
    state: str = "available",
    attempt: int = 0,
    max_attempts: int = 25,
    run_lease: int = 0,
    priority: int = 2,
) -> int:
    table = TABLE_OF_STATE[state]
    row = conn.execute(
        f"INSERT INTO awa_fast.{table} (kind, queue, args, state, attempt, max_attempts,"
        " run_lease, priority, heartbeat_at)"
        " VALUES (%s, %s, %s::jsonb, %s, %s, %s, %s, %s,"
        " CASE WHEN %s = 'running' THEN now() END) RETURNING id",
        (
            kind,
            queue,
            orjson.dumps(args or {}).decode(),
            state,
            attempt,
            max_attempts,
            run_lease,
            priority,
            state,
        ),
    ).fetchone()
    assert row is not None
    return int(row[0])


def insert_followup(conn: psycopg.Connection[Any], parent: int, **options: Any) -> int:
    """A job of kind "child" inserted as a transition of ``parent`` inserts a follow-up
    (its parent_id set); ``options`` as InsertRequest's."""
    job = producer.prepare(InsertRequest({"of": parent}, **{"kind": "child", **options}))
    return producer_sync.insert_prepared(conn, job, parent_id=parent).id


def finish_jobs(
    conn: psycopg.Connection[Any],
    state: str,
    ids: Sequence[int] | None = None,
    **columns: object,
) -> None:
    """Finish jobs straight in storage, as a transition would: out of jobs_hot into
    jobs_done's partition in use, in ``state`` with ``columns`` set (every job of jobs_hot
    when ``ids`` is None)."""
    conn.execute(
        "WITH moved AS (DELETE FROM awa_fast.jobs_hot"
        "  WHERE %(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]) RETURNING *)"
        " INSERT INTO awa_fast.jobs_done"
        " SELECT r.* FROM moved, jsonb_populate_record(NULL::awa_fast.jobs_done, to_jsonb(moved)"
        "  || jsonb_build_object('state', %(state)s::text, 'finalized_at', now(),"
        "                        'heartbeat_at', NULL, 'deadline_at', NULL,"
        "                        'slot', awa_fast.done_slot())"
        "  || %(columns)s::jsonb) r",
        {
            "ids": None if ids is None else list(ids),
            "state": state,
            "columns": orjson.dumps(columns).decode(),
        },
    )


def insert_running(conn: psycopg.Connection[Any], count: int) -> None:
    """``count`` running attempts (lease 1, a fresh heartbeat) in jobs_hot."""
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue, state, attempt, run_lease, heartbeat_at)"
        " SELECT 'k', 'default', 'running', 1, 1, now() FROM generate_series(1, %s)",
        (count,),
    )


def record_emptied_statistics(conn: psycopg.Connection[Any], *, running: int) -> None:
    """jobs_hot with ``running`` running attempts and statistics that say it is empty: what
    the leader's VACUUM records between bursts, when the table holds dead versions only."""
    insert_running(conn, running)
    conn.execute("DELETE FROM awa_fast.jobs_hot")
    conn.execute("VACUUM ANALYZE awa_fast.jobs_hot")
    insert_running(conn, running)


def rescue_params(job_id: int, *, lease: int, message: str, from_state: str) -> dict[str, Any]:
    """Parameters of ``Q.job_rescue_many`` for one attempt, no dead-letter queue, no
    jitter: what a rescue sweep would pass for it."""
    return {
        "ids": [job_id],
        "leases": IdMap({job_id: lease}),
        "messages": IdMap({job_id: message}),
        "from_state": from_state,
        "dlq_all": False,
        "no_dlq": [],
        "dlq": [],
        "base": 1.0,
        "max": 60.0,
        "jitter": 0.0,
    }
