"""The rescuer's pass against a real database: the attempts of dead hosts, stale and
overdue attempts and timed-out callbacks are retried or failed, each guarded by its
run_lease, with events and follow-ups after the rescue."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.connections import IdMap
from awa_fast.db.queries import Q
from awa_fast.lifecycle.hooks import HookDispatcher
from awa_fast.maintenance.leader import Leader
from awa_fast.runtime.config import RunnerConfig
from tests.factories import finish_jobs, insert_job, insert_running, record_emptied_statistics
from tests.helpers import job, run
from tests.maintenance.support import make_rescuer, one_pass, rescue_once, set_columns


def test_stale_heartbeat_is_rescued_and_the_last_attempt_fails(
    dsn: str, conn: psycopg.Connection[Any], up_leader: Leader
) -> None:
    retried = insert_job(conn, state="running", attempt=1, max_attempts=3, run_lease=1)
    last = insert_job(conn, state="running", attempt=3, max_attempts=3, run_lease=3)
    alive = insert_job(conn, state="running", attempt=1, run_lease=1)
    for job_id in (retried, last):
        set_columns(conn, job_id, "heartbeat_at = now() - interval '1 hour'")
    counts = rescue_once(dsn, up_leader)
    assert counts == {"job_select_stale": 2}
    again = job(dsn, retried)
    assert (again["state"], again["attempt"]) == ("retryable", 1)
    assert again["errors"][-1]["error"].startswith("heartbeat stale")
    assert again["errors"][-1]["attempt"] == 1
    assert job(dsn, last)["state"] == "failed"  # no extra run past max_attempts
    assert job(dsn, alive)["state"] == "running"


def test_overdue_and_callback_timeouts_are_rescued(
    dsn: str, conn: psycopg.Connection[Any], up_leader: Leader
) -> None:
    overdue = insert_job(conn, state="running", attempt=1, run_lease=1)
    set_columns(conn, overdue, "deadline_at = now() - interval '1 minute'")
    waiting = insert_job(conn, state="waiting_external", attempt=1, run_lease=1)
    set_columns(conn, waiting, "callback_timeout_at = now() - interval '1 second'")
    counts = rescue_once(dsn, up_leader, deadline_grace=5.0)
    assert counts == {"job_select_overdue": 1, "job_select_callback_expired": 1}
    assert job(dsn, overdue)["errors"][-1]["error"] == "deadline exceeded"
    assert job(dsn, waiting)["state"] == "retryable"
    assert job(dsn, waiting)["errors"][-1]["error"] == "callback timed out"


@pytest.mark.parametrize("statistics", ["all running", "emptied"])
def test_rescue_between_backstops_never_scans_the_whole_table(
    dsn: str, conn: psycopg.Connection[Any], statistics: str, up_leader: Leader
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
    set_columns(conn, overdue, "deadline_at = now() - interval '1 minute'")
    stale = insert_job(conn, state="running", attempt=1, run_lease=1)
    set_columns(conn, stale, "heartbeat_at = now() - interval '1 hour'")
    waiting = insert_job(conn, state="waiting_external", attempt=1, run_lease=1)
    set_columns(conn, waiting, "callback_timeout_at = now() - interval '1 second'")
    rescuer = make_rescuer(dsn, up_leader, deadline_grace=5.0)

    async def rescue_in_one_transaction(*, backstop: bool) -> tuple[dict[str, int], int]:
        async def counted(c: psycopg.AsyncConnection[Any]) -> tuple[dict[str, int], int]:
            await c.execute("SELECT 1")  # begins the transaction whose scans are counted
            counts = await rescuer.run_once(c, backstop=backstop)
            cur = await c.execute(
                "SELECT seq_scan FROM pg_stat_xact_user_tables"
                " WHERE relid = 'awa_fast.jobs_hot'::regclass"
            )
            row = await cur.fetchone()
            await c.commit()
            assert row is not None
            return counts, row[0]

        return await one_pass(rescuer.leader, counted, autocommit=False)

    assert run(rescue_in_one_transaction(backstop=False)) == (
        {"job_select_callback_expired": 1},
        0,
    )
    assert [job(dsn, j)["state"] for j in (overdue, stale)] == ["running"] * 2
    counts, _ = run(rescue_in_one_transaction(backstop=True))
    assert counts == {"job_select_stale": 1, "job_select_overdue": 1}
    assert [job(dsn, j)["state"] for j in (overdue, stale, waiting)] == ["retryable"] * 3


def test_a_dead_hosts_attempts_are_rescued_at_once(
    dsn: str, conn: psycopg.Connection[Any], up_leader: Leader
) -> None:
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
    set_columns(conn, lost, f"host_id = {dead_host}")
    kept = insert_job(conn, state="running", attempt=1, run_lease=1)
    set_columns(conn, kept, f"host_id = {live_host}")
    for host_id in (dead_host, live_host):
        conn.execute(Q.standby_offer, {"host_id": host_id, "queues": ["idle"], "deadlines": [60.0]})

    counts = rescue_once(dsn, up_leader)
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
    set_columns(conn, stale, "heartbeat_at = now() - interval '1 hour'")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            cur = await c.execute(
                Q.job_rescue_many,
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

    run(main())
    assert job(dsn, stale)["state"] == "running"


def test_rescue_on_the_last_attempt_dead_letters_in_dlq_queues(
    dsn: str, conn: psycopg.Connection[Any], up_leader: Leader
) -> None:
    last = insert_job(conn, state="running", attempt=2, max_attempts=2, run_lease=2, queue="dl")
    set_columns(conn, last, "heartbeat_at = now() - interval '1 hour'")
    rescue_once(dsn, up_leader, dlq=RunnerConfig(dlq_queues={"dl": True}).dlq_params())
    with awa_fast.Client(dsn) as client:
        [entry] = client.list_dlq()
    assert entry.job.id == last and entry.reason.startswith("heartbeat stale")


def test_rescued_event_and_followup_after_therescue_once(
    dsn: str, conn: psycopg.Connection[Any], up_leader: Leader
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
        set_columns(conn, job_id, "heartbeat_at = now() - interval '1 hour'")
    hooks = HookDispatcher(client.handlers.hooks)
    hooks.start()
    rescuer = make_rescuer(dsn, up_leader, followups=client.handlers.followups, hooks=hooks)
    run(one_pass(rescuer.leader, rescuer.run_once))
    hooks.stop()
    client.close()
    assert job(dsn, stale)["state"] == job(dsn, broken)["state"] == "retryable"
    [(args, parent)] = conn.execute(
        "SELECT args, parent_id FROM awa_fast.jobs WHERE kind = 'audit'"
    ).fetchall()
    assert parent == stale  # a rescue's follow-up names the rescued job as the committer's do
    assert args == {
        "rescued": stale,
        "why": "heartbeat stale: the host running it stopped reporting",
    }
    [event] = events
    assert (event.type, event.job.id) == (awa_fast.EventType.RESCUED, stale)
    assert event.reason is not None and event.reason.startswith("heartbeat stale")
