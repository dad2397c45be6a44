"""A host's heartbeat: one statement for every attempt it runs, and a cancel flag for each
attempt it no longer owns or that is past its deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa_fast
from awa_fast.db.connections import connect_hot_async
from awa_fast.runtime.runner import Runner, RunnerConfig
from tests.factories import insert_job
from tests.helpers import run


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
        runner._loop = asyncio.get_running_loop()
        slots = {a: runner.inflight.acquire_slot(*a, 0, 0) for a in attempts}
        async with await connect_hot_async(dsn) as hot:
            await runner._heartbeat_once(hot)
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
