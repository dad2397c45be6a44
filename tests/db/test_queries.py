"""Every named query prepares against a migrated database, and the hot-path plans use
their indexes (pgqueuer's habit: a plan regression is a test failure)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from awa_fast.db.connections import (
    PLANNER_SETTINGS,
    Database,
    connect_hot_async,
    planner_settings_missing,
)
from awa_fast.db.queries import Q
from awa_fast.maintenance.rescuer import RESCUES
from tests.factories import insert_job, record_emptied_statistics
from tests.helpers import lock_waiters, plan_name, run

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


def _generic_plan(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> str:
    """The plan of ``query`` as a prepared statement after psycopg's fifth execution may
    use: the generic one, blind to the parameters' values."""
    conn.execute(f"PREPARE hot AS {_positional(query)}")
    for name, value in PLANNER_SETTINGS.items():  # as the hot connections run them
        conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
    names = list(dict.fromkeys(_PARAM.findall(query)))  # $1, $2, ... in first-use order
    values = sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
    explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE hot({})").format(values)
    rows = conn.execute(explain).fetchone()
    assert rows is not None
    return json.dumps(rows[0])


def _packs(conn: psycopg.Connection[Any]) -> None:
    """2,000 packs of 2 jobs each (ids far above the rows')."""
    conn.execute(
        "INSERT INTO awa_fast.job_packs"
        " (kind, queue, priority, max_attempts, tags, metadata, ids, args, size, next_id)"
        " SELECT 'k', 'default', 2, 25, '{}', '{}', ARRAY[g * 2, g * 2 + 1],"
        " '{}' || chr(30) || '{}', 2, g * 2 FROM generate_series(10000000, 10002000) g"
    )


def _queue(conn: psycopg.Connection[Any], *, table: str) -> None:
    """``analyzed``/``no-stats``: a backlog of rows and packs beside a long history,
    analyzed or not (where a plan that scans the queue shows); ``empty``: a run's start,
    before any statistics or rows; ``emptied``: a burst's start after the leader vacuumed
    a jobs_hot of dead versions only and recorded it empty (where a plan that puts
    jobs_hot outside the batch shows: joined to it, a 1,000-job completion read all of
    jobs_hot per job, 464 ms), and job_packs recorded empty under packs again."""
    if table == "empty":
        return
    if table == "emptied":
        record_emptied_statistics(conn, running=3000)
        _packs(conn)
        conn.execute("DELETE FROM awa_fast.job_packs")
        conn.execute("VACUUM ANALYZE awa_fast.job_packs")
        _packs(conn)
        return
    conn.execute(
        "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at)"
        " SELECT 'k', 'default', 'completed', now() FROM generate_series(1, 50000)"
    )
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue)"
        " SELECT 'k', 'default' FROM generate_series(1, 20000)"
    )
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue, state, heartbeat_at)"
        " SELECT 'k', 'default', 'running', now() FROM generate_series(1, 2000)"
    )
    _packs(conn)
    if table == "analyzed":
        conn.execute("ANALYZE awa_fast.jobs_hot, awa_fast.jobs_done, awa_fast.job_packs")


@pytest.mark.parametrize("table", ["analyzed", "no-stats", "empty", "emptied"])
@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("job_complete_many", {"ids": [1, 2], "leases": '{"1": 1, "2": 1}'}),
        (
            "job_heartbeat_many",
            {
                "ids": [1, 2],
                "leases": '{"1": 1, "2": 1}',
                "host_id": 1,
                "waiting": [2],
                "deadlines": '{"default": 60}',
            },
        ),
        (
            "job_register_callback",
            {
                "id": 1,
                "lease": 1,
                "callback_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                "timeout_s": 60.0,
                "rules": '{"on_complete": "payload.ok"}',
            },
        ),
        ("callback_lock", {"callback_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7"}),
        (
            "job_wait_callback",
            {"id": 1, "lease": 1, "callback_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7"},
        ),
        (
            "job_park_callback",
            {"id": 1, "lease": 1, "callback_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7"},
        ),
        ("job_poll_callbacks", {"ids": [1, 2]}),
        (
            "job_transition_many",
            {
                "ids": [1, 2],
                "leases": '{"1": 1, "2": 1}',
                "outcomes": '{"1": {"state": "failed", "dead": false, "delay": 0},'
                ' "2": {"state": "retryable", "dead": false, "delay": 1}}',
            },
        ),
        (
            "job_rescue_many",
            {
                "ids": [1, 2],
                "leases": '{"1": 1, "2": 1}',
                "messages": '{"1": "lost", "2": "lost"}',
                "dlq_all": False,
                "no_dlq": [],
                "dlq": [],
                "from_state": "running",
                "base": 1.0,
                "max": 60.0,
                "jitter": 0.0,
            },
        ),
    ],
)
def test_generic_plans_reach_rows_by_key(
    conn: psycopg.Connection[Any], name: str, params: dict[str, Any], table: str
) -> None:
    _queue(conn, table=table)
    plan = _generic_plan(conn, getattr(Q, name), params)
    keys = {  # the rows it locked, reached by their key
        "job_wait_callback": "jobs_hot_callback",  # a callback id is unique
        "job_park_callback": "jobs_hot_callback",
        "callback_lock": "jobs_hot_callback",
    }
    key = keys.get(name, "jobs_hot_pkey")
    assert key in plan and "Seq Scan" not in plan, plan
    assert "Nested Loop" not in plan, plan  # no join for the planner to turn inside out
    # Compiling costs more than these run: a claim of 500 from 120,000 rows once spent
    # 430 ms in LLVM and 4 ms running.
    assert '"JIT"' not in plan, plan


