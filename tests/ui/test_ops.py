"""The dashboard's own Ops (ui/ops.py): keyset pages that see every job once and read a
bounded window however large the tables, throughput buckets, hosts and the leader, and
the preview counts."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import awa_fast
from awa_fast.db.queries import Q
from awa_fast.ui import ops
from tests.factories import finish_jobs, insert_job
from tests.helpers import plan_name


def _every_id(conn: psycopg.Connection[Any]) -> list[int]:
    return [row[0] for row in conn.execute("SELECT id FROM awa_fast.jobs ORDER BY id DESC")]


def _walk(client: awa_fast.Client, where: ops.JobFilter, *, limit: int, scan: int) -> list[int]:
    """Every page from the newest on, following each page's cursor; the ids seen."""
    seen: list[int] = []
    before = None
    while True:
        page = client.run_op(ops.job_page(where, before=before, limit=limit, scan=scan))
        seen += [job.id for job in page.jobs]
        if page.next_before is None:
            return seen
        assert before is None or page.next_before < before, "a page must move on"
        before = page.next_before


def _overlapping_packs(conn: psycopg.Connection[Any]) -> None:
    """Two packs whose ids interleave, as producers inserting at once leave them."""
    for ids in ([10_001, 10_003, 10_005, 10_007], [10_002, 10_004, 10_006, 10_008]):
        conn.execute(
            "INSERT INTO awa_fast.job_packs (kind, queue, priority, max_attempts, tags,"
            " metadata, ids, args, size, next_id)"
            " VALUES ('packed', 'bulk', 2, 25, '{}', '{}', %s, %s, %s, %s)",
            (ids, "\x1e".join(json.dumps({"n": i}) for i in ids), len(ids), ids[0]),
        )


def _jobs_everywhere(client: awa_fast.Client, conn: psycopg.Connection[Any]) -> None:
    """Rows in every table and state, packs (one partly claimed) between them."""
    for state in ("available", "running", "scheduled", "retryable", "failed", "completed"):
        insert_job(conn, state=state, kind=f"k_{state}", queue="rows")
    client.insert_many([{"n": i} for i in range(30)], kind="bulk_job", queue="bulk")
    for i in range(7):
        client.insert({"to": f"ADA{i}@example.com"}, kind="send_email", queue="email")
    client.insert_many([{"n": i} for i in range(20)], kind="bulk_job", queue="bulk")
    pack = conn.execute("SELECT min(id) FROM awa_fast.job_packs").fetchone()
    assert pack is not None
    conn.execute("SELECT awa_fast.start_packed(%s, 3, NULL, 60)", (pack[0],))
    _overlapping_packs(conn)


@pytest.mark.parametrize(("limit", "scan"), [(1, 1), (3, 2), (7, 5), (50, 4), (100, 5000)])
def test_pages_show_every_job_once_newest_first(
    client: awa_fast.Client, conn: psycopg.Connection[Any], limit: int, scan: int
) -> None:
    _jobs_everywhere(client, conn)
    assert _walk(client, ops.JobFilter(), limit=limit, scan=scan) == _every_id(conn)


@pytest.mark.parametrize(
    ("where", "sql"),
    [
        (ops.JobFilter(queue="bulk"), "queue = 'bulk'"),
        (ops.JobFilter(kind="send_email"), "kind = 'send_email'"),
        (ops.JobFilter(state="available"), "state = 'available'"),
        (ops.JobFilter(state="running"), "state = 'running'"),
        (ops.JobFilter(tag="vip"), "'vip' = ANY(tags)"),
        (ops.JobFilter(search="ada3@"), "args->>'to' = 'ADA3@example.com'"),
        (ops.JobFilter(search='"n": 10004'), "id = 10004"),
        (ops.JobFilter(queue="bulk", state="failed"), "false"),
    ],
)
def test_filters_find_what_they_name_in_rows_and_packs(
    client: awa_fast.Client, conn: psycopg.Connection[Any], where: ops.JobFilter, sql: str
) -> None:
    _jobs_everywhere(client, conn)
    client.insert({"to": "vip@example.com"}, kind="send_email", queue="email", tags=["vip"])
    expected = [
        row[0] for row in conn.execute(f"SELECT id FROM awa_fast.jobs WHERE {sql} ORDER BY id DESC")
    ]
    assert _walk(client, where, limit=4, scan=3) == expected


def test_a_state_outside_the_job_states_is_refused() -> None:
    with pytest.raises(awa_fast.ValidationError, match="state"):
        ops.JobFilter(state="exploded")


def _explain(conn: psycopg.Connection[Any], op: awa_fast.admin.Op[Any]) -> dict[str, Any]:
    row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {op.sql}", op.params).fetchone()
    assert row is not None
    return dict(row[0][0])


def _scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node] if "Relation Name" in node else []
    for child in node.get("Plans", []):
        found += _scans(child)
    return found


