"""A host's heartbeat: one statement for every attempt it runs, and a cancel flag for each
attempt it no longer owns or that is past its deadline; an attempt claimed ahead and not
started yet has its deadline counted from now instead."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg

import awa_fast
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.host.heartbeat import HELD_BACK
from awa_fast.runtime.runner import Runner
from tests.factories import insert_job
from tests.helpers import await_until, run, run_until, sessions, settled


def _heartbeat_at(conn: psycopg.Connection[Any], job_id: int) -> Any:
    row = conn.execute(
        "SELECT heartbeat_at FROM awa_fast.jobs_hot WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return row[0]


def test_heartbeat_keeps_owned_attempts_and_flags_the_rest(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Among the attempts a host runs: one it owns is kept; of two attempts of one job (the
    first rescued, the job claimed again by this host while the first still ran), only the
    newer is kept; one cancelled meanwhile, and one past its deadline, are flagged."""
    owned = insert_job(conn, state="running", attempt=1, run_lease=1)
    reclaimed = insert_job(conn, state="running", attempt=2, run_lease=2)
    cancelled = insert_job(conn, state="running", attempt=1, run_lease=1)
    overdue = insert_job(conn, state="running", attempt=1, run_lease=1)
    conn.execute(
        "UPDATE awa_fast.jobs_hot SET heartbeat_at = now() - interval '1 minute',"
        " deadline_at = CASE WHEN id = %s THEN now() - interval '1 second'"
        " ELSE now() + interval '1 hour' END",
        (overdue,),
    )
    before = {j: _heartbeat_at(conn, j) for j in (owned, reclaimed, overdue)}
    attempts = [(owned, 1), (reclaimed, 1), (reclaimed, 2), (cancelled, 1), (overdue, 1)]
    with awa_fast.Client(dsn) as client:
        client.cancel(cancelled)
        runner = Runner(dsn, client.handlers, {"default": 8}, RunnerConfig())

    async def beat() -> dict[tuple[int, int], bool]:
        slots = {a: runner.inflight.acquire_slot(*a, 0, 0) for a in attempts}
        for slot in slots.values():
            runner.inflight.mark_started(slot)  # their handlers run
        try:
            await runner.heartbeat.beat_once()
        finally:
            await runner.host.forget()
        return {a: runner.inflight.is_cancelled(slot) for a, slot in slots.items()}

    flagged = run(beat())
    assert flagged == {
        (owned, 1): False,
        (reclaimed, 1): True,
        (reclaimed, 2): False,
        (cancelled, 1): True,
        (overdue, 1): True,
    }
    assert all(_heartbeat_at(conn, j) > before[j] for j in (owned, reclaimed, overdue))


@dataclass
class Look:
    n: int


def test_a_host_stamps_its_claims_and_leaves_no_row_behind(dsn: str) -> None:
    """A running host has a row in awa_fast.hosts; its claims carry that row's id (what
    the leader rescues a dead host's attempts by); a clean stop removes the row."""
    client = awa_fast.AsyncClient(dsn)
    seen: dict[str, Any] = {}

    @client.task(Look)
    async def look(job: awa_fast.Job[Look]) -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as c:
            cur = await c.execute(
                "SELECT j.host_id, h.id FROM awa_fast.jobs_hot j"
                " LEFT JOIN awa_fast.hosts h ON h.id = j.host_id WHERE j.id = %s",
                (job.id,),
            )
            seen["row"] = await cur.fetchone()

    async def main() -> None:
        async with client:
            await client.insert(Look(1))
            await run_until(client, {"default": 2}, lambda: settled(dsn))

    run(main())
    host_id, registered = seen["row"]
    assert host_id is not None and registered == host_id
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa_fast.hosts").fetchone() == (0,)