def _scans(node: dict[str, Any], relation: str) -> Iterator[dict[str, Any]]:
    """The plan nodes under ``node`` that read ``relation``."""
    if plan_name(node.get("Relation Name", "")) == relation:
        yield node
    for child in node.get("Plans", ()):
        yield from _scans(child, relation)


@pytest.mark.parametrize("table", ["analyzed", "no-stats", "empty", "emptied"])
def test_a_standby_collect_looks_up_each_job_by_its_id(
    conn: psycopg.Connection[Any], table: str
) -> None:
    """As a join, its plan once read jobs_hot's primary key whole into a Materialize, every
    dead entry with it: a collect went from 0.1 to 2.8 ms over a held horizon."""
    _queue(conn, table=table)
    [plan] = json.loads(_generic_plan(conn, Q.standby_collect, {"host_id": 1}))
    scans = list(_scans(plan["Plan"], "jobs_hot"))
    assert scans, plan
    for scan in scans:
        assert plan_name(scan["Index Name"]) == "jobs_hot_pkey", scan
        assert "id = " in scan["Index Cond"], scan


def test_the_planner_settings_missing_from_a_session_are_named(dsn: str) -> None:
    """What a runner behind a pooler checks at its start: a plain session lacks the hot
    settings (enable_seqscan is on by default everywhere), a hot connection has them all."""

    async def main() -> tuple[list[str], list[str]]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as plain:
            lacking = await planner_settings_missing(plain)
        async with await connect_hot_async(Database(dsn)) as hot:
            return lacking, await planner_settings_missing(hot)

    lacking, hot = run(main())
    assert "enable_seqscan = off" in lacking and hot == []


def test_claim_returns_rows_in_claim_order(conn: psycopg.Connection[Any]) -> None:
    for priority in (4, 1, 3, 2, 1):
        insert_job(conn, priority=priority)
    rows = conn.execute(
        Q.job_claim_batch, {"queue": "default", "limit": 10, "deadline_s": 60.0, "host_id": 1}
    ).fetchall()
    assert [row[7] for row in rows] == [1, 1, 2, 3, 4]


def _claim_plans(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> list[str]:
    """The generic plans of the statements a claim runs inside awa_fast.claim_jobs (as the
    claimer's connections reach them after a few claims), logged by auto_explain to this
    session as notices."""
    plans: list[str] = []
    conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    for name, value in {
        **PLANNER_SETTINGS,
        "plan_cache_mode": "force_generic_plan",
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_format": "json",
        "auto_explain.log_level": "notice",
    }.items():
        conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(*name.split(".")), value))
    conn.execute("LOAD 'auto_explain'")
    conn.execute(query, params)
    return [plan for plan in plans if plan.startswith("duration")]


@pytest.mark.parametrize("table", ["analyzed", "no-stats", "empty", "emptied"])
@pytest.mark.parametrize("name", ["job_claim_batch", "job_claim_rows", "job_claim_aged"])
def test_claim_statements_reach_rows_by_window_and_ctid(
    conn: psycopg.Connection[Any], name: str, table: str
) -> None:
    """Each of a claim's statements reads a lane's window from its position in
    jobs_hot_ready or reaches rows by ctid: no statement scans a table (migration 0027;
    that reads stay flat under a held horizon, tests/db/test_window_claims.py)."""
    _queue(conn, table=table)
    params = {"queue": "default", "limit": 200, "deadline_s": 60.0, "host_id": 1, "aging_s": 5}
    conn.execute(getattr(Q, name), params)  # a window and a position to read from
    plans = _claim_plans(conn, getattr(Q, name), params)
    assert plans
    for plan in plans:
        assert "Seq Scan" not in plan and '"JIT"' not in plan, plan
    joined = "".join(plans)
    assert "jobs_hot_ready" in joined and "Tid Scan" in joined, plans


def test_claims_of_a_queue_take_turns(conn: psycopg.Connection[Any], dsn: str) -> None:
    """A claim waits for an open claim of its queue and then finds the rows that one took
    taken: each row is claimed once, by one claim, with its lease bumped once."""
    ids = {insert_job(conn) for _ in range(10)}
    params = {"queue": "default", "deadline_s": 60.0, "host_id": 1}
    with (
        psycopg.connect(dsn) as first,
        psycopg.connect(dsn, autocommit=True) as second,
        ThreadPoolExecutor(1) as pool,
    ):
        with first.transaction():
            held = first.execute(Q.job_claim_batch, {**params, "limit": 6}).fetchall()
            waiting = pool.submit(
                lambda: second.execute(Q.job_claim_batch, {**params, "limit": 10}).fetchall()
            )
            deadline = time.monotonic() + 30
            while lock_waiters(dsn) == 0 and not waiting.done():
                assert time.monotonic() < deadline
            assert not waiting.done()
        rest = waiting.result(timeout=30)
        after = second.execute(Q.job_claim_batch, {**params, "limit": 10}).fetchall()
    assert (len(held), len(rest), after) == (6, 4, [])
    assert {row[0] for row in held} | {row[0] for row in rest} == ids
    assert {row[1] for row in held + rest} == {1}
    running = conn.execute(
        "SELECT count(*) FROM awa_fast.jobs_hot WHERE state = 'running' AND run_lease = 1"
    ).fetchone()
    assert running == (10,)


