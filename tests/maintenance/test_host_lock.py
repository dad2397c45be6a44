"""A host's session lock (migration 0026): taken with its row, taken again when its
connection comes back, and the leader's way to see at once that a host is gone. A gone
host's attempts that it held unstarted are given back uncharged, once per attempt; its
others are rescued. Neither way to find a dead host counts time its leader was not up."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from awa_fast.db.connections import Database
from awa_fast.db.queries import Q
from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.rescuer import GIVEN_BACK, GONE, STALE
from awa_fast.runtime.host.row import Host
from tests.factories import insert_job
from tests.helpers import job, run
from tests.maintenance.support import (
    STALENESS,
    leader,
    make_rescuer,
    one_pass,
    set_columns,
    until_up,
)

NAMESPACE = 1635213670  # the classid of every host's lock


def _lock_holder(conn: psycopg.Connection[Any], host_id: int | None) -> int | None:
    """The backend holding host ``host_id``'s lock, if any."""
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = %s AND objid = %s AND objsubid = 2",
        (NAMESPACE, host_id),
    ).fetchone()
    return None if row is None else int(row[0])


def _holds_lock(conn: psycopg.Connection[Any], host_id: int | None) -> bool:
    row = conn.execute("SELECT holds_lock FROM awa_fast.hosts WHERE id = %s", (host_id,))
    return bool(row.fetchone() == (True,))


def _host(dsn: str) -> Host:
    return Host(Database(dsn), session=Database(dsn))


def _running_on(conn: psycopg.Connection[Any], host: Host, *, held: bool = False) -> int:
    """An attempt running on ``host``; ``held``: held unstarted at its last heartbeat."""
    job_id = insert_job(conn, state="running", attempt=1, run_lease=1)
    set_columns(conn, job_id, f"host_id = {host.id}")
    if held:
        set_columns(conn, job_id, "held_lease = run_lease")
    return job_id


