"""The calls on whole queues (admin/queues.py): drain_queue, pause_queue(paused_by) and
resume_queue, queue_stats' totals and plan; and the Awa SDK's admin calls on the async
client."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.queries import Q
from tests.factories import JOB_TABLES, finish_jobs, insert_job
from tests.helpers import await_until, job, plan_name, run

FAST = {"heartbeat_interval": 0.1, "rescue_interval": 0.1, "promote_interval": 0.05}


@dataclass
class Note:
    text: str


def _state(conn: psycopg.Connection[Any], job_id: int) -> str:
    row = conn.execute("SELECT state::text FROM awa_fast.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_drain_cancels_what_waits_and_leaves_running_attempts(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    waiting = [
        insert_job(conn, queue="q", state=state)
        for state in ("available", "scheduled", "retryable", "waiting_external")
    ]
    running = insert_job(conn, queue="q", state="running", attempt=1, run_lease=1)
    elsewhere = insert_job(conn, queue="other")
    done = client.insert(Note("done"), queue="q")
    finish_jobs(conn, "completed", [done.id])

    assert client.drain_queue("q") == 4
    assert [_state(conn, i) for i in waiting] == ["cancelled"] * 4
    assert (_state(conn, running), _state(conn, elsewhere)) == ("running", "available")
    assert _state(conn, done.id) == "completed"
    assert client.get_job(waiting[0]).errors[-1]["error"] == "cancelled: queue drained"
    assert client.drain_queue("q") == 0
    with pytest.raises(awa_fast.ValidationError, match="queue"):
        client.drain_queue("")


def test_pause_records_who_paused_until_resumed(client: awa_fast.Client) -> None:
    client.pause_queue("q", paused_by="ops@example.com")
    stat = {s.queue: s for s in client.queue_stats()}["q"]
    assert (stat.paused, stat.paused_by) == (True, "ops@example.com")
    client.resume_queue("q")
    stat = {s.queue: s for s in client.queue_stats()}["q"]
    assert (stat.paused, stat.paused_by) == (False, None)
    client.pause_queue("q")
    assert {s.queue: s.paused_by for s in client.queue_stats()}["q"] is None
    with pytest.raises(awa_fast.ValidationError, match="paused_by"):
        client.pause_queue("q", paused_by=7)  # type: ignore[arg-type]


def test_pause_stops_claiming_and_resume_restarts_it(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(Note, queue="open")(lambda job: None)  # a queue the runner runs

    async def main() -> None:
        async with client:
            await client.pause_queue("held")
            held = await client.insert(Note("held"), queue="held")
            marker = await client.insert(Note("marker"), queue="open")
            await client.start({"held": 2, "open": 2}, **FAST)
            await await_until(lambda: job(dsn, marker.id)["state"] == "completed")
            assert job(dsn, held.id)["state"] == "available"
            assert {s.queue: s.paused for s in await client.queue_stats()}["held"] is True
            await client.resume_queue("held")
            await await_until(lambda: job(dsn, held.id)["state"] == "completed", timeout=10)
            await client.shutdown()

    run(main())


def test_queue_stats_totals(client: awa_fast.Client, conn: psycopg.Connection[Any]) -> None:
    for state in ("available", "available", "running", "waiting_external", "scheduled"):
        insert_job(conn, queue="q", state=state)
    insert_job(conn, queue="q", state="retryable")
    conn.execute("UPDATE awa_fast.jobs_hot SET run_at = now() - interval '30 seconds'")
    finished = {state: client.insert(Note(state), queue="q").id for state in ("failed", "x")}
    finish_jobs(conn, "failed", [finished["failed"]])
    finish_jobs(conn, "completed", [finished["x"]])
    cancelled = client.insert(Note("c"), queue="q")
    client.cancel(cancelled.id)
    old = client.insert(Note("old"), queue="q")
    finish_jobs(conn, "completed", [old.id], finalized_at="2000-01-01T00:00:00+00:00")
    insert_job(conn, queue="idle", state="running")

    stats = {s.queue: s for s in client.queue_stats()}
    q = stats["q"]
    assert (q.total_queued, q.available, q.running, q.waiting_external) == (6, 2, 1, 1)
    assert (q.scheduled, q.retryable, q.failed, q.cancelled) == (1, 1, 1, 1)
    assert q.completed_last_hour == 1  # not the one finished long ago
    assert q.lag_seconds is not None and 29 < q.lag_seconds < 120
    assert (q.paused, q.paused_by) == (False, None)
    assert (stats["idle"].total_queued, stats["idle"].lag_seconds) == (1, None)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan."""
    return [plan, *(node for child in plan.get("Plans", []) for node in _nodes(child))]