@pytest.mark.parametrize("table", ["analyzed", "no-stats", "empty", "emptied"])
def test_callback_sweep_scans_only_its_partial_index(
    conn: psycopg.Connection[Any], table: str
) -> None:
    """Under the settings the sweeps run with: an index scan, which skips entries earlier
    scans marked dead, never a scan of the table, a bitmap of the whole index (every dead
    entry since the last vacuum visited again) or parallel workers. (The backstop sweeps,
    stale and overdue, read the whole table by design, once a backstop interval.)"""
    _queue(conn, table=table)
    for cost in ("parallel_setup_cost", "parallel_tuple_cost", "min_parallel_index_scan_size"):
        conn.execute(f"SET {cost} = 0")  # parallel workers as cheap as they get
    plan = _generic_plan(conn, Q.job_select_callback_expired, {"limit": 1000})
    assert re.search('"Index Name": "jobs_hot_waiting_[01]"', plan), plan
    assert not re.search('"Node Type": "(Seq Scan|Bitmap|Gather)|"Parallel Aware": true', plan)


def test_completion_uses_the_primary_key(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at)"
        " SELECT 'k', 'default', 'completed', now() FROM generate_series(1, 5000)"
    )
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue, state, heartbeat_at)"
        " SELECT 'k', 'default', 'running', now() FROM generate_series(1, 2000)"
    )
    conn.execute("ANALYZE awa_fast.jobs_hot")
    plan = _plan(conn, Q.job_complete_many, {"ids": [1, 2], "leases": '{"1": 1, "2": 1}'})
    assert "jobs_hot_pkey" in plan


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``node`` and every node under it, of a JSON plan."""
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def test_retry_by_id_reads_one_finished_row(conn: psycopg.Connection[Any]) -> None:
    """retry(job_id) shares its statement with retry_failed (which scans for failed jobs);
    by id, even in the generic plan a client may cache, it must reach the row by the
    primary key of jobs_done, however many finished jobs that holds."""
    conn.execute(
        "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at)"
        " SELECT 'k', 'default', 'failed', now() FROM generate_series(1, 20000)"
    )
    [(slot,)] = conn.execute("SELECT awa_fast.done_slot()").fetchall()
    conn.execute("ANALYZE awa_fast.jobs_done")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute(f"PREPARE retry AS {_positional(Q.job_retry)}")
    with conn.transaction(force_rollback=True):
        rows = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE retry(42, NULL, NULL, '{available}')"
        )
        [[plan]] = rows.fetchall()
    # Every read of jobs_done that ran (the pick, the delete) goes by primary key, a probe
    # of each partition's (migration 0030), to one row in all.
    scans = [
        node
        for node in _plan_nodes(plan[0]["Plan"])
        if plan_name(node.get("Relation Name", "")) == "jobs_done"
        and "Scan" in node["Node Type"]
        and node.get("Actual Loops", 0) > 0
    ]
    by_key = [s for s in scans if plan_name(s.get("Index Name", "")) == "jobs_done_pkey"]
    assert f"jobs_done_{slot}" in {s["Relation Name"] for s in by_key}, scans
    assert all(s["Actual Rows"] <= 1 for s in by_key), scans
    for scan in scans:  # the empty partitions, planned as empty: nothing to read
        if scan not in by_key:
            assert (scan["Actual Rows"], scan.get("Rows Removed by Filter", 0)) == (0, 0), scan


_USE = re.compile(r"\bQ\.(\w+)\b")
PACKAGE = Path(__file__).resolve().parents[2] / "awa_fast"
_NAMED_DYNAMICALLY = {select for select, *_ in RESCUES}  # run by getattr(Q, select)


def _used_names() -> dict[str, str]:
    """Each ``Q.<name>`` the package spells, with the first file that spells it."""
    used: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in _USE.findall(path.read_text(encoding="utf-8")):
            used.setdefault(name, str(path.relative_to(PACKAGE.parent)))
    return used


def test_every_query_name_the_package_spells_exists() -> None:
    """A misspelled ``Q.name`` fails here, not only when its line runs."""
    missing = {name: path for name, path in _used_names().items() if name not in Q.names()}
    assert missing == {}


def test_every_named_query_is_used() -> None:
    """No statement in awa_fast/db/sql is left behind by code that no longer runs it."""
    unused = set(Q.names()) - set(_used_names()) - _NAMED_DYNAMICALLY
    assert unused == set()