def test_a_host_records_how_it_serves_its_queues(dsn: str) -> None:
    """A running host's row carries each queue's concurrency, rate limit and prefetch per
    worker, for the dashboard."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Look, queue="q")(lambda job: None)
    rows: list[Any] = []

    def registered() -> bool:
        with psycopg.connect(dsn) as c:
            rows[:] = c.execute("SELECT queues FROM awa_fast.hosts").fetchall()
        return bool(rows)

    async def main() -> None:
        async with client:
            await run_until(
                client, {"q": 7}, registered, queue_rate_limits={"q": (5.0, 2)}, prefetch=3
            )

    run(main())
    assert rows == [({"q": {"concurrency": 7, "rate_limit": [5.0, 2], "prefetch": 3}},)]


def test_a_host_taken_for_dead_registers_again_and_restamps_its_attempts(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """The leader removed this host's row (its heartbeat was late) while an attempt still
    ran here: the next heartbeat registers a new row and moves the attempt to it, so the
    attempt is not an orphan that only the backstop would find."""
    job_id = insert_job(conn, state="running", attempt=1, run_lease=1)
    with awa_fast.Client(dsn) as client:
        runner = Runner(dsn, client.handlers, {"default": 8}, RunnerConfig())

    async def beat_twice() -> tuple[int | None, int | None]:
        runner.inflight.acquire_slot(job_id, 1, 0, 0)
        try:
            await runner.host.register()
            first = runner.host.id
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
                await other.execute("DELETE FROM awa_fast.hosts WHERE id = %s", (first,))
            await runner.heartbeat.beat_once()
            return first, runner.host.id
        finally:
            await runner.host.close()

    first, second = run(beat_twice())
    assert first is not None and second is not None and second != first
    again = conn.execute("SELECT queues -> 'default' ->> 'concurrency' FROM awa_fast.hosts")
    assert again.fetchall() == [("8",)]
    stamped = conn.execute(
        "SELECT host_id FROM awa_fast.jobs_hot WHERE id = %s", (job_id,)
    ).fetchone()
    assert stamped == (second,)
    assert conn.execute("SELECT id FROM awa_fast.hosts").fetchall() == [(second,)]


def test_a_job_waiting_in_its_worker_keeps_a_full_deadline_and_its_worker(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A prefetched job (claimed, its slot held, its handler not started) past the deadline
    its claim set: the heartbeat moves the deadline to a full one from now (the job's own
    deadline_seconds where it has one), flags nothing, and evicts no worker for it."""
    queue_default = insert_job(conn, state="running", attempt=1, run_lease=1)
    own = insert_job(conn, state="running", attempt=1, run_lease=1)
    conn.execute(
        "UPDATE awa_fast.jobs_hot SET deadline_at = now() - interval '1 minute',"
        " deadline_seconds = CASE WHEN id = %s THEN 30 END",
        (own,),
    )
    with awa_fast.Client(dsn) as client:
        config = RunnerConfig(deadline=600.0, deadline_grace=0.001)
        runner = Runner(dsn, client.handlers, {"default": 8}, config)
    evicted: list[tuple[int, int]] = []
    runner.workers.evict = lambda job_id, lease, *, reason: evicted.append((job_id, lease))  # type: ignore[method-assign]

    async def beat() -> list[bool]:
        slots = [runner.inflight.acquire_slot(j, 1, 0, 0) for j in (queue_default, own)]
        try:
            await runner.heartbeat.beat_once()
            await runner.heartbeat.beat_once()  # past the grace: nothing to evict
        finally:
            await runner.host.forget()
        return [runner.inflight.is_cancelled(slot) for slot in slots]

    assert run(beat()) == [False, False]
    assert evicted == []
    left = dict(
        conn.execute(
            "SELECT id, extract(epoch FROM deadline_at - now()) FROM awa_fast.jobs_hot"
        ).fetchall()
    )
    assert 590 < left[queue_default] <= 600
    assert 20 < left[own] <= 30


def test_a_beat_marks_the_attempts_held_unstarted_and_unmarks_them_once_started(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """The mark a rescue of a gone host gives attempts back by: set for an attempt claimed
    ahead and waiting in its worker, cleared at the first beat after its handler starts."""
    waiting, started = (insert_job(conn, state="running", attempt=1, run_lease=1) for _ in "ab")
    with awa_fast.Client(dsn) as client:
        runner = Runner(dsn, client.handlers, {"default": 8}, RunnerConfig())

    def marks() -> dict[int, int | None]:
        rows = conn.execute("SELECT id, held_lease FROM awa_fast.jobs_hot").fetchall()
        return dict(rows)

    async def beat() -> list[dict[int, int | None]]:
        slots = {j: runner.inflight.acquire_slot(j, 1, 0, 0) for j in (waiting, started)}
        runner.inflight.mark_started(slots[started])
        try:
            await runner.heartbeat.beat_once()
            seen = [marks()]
            runner.inflight.mark_started(slots[waiting])
            await runner.heartbeat.beat_once()
            return [*seen, marks()]
        finally:
            await runner.host.forget()

    assert run(beat()) == [{waiting: 1, started: None}, {waiting: None, started: None}]


@dataclass
class Gate:
    n: int


def test_a_host_whose_connection_closes_gives_back_what_it_holds_unstarted(dsn: str) -> None:
    """One job runs, a second waits claimed behind it (prefetched), and the heartbeat's
    session is terminated: the held job is not started at its turn but given back, its
    attempt uncounted, then claimed again and run once. (The server may be gone for good,
    and its successor may lack the claim: docs/high-availability.md.)"""
    client = awa_fast.AsyncClient(dsn)
    ran: list[tuple[int, int]] = []
    release = asyncio.Event()

    @client.task(Gate)
    async def gate(job: awa_fast.Job[Gate]) -> None:
        ran.append((job.args.n, job.run_lease))
        if job.args.n == 1:
            await release.wait()

    def state(job_id: int) -> str:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT state::text FROM awa_fast.jobs WHERE id = %s", (job_id,)
            ).fetchone()
        return row[0] if row else ""

    async def main() -> int:
        runner = await client.start({"default": 1}, prefetch=1, standby=False)
        try:
            first = (await client.insert(Gate(1))).id
            await await_until(lambda: ran == [(1, 1)], what="the first job to start")
            held = (await client.insert(Gate(2))).id
            await await_until(lambda: state(held) == "running", what="the second held")
            closed = sessions(dsn, "application_name = 'awa-fast heartbeat'")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database()"
                    " AND application_name = 'awa-fast heartbeat'"
                )
            await await_until(
                lambda: HELD_BACK in runner.flags.reasons().values(), what="the hold-back"
            )
            release.set()  # the held job's turn
            await await_until(lambda: state(held) == "completed", what="the second to run")
            assert closed == 1 and state(first) == "completed"
            return held
        finally:
            await client.shutdown()
            await client.close()

    held = run(main())
    assert ran == [(1, 1), (2, 2)]  # the held claim (lease 1) never ran; the next one did
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT attempt, run_lease, errors FROM awa_fast.jobs WHERE id = %s", (held,)
        ).fetchone()
    assert row == (1, 2, [])
