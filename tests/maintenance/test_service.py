"""The maintenance composition: each service's configuration from the runner's settings,
a leader's round running every service, and its connections closed however it stops."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from awa_fast.maintenance.batch_ops import BatchOpsConfig
from awa_fast.maintenance.cleaner import CleanerConfig
from awa_fast.maintenance.counts import CountsConfig
from awa_fast.maintenance.descriptor_cleaner import DescriptorCleanerConfig
from awa_fast.maintenance.periodic import PeriodicConfig
from awa_fast.maintenance.promoter import PromoterConfig
from awa_fast.maintenance.rescuer import RescuerConfig
from awa_fast.maintenance.rings import RingsConfig
from awa_fast.maintenance.service import MaintenanceConfig
from awa_fast.maintenance.vacuum import VacuumConfig
from awa_fast.runtime.config import RunnerConfig
from tests.helpers import await_until, cancel_while_connecting, lock_waiters, run, sessions
from tests.maintenance.support import STALENESS, maintenance, until_up, work_for_every_pass


def test_each_services_defaults_are_the_runners() -> None:
    """A service built alone behaves as a runner with default settings builds it."""
    assert RunnerConfig().maintenance() == MaintenanceConfig(
        election_interval=1.0,
        promoter=PromoterConfig(),
        rescuer=RescuerConfig(),
        cleaner=CleanerConfig(),
        descriptor_cleaner=DescriptorCleanerConfig(),
        vacuum=VacuumConfig(),
        rings=RingsConfig(),
        periodic=PeriodicConfig(),
        counts=CountsConfig(),
        batch_ops=BatchOpsConfig(),
    )


def test_each_runner_setting_reaches_its_service() -> None:
    configs = RunnerConfig(
        promote_interval=0.5,
        promote_batch=7,
        rescue_interval=2.0,
        backstop_interval=9.0,
        rescue_batch=11,
        heartbeat_staleness=13.0,
        deadline_grace=3.0,
        dlq_queues={"dl": True},
        cleanup_interval=17.0,
        cleanup_batch=19,
        completed_retention=23.0,
        failed_retention=29.0,
        queue_retention={"audit": (31.0, 37.0)},
        descriptor_retention=41.0,
        vacuum_interval=43.0,
        vacuum_dead_tuples=47,
        cron_interval=53.0,
        batch_interval=59.0,
        batch_chunk=61,
        count_interval=67.0,
        election_interval=71.0,
    ).maintenance()
    assert configs.election_interval == 71.0
    assert configs.promoter == PromoterConfig(interval=0.5, batch=7)
    assert configs.rescuer == RescuerConfig(
        interval=2.0,
        backstop_interval=9.0,
        batch=11,
        heartbeat_staleness=13.0,
        deadline_grace=3.0,
        dlq={"dlq_all": False, "no_dlq": [], "dlq": ["dl"]},
    )
    assert configs.cleaner == CleanerConfig(
        interval=17.0,
        batch=19,
        completed_retention=23.0,
        failed_retention=29.0,
        queue_retention={"audit": (31.0, 37.0)},
    )
    assert configs.descriptor_cleaner == DescriptorCleanerConfig(interval=17.0, retention=41.0)
    assert configs.vacuum == VacuumConfig(interval=43.0, dead_tuples=47)
    assert configs.periodic == PeriodicConfig(interval=53.0)
    assert configs.batch_ops == BatchOpsConfig(interval=59.0, chunk=61)
    assert configs.counts == CountsConfig(interval=67.0)


def test_a_leaders_round_runs_every_service(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """One round of ``run``: the host is elected and each service's pass acts; the term
    is released when the loop stops."""
    work_for_every_pass(dsn, conn)
    conn.execute("UPDATE awa_fast.cron_jobs SET created_at = created_at - interval '3 minutes'")
    leading = maintenance(dsn, heartbeat_staleness=STALENESS)
    rounds = iter([False])  # one round, then stop

    async def up_then_one_round() -> None:
        await leading.leader.check()
        await until_up(leading.leader)
        await leading.run(lambda: next(rounds, True))

    run(up_then_one_round())
    stats = leading.stats
    assert (stats.promoted, stats.deleted, stats.periodic) == (1, 1, 1)
    assert stats.rescued == {"host_take_dead": 1, "job_select_stale": 1}
    # the counts' pass sealed the deltas of the work above, for its next pass to fold
    assert conn.execute("SELECT awa_fast.count_slot()").fetchone() == (1,)
    [(state,)] = conn.execute("SELECT state FROM awa_fast.batch_operations").fetchall()
    assert state == "running"
    released = conn.execute("SELECT expires_at <= now() FROM awa_fast.leader").fetchall()
    assert released == [(True,)]


def test_a_stop_landing_while_the_loop_unwinds_still_closes_its_connections(dsn: str) -> None:
    """The loop may end on its own (its runner is stopping) just before the runner cancels
    it, so the cancel lands in its cleanup, while it waits for a renewal to end: the
    leader's connection and the pass's are closed all the same."""
    upkeep = maintenance(dsn, election_interval=0.05, promote_interval=0.05)
    ours = "application_name IN ('awa-fast leader', 'awa-fast maintenance')"
    stopping = False

    async def main() -> None:
        nonlocal stopping
        task = asyncio.create_task(upkeep.run(lambda: stopping))
        await await_until(lambda: sessions(dsn, f"{ours} AND state = 'idle'") == 2, what="a pass")
        async with await psycopg.AsyncConnection.connect(dsn) as holder:
            await holder.execute("SELECT FROM awa_fast.leader FOR UPDATE")  # renewals wait
            await await_until(
                lambda: lock_waiters(dsn, application_name="awa-fast leader") == 1,
                what="a renewal to wait",
            )
            [election] = [t for t in asyncio.all_tasks() if t.get_name() == "awa-fast election"]
            stopping = True
            while not election.cancelling():  # the loop has ended and stops its election
                await asyncio.sleep(0)
            assert not election.done()
            task.cancel()
            await holder.rollback()
        [outcome] = await asyncio.gather(task, return_exceptions=True)
        assert isinstance(outcome, asyncio.CancelledError)
        await await_until(lambda: sessions(dsn, ours) == 0, timeout=5, what="both closed")

    run(main())


def test_a_stop_landing_while_the_leader_connects_closes_that_connection(dsn: str) -> None:
    """A stop's cancel may land while the leader's connection is being opened, which
    psycopg would drop unclosed (its session open for as long as the cancelled task is
    kept): the open goes on, and closes the connection once it is made."""
    run(
        cancel_while_connecting(
            dsn, lambda url: maintenance(url).run(lambda: False), application_name="awa-fast leader"
        )
    )
