"""A maintenance-only host (awa_fast.runtime.maintenance_host): it elects, promotes and
rescues, read from the rows, and claims nothing, however long jobs wait beside it; a job
host beside it, kept out of elections, claims them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.cli import parser, serve_config
from awa_fast.errors import ConfigError
from awa_fast.runtime.maintenance_host import MaintenanceHost
from awa_fast.runtime.runner import Runner
from tests.factories import insert_job
from tests.helpers import await_until, free_port, job, run, scrape
from tests.maintenance.support import STALENESS, set_columns


@dataclass
class Work:
    n: int


def _dead_host_with_an_attempt(conn: psycopg.Connection[Any]) -> int:
    """A host whose heartbeat stopped an hour ago, holding one running attempt; the
    attempt's id."""
    row = conn.execute(
        "INSERT INTO awa_fast.hosts (name, heartbeat_at)"
        " VALUES ('dead', now() - '1 hour'::interval) RETURNING id"
    ).fetchone()
    assert row is not None
    lost = insert_job(conn, queue="work", state="running", attempt=1, run_lease=1)
    set_columns(conn, lost, f"host_id = {row[0]}")
    return lost


def _stamped_with(conn: psycopg.Connection[Any], host_id: int | None) -> int:
    """Jobs and standby claims that name ``host_id``: what a claim, or a start on a
    standby claim, would have stamped."""
    tables = ("jobs_hot", "jobs_deferred", "jobs_done", "standby_claims")
    return sum(
        conn.execute(  # type: ignore[index]
            f"SELECT count(*) FROM awa_fast.{table} WHERE host_id = %s", (host_id,)
        ).fetchone()[0]
        for table in tables
    )


def test_it_promotes_and_rescues_and_never_claims_while_a_job_host_beside_it_does(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    due = insert_job(conn, queue="work", state="scheduled", args={"n": 1})  # due at once
    waiting = insert_job(conn, queue="work", args={"n": 2})
    lost = _dead_host_with_an_attempt(conn)
    port = free_port()

    async def scenario() -> None:
        maintainer = awa_fast.AsyncClient(dsn)  # no handler registered
        host = await maintainer.start(
            maintenance_only=True,
            heartbeat_staleness=STALENESS,
            heartbeat_interval=STALENESS / 4,
            metrics_port=port,
        )
        assert isinstance(host, MaintenanceHost)
        try:
            await await_until(
                lambda: (
                    job(dsn, due)["state"] == "available" and job(dsn, lost)["state"] == "retryable"
                ),
                what="the due job promoted and the dead host's attempt rescued",
            )
            # Available jobs have waited through many poll intervals: none was claimed.
            assert [job(dsn, j)["run_lease"] for j in (due, waiting)] == [0, 0]
            assert _stamped_with(conn, host.host.id) == 0
            check = await maintainer.health_check()
            assert check.healthy and check.leader and check.queues == {}
            samples = await asyncio.to_thread(scrape, port)
            assert samples["awa_fast_leader"] == 1
            assert samples["awa_fast_worker_processes"] == 0
            assert samples['awa_fast_jobs_rescued_total{sweep="host_take_dead"}'] == 1
            assert samples["awa_fast_jobs_promoted_total"] >= 1
            await _a_job_host_beside_it_claims(dsn, conn, host, (due, waiting))
        finally:
            await maintainer.close()
        assert conn.execute("SELECT count(*) FROM awa_fast.hosts").fetchone() == (0,)

    run(scenario())


async def _a_job_host_beside_it_claims(
    dsn: str, conn: psycopg.Connection[Any], host: MaintenanceHost, jobs: tuple[int, ...]
) -> None:
    """A job host out of elections claims and completes ``jobs``; the maintenance-only
    host stays the leader and still has claimed none."""
    worker = awa_fast.AsyncClient(dsn)

    @worker.task(Work, kind="noop", queue="work")
    async def noop(job: awa_fast.Job[Work]) -> None:
        return None

    runner = await worker.start(
        {"work": 4}, run_maintenance=False, heartbeat_interval=STALENESS / 4
    )
    assert isinstance(runner, Runner)
    try:
        await await_until(
            lambda: all(job(dsn, j)["state"] == "completed" for j in jobs),
            what="the job host to complete the waiting jobs",
            explain=lambda: [(job(dsn, j)["state"], job(dsn, j)["errors"]) for j in jobs],
        )
        # One claim each, every one the job host's.
        assert [job(dsn, j)["run_lease"] for j in jobs] == [1] * len(jobs)
        assert runner.snapshot().claimed == {"work": len(jobs)}
        assert runner.snapshot().leader is False and host.snapshot().leader is True
        assert _stamped_with(conn, host.host.id) == 0
    finally:
        await worker.close()


def test_a_maintenance_only_host_refuses_queues_workers_and_a_role_that_runs_nothing(
    dsn: str,
) -> None:
    async def refused() -> list[str]:
        client = awa_fast.AsyncClient(dsn)
        errors = []
        for queues, options in (
            ({"work": 2}, {}),
            (None, {"processes": 2}),
            (None, {"run_maintenance": False}),
        ):
            with pytest.raises(ConfigError) as caught:
                await client.start(queues, maintenance_only=True, **options)
            errors.append(str(caught.value))
        await client.close()
        return errors

    queues, processes, nothing = run(refused())
    assert "give it no queues" in queues
    assert "no worker processes" in processes
    assert "would run nothing" in nothing


def test_serve_options_set_the_roles_and_refuse_both_at_once(capsys: Any) -> None:
    only = serve_config(parser().parse_args(["serve", "app:client", "--maintenance-only"]))
    assert only["maintenance_only"] is True and "run_maintenance" not in only
    jobs = serve_config(parser().parse_args(["serve", "app:client", "--no-maintenance"]))
    assert jobs["run_maintenance"] is False and "maintenance_only" not in jobs
    with pytest.raises(SystemExit):
        parser().parse_args(["serve", "app:client", "--maintenance-only", "--no-maintenance"])
    assert "not allowed with argument" in capsys.readouterr().err
