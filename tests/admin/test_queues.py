"""The Awa SDK's queue and job admin calls: drain_queue, pause_queue(paused_by), queue_stats'
totals, discard_failed, cancel_by_unique_key and dump_job, on both clients."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.queries import Q
from tests.factories import finish_jobs, insert_job
from tests.helpers import job, run


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


def test_queue_stats_reads_the_history_through_indexes(conn: psycopg.Connection[Any]) -> None:
    """With 100k finished jobs over a day (1 in 100 failed or cancelled), queue_stats reads
    jobs_done through its indexes only: the failed/cancelled index and the last hour of the
    finalized index, never the whole retention window."""
    conn.execute(
        "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at)"
        " SELECT 'k', 'q' || (i % 5),"
        "  (CASE i % 200 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled' ELSE 'completed' END)"
        "   ::awa_fast.job_state,"
        "  now() - (i % 86400) * interval '1 second'"
        " FROM generate_series(1, 100000) AS i"
    )
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue) SELECT 'k', 'q1' FROM generate_series(1, 500)"
    )
    conn.execute("VACUUM ANALYZE awa_fast.jobs_done, awa_fast.jobs_hot")
    row = conn.execute(f"EXPLAIN (FORMAT JSON) {Q.queue_stats}").fetchone()
    assert row is not None
    nodes = _nodes(row[0][0]["Plan"])
    indexes = {node.get("Index Name") for node in nodes}
    assert {"jobs_done_failed", "jobs_done_finalized"} <= indexes, nodes
    history = [node for node in nodes if node.get("Relation Name") == "jobs_done"]
    assert len(history) == 2 and all(n["Node Type"] != "Seq Scan" for n in history), nodes


def test_discard_failed_deletes_failed_jobs_of_a_kind(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    failed = [client.insert({"n": i}, kind="a").id for i in range(2)]
    other_kind = client.insert({}, kind="b").id
    completed = client.insert({}, kind="a").id
    finish_jobs(conn, "failed", [*failed, other_kind])
    finish_jobs(conn, "completed", [completed])
    assert client.discard_failed("a") == 2
    with pytest.raises(awa_fast.JobNotFound):
        client.get_job(failed[0])
    assert _state(conn, other_kind) == "failed" and _state(conn, completed) == "completed"
    assert client.discard_failed("a") == 0
    with pytest.raises(awa_fast.ValidationError, match="kind"):
        client.discard_failed("")


def test_cancel_by_unique_key_matches_the_components_the_insert_hashed(
    client: awa_fast.Client,
) -> None:
    by_args = client.insert(Note("hi"), unique_opts={"by_args": True})
    assert client.cancel_by_unique_key("note", args={"text": "other"}) is None
    assert client.cancel_by_unique_key("note", args=Note("hi"), queue="default") is None
    cancelled = client.cancel_by_unique_key("note", args=Note("hi"))
    assert cancelled is not None and (cancelled.id, cancelled.state) == (by_args.id, "cancelled")
    assert client.cancel_by_unique_key("note", args=Note("hi")) is None  # already finished

    by_queue = client.insert(Note("x"), queue="mail", unique={"by_args": False, "by_queue": True})
    assert client.cancel_by_unique_key("note") is None
    assert client.cancel_by_unique_key("note", queue="mail").id == by_queue.id  # type: ignore[union-attr]

    period = 3600
    by_period = client.insert(Note("p"), unique={"by_args": False, "by_period": period})
    bucket = int(time.time()) // period
    assert client.cancel_by_unique_key("note", period_bucket=bucket).id == by_period.id  # type: ignore[union-attr]
    with pytest.raises(awa_fast.ValidationError, match="period_bucket"):
        client.cancel_by_unique_key("note", period_bucket=-1)


def test_cancel_by_unique_key_takes_the_oldest_of_two_holders(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """A key enforced in `available` only lets a second job in once the first runs; the
    SDK cancels the oldest unfinished one, the running attempt, first."""
    first = client.insert(Note("k"), unique={"states": ["available"]})
    conn.execute(
        "UPDATE awa_fast.jobs_hot SET state = 'running', attempt = 1, run_lease = 1,"
        " heartbeat_at = now() WHERE id = %s",
        (first.id,),
    )
    second = client.insert(Note("k"), unique={"states": ["available"]})
    assert client.cancel_by_unique_key("note", args=Note("k")).id == first.id  # type: ignore[union-attr]
    assert client.cancel_by_unique_key("note", args=Note("k")).id == second.id  # type: ignore[union-attr]
    assert {job(dsn, first.id)["state"], job(dsn, second.id)["state"]} == {"cancelled"}


def test_dump_job_shows_the_job_and_its_lifecycle(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    row = client.insert(Note("dump"), tags=["t"], unique={"by_args": True})
    start = datetime.now(UTC)
    error = {"error": "boom", "attempt": 1, "at": (start + timedelta(seconds=1)).isoformat()}
    finish_jobs(
        conn,
        "failed",
        [row.id],
        attempt=1,
        attempted_at=start.isoformat(),
        finalized_at=(start + timedelta(seconds=2)).isoformat(),
        errors=[error],
    )
    dump = json.loads(client.dump_job(row.id))
    assert (dump["job"]["id"], dump["job"]["state"], dump["job"]["tags"]) == (
        row.id,
        "failed",
        ["t"],
    )
    assert dump["job"]["args"] == {"text": "dump"} and dump["job"]["created_at"].endswith("Z")
    assert isinstance(dump["job"]["unique_key"], str)
    assert dump["summary"] == {
        "original_priority": 2,
        "can_retry": True,
        "can_cancel": False,
        "error_count": 1,
        "latest_error": error,
    }
    assert [e["label"] for e in dump["timeline"]] == [
        "Created",
        "Attempt 1 started",
        "Attempt 1 failed",
        "Failed after 1 attempt",
    ]
    assert dump["timeline"][2] | {"timestamp": None} == {
        "timestamp": None,
        "label": "Attempt 1 failed",
        "state": "failed",
        "detail": "boom",
        "is_error": True,
    }
    assert "dlq" not in dump

    client.move_failed_to_dlq(row.id, "bad data")
    dead = json.loads(client.dump_job(row.id))
    assert dead["dlq"]["reason"] == "bad data" and dead["dlq"]["original_run_lease"] == 0
    assert dead["summary"]["can_retry"] is False and dead["job"]["id"] == row.id
    with pytest.raises(awa_fast.JobNotFound, match=r"^job not found: 999999$"):
        client.dump_job(999999)


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
