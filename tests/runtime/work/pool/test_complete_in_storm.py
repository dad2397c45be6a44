"""Workers SIGKILLed while their handlers complete jobs in their own transactions: each
completed job has exactly one effect row, and no effect row belongs to a job that is not
completed, whatever was killed when (a transaction cut short rolls back and its attempt
is retried; one that committed is never run again)."""

from __future__ import annotations

import os
import signal
from typing import Any

import psycopg
import pytest

import awa_fast
from tests.helpers import busy_worker, states, wait_until
from tests.runtime.work.pool.effects_app import Effect

JOBS = 4_000
KILLS = 10


def _query(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


def _effects(dsn: str) -> int:
    [(n,)] = _query(dsn, "SELECT count(*) FROM effects")
    return int(n)


def _after_effects(dsn: str, more: int) -> None:
    target = _effects(dsn) + more
    wait_until(lambda: _effects(dsn) >= target, timeout=60, what=f"{more} more effects")


@pytest.mark.slow
def test_killed_workers_leave_one_effect_per_completed_job(serve: Any, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE effects (job_id bigint, attempt int, pid int,"
            " at timestamptz DEFAULT clock_timestamp())"
        )
    with awa_fast.Client(dsn) as client:
        client.insert_many([Effect(i) for i in range(JOBS)])
    # A rolled-back completion leaves a silent attempt: rescued within seconds here.
    server = serve(
        "--processes", "2", "--queue", "default=32",
        "--set", "heartbeat_staleness=2", "--set", "rescue_interval=0.5",
        app="tests.runtime.work.pool.effects_app",
    )  # fmt: skip
    supervisor = server.proc.pid
    for _ in range(KILLS):
        _after_effects(dsn, 150)
        os.kill(busy_worker(dsn, supervisor, table="effects"), signal.SIGKILL)
    wait_until(
        lambda: states(dsn).get("completed", 0) == JOBS,
        timeout=180,
        what=f"all {JOBS} completed",
        explain=lambda: states(dsn),
    )
    [(rows, jobs, retried)] = _query(
        dsn, "SELECT count(*), count(DISTINCT job_id), count(*) FILTER (WHERE attempt > 1)"
        " FROM effects",
    )  # fmt: skip
    assert (rows, jobs) == (JOBS, JOBS)
    orphans = _query(
        dsn,
        "SELECT e.job_id FROM effects e LEFT JOIN awa_fast.jobs j ON j.id = e.job_id"
        " WHERE j.state IS DISTINCT FROM 'completed'",
    )
    assert orphans == []
    assert retried > 0  # some kill did cut a transaction short, and its job ran again
    assert "SIGKILL" in server.log()
