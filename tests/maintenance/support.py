"""What the tests of the maintenance services share: one pass driven as its leader would
drive it, the composition built from runner settings, and something due for every pass."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import psycopg

import awa_fast
from awa_fast.db.connections import Database
from awa_fast.db.queries import Q
from awa_fast.lifecycle.followups import FollowupRegistry
from awa_fast.lifecycle.hooks import HookDispatcher, HookRegistry
from awa_fast.lifecycle.schedules import periodic_job
from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.rescuer import Rescuer, RescuerConfig
from awa_fast.maintenance.service import Maintenance
from awa_fast.maintenance.stats import MaintenanceStats
from awa_fast.runtime.config import RunnerConfig
from tests.factories import insert_job
from tests.helpers import await_until, run
from tests.runtime.work.pool.app import Step

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]


def leader(dsn: str) -> Leader:
    """A leader with the runner's default election interval (nothing renews its term)."""
    return Leader(Database(dsn), interval=1.0)


# The heartbeat staleness of the tests that take hosts for dead: long past for the rows
# they make stale, not reached by the rows they keep fresh, and soon reached by a new
# leader's time up (a rule for dead hosts applies only once its leader has been up for
# the rule's window: awa_fast.maintenance.rescuer).
STALENESS = 2.0


async def until_up(leader: Leader, seconds: float = STALENESS) -> None:
    """Wait until ``leader``, checked once, has reached the database for ``seconds``."""
    await await_until(
        lambda: leader.up_for(time.monotonic()) >= seconds, what="the leader to be up long enough"
    )


def make_rescuer(
    dsn: str,
    up: Leader,
    *,
    followups: FollowupRegistry | None = None,
    hooks: HookDispatcher | None = None,
    **config: Any,
) -> Rescuer:
    """A rescuer under ``up`` (the up_leader fixture), its staleness the tests'."""
    config.setdefault("heartbeat_staleness", STALENESS)
    return Rescuer(
        dsn=dsn,
        leader=up,
        followups=FollowupRegistry() if followups is None else followups,
        hooks=HookDispatcher(HookRegistry()) if hooks is None else hooks,
        stats=MaintenanceStats(),
        config=RescuerConfig(**config),
    )


def rescue_once(dsn: str, up: Leader, **config: Any) -> dict[str, int]:
    """One pass of a rescuer under ``up``; what it counted."""
    rescuer = make_rescuer(dsn, up, **config)
    counts = run(one_pass(rescuer.leader, rescuer.run_once))
    assert rescuer.stats.rescued == counts
    return counts


async def one_pass(
    leader: Leader, run_once: Callable[[Conn], Awaitable[T]], *, autocommit: bool = True
) -> T:
    """``run_once`` on a connection of its own, under a term of ``leader``'s that is
    released after."""
    assert await leader.check(), "another leader's term lasts"
    try:
        async with await psycopg.AsyncConnection.connect(
            leader.database.dsn, autocommit=autocommit
        ) as c:
            return await run_once(c)
    finally:
        await leader.close()


def maintenance(dsn: str, **config: Any) -> Maintenance:
    """The composition a runner with settings ``config`` and no handlers builds."""
    client = awa_fast.Client(dsn)
    return Maintenance(
        Database(dsn),
        RunnerConfig(**config).maintenance(),
        followups=client.handlers.followups,
        hooks=HookDispatcher(client.handlers.hooks),
    )


def set_columns(conn: psycopg.Connection[Any], job_id: int, assignments: str) -> None:
    """Set columns of a job in jobs_hot or jobs_done, wherever it is."""
    updated = sum(
        conn.execute(f"UPDATE awa_fast.{table} SET {assignments} WHERE id = %s", (job_id,)).rowcount
        for table in ("jobs_hot", "jobs_done")
    )
    assert updated == 1


def work_for_every_pass(dsn: str, conn: psycopg.Connection[Any]) -> datetime:
    """Something due for each fenced pass: a scheduled job, a stale attempt and a dead
    host's, a finished job past retention, a schedule (due at the time returned) and a
    batch operation."""
    insert_job(conn, state="scheduled")
    stale = insert_job(conn, state="running", attempt=1, run_lease=1)
    lost = insert_job(conn, state="running", attempt=1, run_lease=1)
    old = insert_job(conn, state="completed")  # its partition sealed and past retention
    conn.execute(
        "WITH gone AS (INSERT INTO awa_fast.hosts (name, heartbeat_at)"
        " VALUES ('gone', now() - interval '1 hour') RETURNING id)"
        " UPDATE awa_fast.jobs_hot SET host_id = (SELECT id FROM gone) WHERE id = %s",
        (lost,),
    )
    set_columns(conn, stale, "heartbeat_at = now() - interval '1 hour'")
    sealed = "slot = mod(awa_fast.done_slot() + 1, 8)"
    set_columns(conn, old, f"finalized_at = now() - interval '30 days', {sealed}")
    conn.execute(Q.cron_register, periodic_job("minutely", "* * * * *", Step, Step("x")).params())
    with awa_fast.Client(dsn) as client:
        client.move_queue("elsewhere", filter={"queue": "default"})
    row = conn.execute("SELECT created_at + interval '3 minutes' FROM awa_fast.cron_jobs")
    [(due,)] = row.fetchall()
    return due  # type: ignore[no-any-return]
