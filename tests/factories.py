"""Insert jobs in any state, straight into storage (River's testfactory): the tests of
committer and maintenance need states the public API never produces directly."""

from __future__ import annotations

from typing import Any

import orjson
import psycopg


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
    table = "jobs_deferred" if state in ("scheduled", "retryable") else "jobs_hot"
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
