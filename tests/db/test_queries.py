"""Every named query prepares against a migrated database, and the hot-path plans use
their indexes (pgqueuer's habit: a plan regression is a test failure)."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from awa_fast.db.queries import Q
from tests.factories import insert_job

_PARAM = re.compile(r"%\((\w+)\)s")


def _positional(sql: str) -> str:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return _PARAM.sub(number, sql)


@pytest.mark.parametrize("name", Q.names())
def test_named_query_prepares(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(f"PREPARE q AS {_positional(getattr(Q, name))}")
    conn.execute("DEALLOCATE q")


def _plan(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> str:
    conn.execute("SET enable_seqscan = off")
    rows = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchone()
    assert rows is not None
    return json.dumps(rows[0])


def test_claim_uses_the_claim_index(conn: psycopg.Connection[Any]) -> None:
    for _ in range(50):
        insert_job(conn)
    conn.execute("ANALYZE awa_fast.jobs_hot")
    plan = _plan(conn, Q.job_claim_batch, {"queue": "default", "limit": 10, "deadline_s": 60.0})
    assert "jobs_hot_claim" in plan


def test_overdue_sweep_reads_only_running_rows(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue, state, finalized_at)"
        " SELECT 'k', 'default', 'completed', now() FROM generate_series(1, 5000)"
    )
    conn.execute("ANALYZE awa_fast.jobs_hot")
    plan = _plan(conn, Q.job_select_overdue, {"grace_s": 5.0, "limit": 100})
    assert "jobs_hot_running" in plan


def test_completion_uses_the_primary_key(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue, state, finalized_at)"
        " SELECT 'k', 'default', 'completed', now() FROM generate_series(1, 5000)"
    )
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue, state, heartbeat_at)"
        " SELECT 'k', 'default', 'running', now() FROM generate_series(1, 2000)"
    )
    conn.execute("ANALYZE awa_fast.jobs_hot")
    plan = _plan(conn, Q.job_complete_many, {"ids": [1, 2], "leases": [1, 1]})
    assert "jobs_hot_pkey" in plan
