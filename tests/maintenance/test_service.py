"""Maintenance steps against a real database: each `*_once` call observed in the tables."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.connections import IdMap
from awa_fast.db.queries import Q
from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.service import MIN_PROMOTE_PAUSE, Maintenance
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.hooks import HookDispatcher
from tests.factories import (
    TABLE_OF_STATE,
    finish_jobs,
    insert_job,
    insert_running,
    record_emptied_statistics,
)
from tests.helpers import job, leading, run, wait_until


def _maintenance(dsn: str, **config: Any) -> Maintenance:
    client = awa_fast.Client(dsn)
    return Maintenance(
        dsn, RunnerConfig(**config), client.handlers, HookDispatcher(client.handlers.hooks)
    )


def _set(conn: psycopg.Connection[Any], job_id: int, assignments: str) -> None:
    """Set columns of a job in jobs_hot or jobs_done, wherever it is."""
    updated = sum(
        conn.execute(f"UPDATE awa_fast.{table} SET {assignments} WHERE id = %s", (job_id,)).rowcount
        for table in ("jobs_hot", "jobs_done")
    )
    assert updated == 1


async def _once(dsn: str, step: str, **config: Any) -> Any:
    async with (
        leading(_maintenance(dsn, **config)) as maintenance,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
    ):
        return await getattr(maintenance, step)(conn)


def test_the_leader_wakes_when_the_next_deferred_job_falls_due(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    assert run(_once(dsn, "promote_pause", promote_interval=10.0)) == 10.0  # nothing waits
    later = insert_job(conn, state="scheduled")
    conn.execute(
        "UPDATE awa_fast.jobs_deferred SET run_at = now() + interval '1 hour' WHERE id = %s",
        (later,),
    )
    assert run(_once(dsn, "promote_pause", promote_interval=10.0)) == 10.0  # not before
    soon = insert_job(conn, state="scheduled")
    conn.execute(
        "UPDATE awa_fast.jobs_deferred SET run_at = clock_timestamp() + interval '3 seconds'"
        " WHERE id = %s",
        (soon,),
    )
    assert 0 < run(_once(dsn, "promote_pause", promote_interval=10.0)) <= 3.0
    conn.execute("UPDATE awa_fast.jobs_deferred SET run_at = now() - interval '1 second'")
    assert run(_once(dsn, "promote_pause", promote_interval=10.0)) == MIN_PROMOTE_PAUSE


def test_stale_heartbeat_is_rescued_and_the_last_attempt_fails(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    retried = insert_job(conn, state="running", attempt=1, max_attempts=3, run_lease=1)
    last = insert_job(conn, state="running", attempt=3, max_attempts=3, run_lease=3)
    alive = insert_job(conn, state="running", attempt=1, run_lease=1)
    for job_id in (retried, last):
        _set(conn, job_id, "heartbeat_at = now() - interval '1 hour'")
    counts = run(_once(dsn, "rescue_once", heartbeat_staleness=30.0))
    assert counts == {"job_select_stale": 2}
    again = job(dsn, retried)
    assert (again["state"], again["attempt"]) == ("retryable", 1)
    assert again["errors"][-1]["error"].startswith("heartbeat stale")
    assert again["errors"][-1]["attempt"] == 1
    assert job(dsn, last)["state"] == "failed"  # no extra run past max_attempts
    assert job(dsn, alive)["state"] == "running"


def test_overdue_and_callback_timeouts_are_rescued(dsn: str, conn: psycopg.Connection[Any]) -> None:
    overdue = insert_job(conn, state="running", attempt=1, run_lease=1)
    _set(conn, overdue, "deadline_at = now() - interval '1 minute'")
    waiting = insert_job(conn, state="waiting_external", attempt=1, run_lease=1)
    _set(conn, waiting, "callback_timeout_at = now() - interval '1 second'")
    counts = run(_once(dsn, "rescue_once", deadline_grace=5.0))
    assert counts == {"job_select_overdue": 1, "job_select_callback_expired": 1}
    assert job(dsn, overdue)["errors"][-1]["error"] == "deadline exceeded"
    assert job(dsn, waiting)["state"] == "retryable"
    assert job(dsn, waiting)["errors"][-1]["error"] == "callback timed out"


@pytest.mark.parametrize("statistics", ["all running", "emptied"])
def test_rescue_between_backstops_never_scans_the_whole_table(
    dsn: str, conn: psycopg.Connection[Any], statistics: str
) -> None:
    """Statistics taken while every row ran make the planner reckon the table all running;
    once those rows have finished, the callback sweep must still reach the few parked rows
    through its index, not read every finished row each rescue interval. Taken while the
    table was empty (the leader's VACUUM between bursts), they make a table of thousands
    of running rows look empty: the rescue must still reach its rows by key. Stale and
    overdue rows wait for the backstop, which reads the whole table, and rescues them."""
    if statistics == "all running":
        insert_running(conn, 5000)
        conn.execute("ANALYZE awa_fast.jobs_hot")
        finish_jobs(conn, "completed")
    else:
        record_emptied_statistics(conn, running=5000)
    overdue = insert_job(conn, state="running", attempt=1, run_lease=1)
    _set(conn, overdue, "deadline_at = now() - interval '1 minute'")
    stale = insert_job(conn, state="running", attempt=1, run_lease=1)
    _set(conn, stale, "heartbeat_at = now() - interval '1 hour'")
    waiting = insert_job(conn, state="waiting_external", attempt=1, run_lease=1)
    _set(conn, waiting, "callback_timeout_at = now() - interval '1 second'")
    maintenance = _maintenance(dsn, deadline_grace=5.0, heartbeat_staleness=30.0)

    async def rescue_in_one_transaction(*, backstop: bool) -> tuple[dict[str, int], int]:
        async with leading(maintenance), await psycopg.AsyncConnection.connect(dsn) as c:
            await c.execute("SELECT 1")  # begins the transaction whose scans are counted
            counts = await maintenance.rescue_once(c, backstop=backstop)
            cur = await c.execute(
                "SELECT seq_scan FROM pg_stat_xact_user_tables"
                " WHERE relid = 'awa_fast.jobs_hot'::regclass"
            )
            row = await cur.fetchone()
            await c.commit()
        assert row is not None
        return counts, row[0]

    assert run(rescue_in_one_transaction(backstop=False)) == (
        {"job_select_callback_expired": 1},
        0,
    )
    assert [job(dsn, j)["state"] for j in (overdue, stale)] == ["running"] * 2
    counts, _ = run(rescue_in_one_transaction(backstop=True))
    assert counts == {"job_select_stale": 1, "job_select_overdue": 1}
    assert [job(dsn, j)["state"] for j in (overdue, stale, waiting)] == ["retryable"] * 3


def test_a_dead_hosts_attempts_are_rescued_at_once(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A host whose row stopped heartbeating is removed and its running attempts rescued
    at the next rescue interval, though each attempt's own heartbeat is fresh; a live
    host's attempts stay. The row goes in the rescue's transaction."""
    dead_host, live_host = (
        conn.execute(
            "INSERT INTO awa_fast.hosts (name, heartbeat_at) VALUES (%s, now() - %s::interval)"
            " RETURNING id",
            (name, age),
        ).fetchone()[0]  # type: ignore[index]
        for name, age in (("dead", "1 hour"), ("live", "0 seconds"))
    )
    lost = insert_job(conn, state="running", attempt=1, run_lease=1)
    _set(conn, lost, f"host_id = {dead_host}")
    kept = insert_job(conn, state="running", attempt=1, run_lease=1)
    _set(conn, kept, f"host_id = {live_host}")
    for host_id in (dead_host, live_host):
        conn.execute(Q.standby_offer, {"host_id": host_id, "queues": ["idle"], "deadlines": [60.0]})

    counts = run(_once(dsn, "rescue_once", heartbeat_staleness=30.0))
    assert counts == {"host_take_dead": 1}
    standby = conn.execute("SELECT host_id FROM awa_fast.standby_claims").fetchall()
    assert standby == [(live_host,)]  # the dead host's claim went with it
    assert job(dsn, lost)["state"] == "retryable"
    assert job(dsn, lost)["errors"][-1]["error"].startswith("heartbeat stale")
    assert job(dsn, kept)["state"] == "running"
    hosts = conn.execute("SELECT id FROM awa_fast.hosts").fetchall()
    assert hosts == [(live_host,)]


def test_rescue_is_guarded_by_run_lease(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A stale row re-claimed between the scan and the rescue must not be rescued."""
    stale = insert_job(conn, state="running", attempt=1, run_lease=1)
    _set(conn, stale, "heartbeat_at = now() - interval '1 hour'")
    maintenance = _maintenance(dsn)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            cur = await c.execute(
                awa_fast.db.queries.Q.job_rescue_many,
                {
                    "ids": [stale],
                    "leases": IdMap({stale: 0}),
                    "messages": IdMap({stale: "x"}),
                    "base": 1.0,
                    "max": 1.0,
                    "jitter": 0.0,
                    "from_state": "running",
                    **RunnerConfig().dlq_params(),
                },
            )
            assert await cur.fetchall() == []
            await maintenance.leader.close()

    run(main())
    assert job(dsn, stale)["state"] == "running"


def test_promotion_moves_due_jobs_and_leaves_future_ones(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    due = [insert_job(conn, state="scheduled") for _ in range(5)]
    future = insert_job(conn, state="retryable")
    conn.execute(
        "UPDATE awa_fast.jobs_deferred SET run_at = now() + interval '1 hour' WHERE id = %s",
        (future,),
    )
    assert run(_once(dsn, "promote_once", promote_batch=2)) == 5
    assert {job(dsn, i)["state"] for i in due} == {"available"}
    assert job(dsn, future)["state"] == "retryable"


def test_retention_deletes_only_expired_finished_jobs(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    old_done = insert_job(conn, state="completed")
    new_done = insert_job(conn, state="completed")
    old_failed = insert_job(conn, state="failed")
    _set(conn, old_done, "finalized_at = now() - interval '2 days'")
    _set(conn, new_done, "finalized_at = now()")
    _set(conn, old_failed, "finalized_at = now() - interval '4 days'")
    assert run(_once(dsn, "clean_once", cleanup_batch=1)) == 2
    rows = conn.execute("SELECT id FROM awa_fast.jobs").fetchall()
    assert rows == [(new_done,)]


def test_one_leader_at_a_time_and_reelection(dsn: str) -> None:
    """A leader that stops cleanly releases its term: the next host's next election
    begins the next term, without waiting for the last to expire."""

    async def main() -> list[bool]:
        first, second = Leader(dsn, interval=3600.0), Leader(dsn, interval=3600.0)
        seen = [await first.check(), await second.check(), await first.check()]
        await first.close()
        seen.append(await second.check())
        await second.close()
        return seen

    assert run(main()) == [True, False, True, True]


def test_retention_is_configurable_per_queue(dsn: str, conn: psycopg.Connection[Any]) -> None:
    short = insert_job(conn, state="completed", queue="short")
    default = insert_job(conn, state="completed", queue="other")
    for job_id in (short, default):
        _set(conn, job_id, "finalized_at = now() - interval '2 hours'")
    deleted = run(_once(dsn, "clean_once", queue_retention={"short": (3600.0, 3600.0)}))
    assert deleted == 1
    assert conn.execute("SELECT id FROM awa_fast.jobs").fetchall() == [(default,)]


def test_rescue_on_the_last_attempt_dead_letters_in_dlq_queues(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    last = insert_job(conn, state="running", attempt=2, max_attempts=2, run_lease=2, queue="dl")
    _set(conn, last, "heartbeat_at = now() - interval '1 hour'")
    run(_once(dsn, "rescue_once", dlq_queues={"dl": True}))
    with awa_fast.Client(dsn) as client:
        [entry] = client.list_dlq()
    assert entry.job.id == last and entry.reason.startswith("heartbeat stale")


def test_rescued_event_and_followup_after_the_rescue(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    client = awa_fast.Client(dsn)
    events: list[awa_fast.Event] = []
    client.on_event("noop", events.append)
    client.on_rescued_enqueue(
        "noop",
        lambda args, row, ctx: awa_fast.InsertRequest(
            {"rescued": row.id, "why": ctx.reason}, kind="audit"
        ),
    )
    client.on_rescued_enqueue("broken", lambda args, row, ctx: 1 / 0)  # the rescue stands
    stale = insert_job(conn, state="running", attempt=1, run_lease=1)
    broken = insert_job(conn, kind="broken", state="running", attempt=1, run_lease=1)
    for job_id in (stale, broken):
        _set(conn, job_id, "heartbeat_at = now() - interval '1 hour'")
    hooks = HookDispatcher(client.handlers.hooks)
    hooks.start()
    maintenance = Maintenance(dsn, RunnerConfig(), client.handlers, hooks)

    async def main() -> None:
        async with (
            leading(maintenance),
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c,
        ):
            await maintenance.rescue_once(c)

    run(main())
    hooks.stop()
    client.close()
    assert job(dsn, stale)["state"] == job(dsn, broken)["state"] == "retryable"
    [(args,)] = conn.execute("SELECT args FROM awa_fast.jobs WHERE kind = 'audit'").fetchall()
    assert args == {
        "rescued": stale,
        "why": "heartbeat stale: the host running it stopped reporting",
    }
    [event] = events
    assert (event.type, event.job.id) == (awa_fast.EventType.RESCUED, stale)
    assert event.reason is not None and event.reason.startswith("heartbeat stale")


def test_vacuum_runs_once_dead_tuples_pass_the_threshold(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    assert run(_once(dsn, "vacuum_once", vacuum_dead_tuples=10)) == []
    ids = [insert_job(conn) for _ in range(30)]
    conn.execute("DELETE FROM awa_fast.jobs_hot WHERE id = ANY(%s)", (ids,))
    conn.execute("SELECT pg_stat_force_next_flush()")  # report at the end of this statement

    def dead_tuples() -> int:
        with psycopg.connect(dsn) as other:
            row = other.execute(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs_hot'"
            ).fetchone()
            return int(row[0]) if row else 0

    wait_until(lambda: dead_tuples() >= 30, what="the deletes to reach the statistics")
    assert run(_once(dsn, "vacuum_once", vacuum_dead_tuples=10)) == ["jobs_hot"]
    assert run(_once(dsn, "vacuum_once", vacuum_dead_tuples=10)) == []


@pytest.mark.parametrize("state", ["available", "scheduled", "completed"])
def test_vacuum_never_truncates_a_job_table(state: str, conn: psycopg.Connection[Any]) -> None:
    """Truncating a table's empty tail takes an ACCESS EXCLUSIVE lock that stops every
    claim, completion and insert of it; a queue refills the pages it empties, so a VACUUM
    (the leader's or autovacuum's) keeps them."""
    table = TABLE_OF_STATE[state]
    conn.execute(
        f"INSERT INTO awa_fast.{table} (kind, queue, state)"
        " SELECT 'k', 'q', %s FROM generate_series(1, 5000)",
        (state,),
    )

    def pages() -> int:
        row = conn.execute(f"SELECT pg_relation_size('awa_fast.{table}') / 8192").fetchone()
        assert row is not None
        return int(row[0])

    before = pages()
    conn.execute(f"DELETE FROM awa_fast.{table}")
    conn.execute(f"VACUUM awa_fast.{table}")
    assert before > 50
    assert pages() == before