def test_a_host_holds_its_lock_from_the_statement_that_registers_it(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """With a session, the row and the lock (on the host's own connection); without one
    (behind a pooler, no direct URL), a row that says it holds none."""
    locking, pooled = _host(dsn), Host(Database(dsn))

    async def register() -> tuple[int | None, int | None]:
        await locking.register()
        await pooled.register()
        mine = (await locking.connection()).info.backend_pid
        try:
            return mine, _lock_holder(conn, locking.id)
        finally:
            await locking.forget()
            await pooled.forget()

    mine, holder = run(register())
    assert holder == mine
    assert not _holds_lock(conn, pooled.id) and _lock_holder(conn, pooled.id) is None
    assert conn.execute("SELECT count(*) FROM awa_fast.hosts").fetchone() == (0,)


def test_a_host_whose_connection_was_cut_takes_its_lock_again_as_it_beats(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    host = _host(dsn)

    async def cut_then_beat() -> tuple[int | None, int, bool]:
        await host.register()
        first = host.id
        old = (await host.connection()).info.backend_pid
        conn.execute("SELECT pg_terminate_backend(%s)", (old,))
        with pytest.raises(psycopg.OperationalError):
            await host.wait(60)  # the end of the session ends the wait at once
        beat = await host.beat(await host.connection())
        assert (beat, host.id) == (True, first)
        new = (await host.connection()).info.backend_pid
        try:
            return _lock_holder(conn, first), new, host.holds_lock
        finally:
            await host.forget()

    holder, new, holds = run(cut_then_beat())
    assert holder == new and holds


def test_a_lock_an_old_session_still_holds_is_taken_once_it_ends(
    dsn: str, conn: psycopg.Connection[Any], up_leader: Leader
) -> None:
    """The host's connection was cut and its old session still holds the lock (a cut the
    server has not noticed yet): the host beats without it, its row saying so, and the
    leader does not take it for gone when that session ends. Its next beat takes it."""
    host = _host(dsn)
    rescuer = make_rescuer(dsn, up_leader, settle=STALENESS)

    async def main() -> tuple[bool, dict[str, int], bool]:
        await host.register()
        cut = (await host.connection()).info.backend_pid
        conn.execute("SELECT pg_terminate_backend(%s)", (cut,))
        with pytest.raises(psycopg.OperationalError):
            await host.wait(60)
        with psycopg.connect(dsn, autocommit=True) as old_session:
            old_session.execute("SELECT pg_advisory_lock(%s, %s)", (NAMESPACE, host.id))
            await host.beat(await host.connection())
            without = _holds_lock(conn, host.id)
        rescued = await one_pass(up_leader, rescuer.run_once)  # the lock is free now
        await host.beat(await host.connection())
        try:
            return without, rescued, _holds_lock(conn, host.id)
        finally:
            await host.forget()

    assert run(main()) == (False, {}, True)


def test_a_gone_hosts_held_attempts_are_given_back_and_the_rest_rescued(
    dsn: str, conn: psycopg.Connection[Any], up_leader: Leader
) -> None:
    """A host whose session ended: its row goes, with its standby claim; an attempt it
    held unstarted is available again, its attempt given back, and one given back so at
    this attempt already is charged this time; its running attempt is rescued. A live
    host's attempt stays, and so does one of a host of an earlier version, which holds
    no lock: only its heartbeat can say it is dead."""
    gone, live = _host(dsn), _host(dsn)
    earlier = conn.execute(
        "INSERT INTO awa_fast.hosts (name) VALUES ('an earlier version') RETURNING id"
    ).fetchone()
    assert earlier is not None

    async def main() -> tuple[dict[str, int], dict[str, int]]:
        await gone.register()
        await live.register()
        ids = {
            "running": _running_on(conn, gone),
            "held": _running_on(conn, gone, held=True),
            "held again": _running_on(conn, gone, held=True),
            "live": _running_on(conn, live),
        }
        ids["earlier"] = insert_job(conn, state="running", attempt=1, run_lease=1)
        set_columns(conn, ids["earlier"], f"host_id = {earlier[0]}")
        set_columns(
            conn,
            ids["held again"],
            """errors = '[{"error": "given back", "attempt": 1, "given_back": true}]'""",
        )
        conn.execute(Q.standby_offer, {"host_id": gone.id, "queues": ["q"], "deadlines": [60.0]})
        await gone.close()  # as a killed host's session ends
        rescuer = make_rescuer(dsn, up_leader, settle=STALENESS)
        try:
            return await one_pass(up_leader, rescuer.run_once), ids
        finally:
            await live.forget()

    counts, ids = run(main())
    assert counts == {"host_gone": 2, "host_gone_unstarted": 1}
    held = job(dsn, ids["held"])
    assert (held["state"], held["attempt"]) == ("available", 0)
    assert held["errors"][-1]["error"] == GIVEN_BACK and held["errors"][-1]["given_back"]
    for charged in ("running", "held again"):
        rescued = job(dsn, ids[charged])
        assert (rescued["state"], rescued["attempt"]) == ("retryable", 1)
        assert rescued["errors"][-1]["error"] == GONE
    assert [job(dsn, ids[k])["state"] for k in ("live", "earlier")] == ["running"] * 2
    hosts = {row[0] for row in conn.execute("SELECT id FROM awa_fast.hosts")}
    assert hosts == {earlier[0]}  # live forgot its row as it stopped
    assert conn.execute("SELECT count(*) FROM awa_fast.standby_claims").fetchone() == (0,)


def test_a_gone_host_silent_for_long_has_every_attempt_charged(
    dsn: str, conn: psycopg.Connection[Any], up_leader: Leader
) -> None:
    """A host whose lock is free but whose heartbeat is older than the staleness (cut off
    long before its session ended) may have started anything it held at its last beat:
    nothing of it is given back uncharged."""
    host = _host(dsn)

    async def main() -> tuple[dict[str, int], int]:
        await host.register()
        held = _running_on(conn, host, held=True)
        conn.execute(
            "UPDATE awa_fast.hosts SET heartbeat_at = now() - interval '1 hour' WHERE id = %s",
            (host.id,),
        )
        await host.close()
        rescuer = make_rescuer(dsn, up_leader, settle=STALENESS)
        return await one_pass(up_leader, rescuer.run_once), held

    counts, held = run(main())
    assert counts == {"host_take_dead": 1}
    rescued = job(dsn, held)
    assert (rescued["state"], rescued["attempt"]) == ("retryable", 1)
    assert rescued["errors"][-1]["error"] == STALE


def test_no_host_is_taken_for_dead_before_its_leader_has_been_up_long_enough(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A leader that has only just reached the database (it is new, or the database was
    out of reach) takes no host for dead, however stale or gone: hosts that could not
    reach the database meanwhile had no chance to beat or take their lock again. Once
    up for a rule's window, it applies that rule: the lock's (short), then staleness."""
    fresh = leader(dsn)
    gone = _host(dsn)
    stale = conn.execute(
        "INSERT INTO awa_fast.hosts (name, heartbeat_at) VALUES ('stale', now() - interval"
        " '1 hour') RETURNING id"
    ).fetchone()
    assert stale is not None
    settle = STALENESS / 4
    rescuer = make_rescuer(dsn, fresh, settle=settle)

    async def main() -> list[dict[str, int]]:
        await gone.register()
        lost = _running_on(conn, gone)
        stale_job = insert_job(conn, state="running", attempt=1, run_lease=1)
        set_columns(conn, stale_job, f"host_id = {stale[0]}")
        await gone.close()
        assert await fresh.check()
        try:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
                passes = [await rescuer.run_once(c)]
                await until_up(fresh, settle)
                passes.append(await rescuer.run_once(c))
                await until_up(fresh, STALENESS)
                passes.append(await rescuer.run_once(c))
        finally:
            await fresh.close()
        assert job(dsn, lost)["errors"][-1]["error"] == GONE
        assert job(dsn, stale_job)["errors"][-1]["error"] == STALE
        return passes

    assert run(main()) == [{}, {"host_gone": 1}, {"host_take_dead": 1}]
    assert conn.execute("SELECT count(*) FROM awa_fast.hosts").fetchone() == (0,)