def test_a_page_reads_a_bounded_window_down_the_primary_keys_of_a_large_table(
    conn: psycopg.Connection[Any],
) -> None:
    """A filter no job matches is the worst case: the page still reads at most its window,
    down each table's primary key, with no sequential scan of a job table."""
    conn.execute(
        "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at)"
        " SELECT 'k' || (i % 50), 'q' || (i % 7), 'completed', now()"
        " FROM generate_series(1, 200000) i"
    )
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue) SELECT 'k', 'q' FROM generate_series(1, 20000)"
    )
    conn.execute("ANALYZE awa_fast.jobs_done")
    conn.execute("ANALYZE awa_fast.jobs_hot")
    where = ops.JobFilter(kind="never_inserted", queue="q3")
    plan = _explain(conn, ops.job_page(where, before=150_000, limit=50))
    jobs = [s for s in _scans(plan["Plan"]) if s["Relation Name"].startswith("jobs_")]
    assert {plan_name(s["Relation Name"]) for s in jobs} == {
        "jobs_hot",
        "jobs_deferred",
        "jobs_done",
    }
    assert {s["Node Type"] for s in jobs} == {"Index Scan"}, jobs
    assert {plan_name(s["Index Name"]) for s in jobs} == {
        "jobs_hot_pkey",
        "jobs_deferred_pkey",
        "jobs_done_pkey",
    }
    assert {s["Scan Direction"] for s in jobs} == {"Backward"}
    assert sum(s["Actual Rows"] * s["Actual Loops"] for s in jobs) <= ops.PAGE_SCAN + 3


def _finished(conn: psycopg.Connection[Any], queue: str, state: str, seconds_ago: int) -> float:
    """A job finished ``seconds_ago``; when, in seconds since the epoch."""
    job_id = insert_job(conn, queue=queue)
    finish_jobs(conn, state, [job_id])
    row = conn.execute(
        "UPDATE awa_fast.jobs_done SET finalized_at = now() - make_interval(secs => %s)"
        " WHERE id = %s RETURNING extract(epoch FROM finalized_at)::float8",
        (seconds_ago, job_id),
    ).fetchone()
    assert row is not None
    return float(row[0])


def test_finished_counts_jobs_by_queue_and_bucket(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    at = _finished(conn, "a", "completed", 300)
    _finished(conn, "a", "completed", 300)
    _finished(conn, "a", "failed", 300)
    _finished(conn, "b", "completed", 7200)  # before the window
    _finished(conn, "b", "cancelled", 60)  # neither completed nor failed
    dead = insert_job(conn, queue="c")
    finish_jobs(conn, "failed", [dead])
    client.move_failed_to_dlq(dead, "broken")
    found = client.run_op(ops.finished(since=None, window_s=3600, bucket_s=60))
    assert found.buckets[at // 60 * 60] == {"a": (2, 1)}
    assert sum(counts.get("c", (0, 0))[1] for counts in found.buckets.values()) == 1
    assert not any("b" in counts for counts in found.buckets.values())
    later = client.run_op(ops.finished(since=at + 1, window_s=3600, bucket_s=60))
    assert at // 60 * 60 not in later.buckets and abs(later.now - found.now) < 60


def test_hosts_show_their_running_attempts_and_which_one_leads(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    hosts = {}
    for name in ("web-1:100", "web-2:200"):
        row = conn.execute(Q.host_register, {"name": name, "queues": Jsonb({})}).fetchone()
        assert row is not None
        hosts[name] = row[0]
    for queue in ("email", "email", "bulk"):
        job_id = insert_job(conn, queue=queue, state="running")
        conn.execute(
            "UPDATE awa_fast.jobs_hot SET host_id = %s WHERE id = %s", (hosts["web-1:100"], job_id)
        )
    conn.execute(
        "UPDATE awa_fast.leader SET term = 3, holder = 'web-2 pid 200 abc',"
        " expires_at = now() + interval '1 minute'"
    )
    leader = client.run_op(ops.leader())
    assert (leader.term, leader.live) == (3, True)
    found = {host.name: host for host in client.run_op(ops.hosts(leader))}
    assert found["web-1:100"].running == {"email": 2, "bulk": 1}
    assert (found["web-1:100"].leader, found["web-2:200"].leader) == (False, True)
    assert found["web-2:200"].running == {}
    assert 0 <= found["web-2:200"].heartbeat_age < 60


def test_no_leader_before_the_first_term_or_after_one_ends(client: awa_fast.Client) -> None:
    first = client.run_op(ops.leader())
    assert (first.live, first.expires_at, first.holder) == (False, None, None)
    assert not ops.holds("web-2:200", None)
    assert not ops.holds("web-2:2000", "web-2 pid 200 abc")


def test_counts_preview_what_the_bulk_calls_take(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    for kind, queue in (("a", "q"), ("a", "r"), ("b", "q")):
        finish_jobs(conn, "failed", [insert_job(conn, kind=kind, queue=queue)])
    assert client.run_op(ops.count_failed(kind="a", queue=None)) == 2
    assert client.run_op(ops.count_failed(kind=None, queue="q")) == 2
    assert client.run_op(ops.count_failed(kind="a", queue="q")) == 1
    client.bulk_move_failed_to_dlq(queue="q", reason="x")
    assert client.run_op(ops.count_dlq(kind=None, queue=None, tag=None)) == 2
    assert client.run_op(ops.count_dlq(kind="b", queue="q", tag=None)) == 1
    assert client.run_op(ops.count_dlq(kind=None, queue=None, tag="t")) == 0
    assert client.purge_dlq(queue="q") == 2