def test_queue_stats_reads_the_counters_and_a_few_index_entries(
    conn: psycopg.Connection[Any],
) -> None:
    """With 100k finished jobs over a day and 500 waiting, queue_stats reads the counters,
    and of the job tables only, for a queue with available jobs (its lag), each lane's next
    row from its window (awa_fast.lane_head) and the first pack of each priority: nothing
    it reads grows with the jobs. Every statement, those inside functions too, is caught by
    auto_explain."""
    conn.execute(
        "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at)"
        " SELECT 'k', 'q' || (i % 5),"
        "  (CASE i % 200 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled' ELSE 'completed' END)"
        "   ::awa_fast.job_state,"
        "  now() - (i % 86400) * interval '1 second'"
        " FROM generate_series(1, 100000) AS i"
    )
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue, priority)"
        " SELECT 'k', 'q1', 1 + i % 4 FROM generate_series(1, 500) AS i"
    )
    conn.execute("VACUUM ANALYZE awa_fast.jobs_done, awa_fast.jobs_hot")
    plans: list[dict[str, Any]] = []
    conn.add_notice_handler(
        lambda notice: plans.append(json.loads((notice.message_primary or "").split("\n", 1)[1]))
    )
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_analyze = on",
        "auto_explain.log_format = json",
        "auto_explain.log_level = notice",
    ):
        conn.execute(f"SET {setting}")
    conn.execute("LOAD 'auto_explain'")
    q1 = next(s for s in conn.execute(Q.queue_stats).fetchall() if s[0] == "q1")
    assert q1[2] == 500 and q1[10] is not None  # available, lag
    nodes = [n for plan in plans for n in _nodes(plan["Plan"])]
    jobs = [n for n in nodes if plan_name(n.get("Relation Name", "")) in JOB_TABLES]
    assert {(plan_name(n["Relation Name"]), plan_name(n.get("Index Name", ""))) for n in jobs} == {
        ("jobs_hot", "jobs_hot_ready"),
        ("job_packs", "job_packs_claim"),
    }, jobs
    # the lanes' first rows: one of jobs_hot for each of q1's four priorities
    assert sum(n["Actual Rows"] * n["Actual Loops"] for n in jobs) == 4


def test_async_client_runs_the_same_admin_calls(dsn: str, conn: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        async with awa_fast.AsyncClient(dsn) as client:
            unique = await client.insert(Note("a"), queue="q", unique_opts={"by_args": True})
            assert (await client.cancel_by_unique_key("note", args=Note("a"))).id == unique.id  # type: ignore[union-attr]
            queued = await client.insert(Note("b"), queue="q")
            await client.pause_queue("q", paused_by="me")
            stats = {s.queue: s for s in await client.queue_stats()}
            assert (stats["q"].paused_by, stats["q"].total_queued) == ("me", 1)
            assert await client.drain_queue("q") == 1
            assert json.loads(await client.dump_job(queued.id))["job"]["state"] == "cancelled"
            failed = await client.insert({}, kind="f")
            finish_jobs(conn, "failed", [failed.id])
            assert await client.discard_failed("f") == 1

    run(main())
