"""Recovery with real supervisors: stuck CPU loops, a leader killed outright, a Postgres
restart in the middle of a run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.localpg import LocalCluster
from awa_fast.maintenance.rescuer import GONE, STALE
from tests.helpers import free_port, job, scrape, states, supervisor_of, wait_until, worker_exits
from tests.runtime.work.pool.app import Spin, Step
from tests.runtime.work.pool.conftest import Serve

FAST = (
    "--set",
    "heartbeat_interval=0.2",
    "--set",
    "rescue_interval=0.2",
    "--set",
    "election_interval=0.3",
    "--set",
    "promote_interval=0.05",
)


def _query(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cpu_loop_ignoring_cancellation_gets_its_worker_replaced(serve: Any, dsn: str) -> None:
    """The first attempt spins for two minutes past a 3 s deadline; the second, on a fresh
    worker, records one row and returns. (Forked from the supervisor itself, a replacement
    once in a few dozen runs hung on its first connect, on a libpq lock copied held from
    a supervisor thread, and the retry failed too: awa_fast.runtime.work.forkserver.)"""
    with awa_fast.Client(dsn) as client:
        job_id = client.insert(Spin(seconds=120)).id
    port = free_port()
    server = serve(
        "--processes", "2", "--set", "deadline=3", "--set", "deadline_grace=0.5", *FAST,
        "--metrics-port", str(port),
    )  # fmt: skip
    wait_until(lambda: bool(_query(dsn, "SELECT 1 FROM calls WHERE note = 'started'")))
    [(spinner,)] = _query(dsn, "SELECT pid FROM calls WHERE note = 'started'")
    wait_until(lambda: job(dsn, job_id)["state"] == "completed", timeout=30)
    final = job(dsn, job_id)
    calls = _query(dsn, "SELECT pid, attempt, note, at FROM calls ORDER BY at")
    assert final["attempt"] == 2, (final["errors"], calls, server.log()[-6000:])
    assert "deadline exceeded" in final["errors"][0]["error"]
    wait_until(lambda: not _alive(spinner), what="the spinning worker to be killed")
    [(finisher,)] = _query(dsn, "SELECT pid FROM calls WHERE note = 'done'")
    assert finisher != spinner
    assert worker_exits(scrape(port))["evicted"] == 1


def test_a_worker_whose_handler_ignores_its_cancel_flag_gets_no_new_jobs(
    serve: Any, dsn: str
) -> None:
    """While a handler ignores its cancel flag (for the whole test here: the grace is
    long), its worker process is sent no new jobs: they run on the other worker. Sent to
    the stuck one, a job would wait behind the loop and be lost with the process when it
    is killed (a retry once was, spending an attempt)."""
    with awa_fast.Client(dsn) as client:
        client.insert(Spin(seconds=120))
    serve(
        "--processes", "2", "--queue", "default=4",
        "--set", "deadline=1", "--set", "deadline_grace=600", *FAST,
    )  # fmt: skip
    wait_until(lambda: bool(_query(dsn, "SELECT 1 FROM calls WHERE note = 'flagged'")))
    [(spinner,)] = _query(dsn, "SELECT pid FROM calls WHERE note = 'flagged'")
    with awa_fast.Client(dsn) as client:
        quick = client.insert_many([Step("record") for _ in range(8)])
    wait_until(lambda: states(dsn) == {"running": 1, "completed": 8}, what="the jobs after it")
    ran_on = _query(dsn, "SELECT DISTINCT pid FROM calls WHERE job_id = ANY(%s)", quick)
    assert len(ran_on) == 1 and ran_on[0][0] != spinner


def _leader(servers: list[Serve]) -> Serve | None:
    leaders = [s for s in servers if "now the maintenance leader" in s.log()]
    return leaders[0] if len(leaders) == 1 else None


def test_killing_the_leader_host_hands_its_jobs_to_the_other(serve: Any, dsn: str) -> None:
    settings = (
        "--processes",
        "2",
        "--queue",
        "default=20",  # room for all 20 on either host: a standby start never waits for a unit
        "--prefetch",
        "0",  # every job a host takes starts at once, so the kill finds them all running
        "--set",
        "heartbeat_staleness=2",
        *FAST,
    )
    servers = [serve(*settings), serve(*settings)]
    wait_until(lambda: _leader(servers) is not None, what="one leader")
    leader = _leader(servers)
    assert leader is not None
    other = next(s for s in servers if s is not leader)
    # Each host's standby claim waits, so the insert starts a job on each whatever claims
    # next: the test needs jobs on both.
    wait_until(
        lambda: (
            _query(
                dsn,
                "SELECT count(DISTINCT host_id) FROM awa_fast.standby_claims WHERE job_id IS NULL",
            )
            == [(2,)]
        ),
        what="a standby claim of each host",
    )
    with awa_fast.Client(dsn) as client:
        ids = client.insert_many([Step("sleep", seconds=3) for _ in range(20)])
    wait_until(lambda: len(_query(dsn, "SELECT 1 FROM calls WHERE note = 'started'")) == 20)
    on_leader = {
        job_id
        for job_id, pid in _query(dsn, "SELECT job_id, pid FROM calls")
        if supervisor_of(pid) == leader.proc.pid
    }
    assert on_leader, "the leader ran none of the jobs"
    leader.proc.kill()  # SIGKILL: its workers die with it (PDEATHSIG)
    wait_until(lambda: states(dsn) == {"completed": 20}, timeout=60, what="all 20 completed")
    assert "now the maintenance leader" in other.log()
    for job_id in ids:
        final = job(dsn, job_id)
        if job_id in on_leader:
            assert final["attempt"] == 2
            # gone by its lock once the other has been up long enough, else stale
            assert final["errors"][0]["error"] in (GONE, STALE)
        else:
            assert (final["attempt"], final["errors"]) == (1, [])


@pytest.mark.slow
def test_postgres_restart_mid_run_loses_and_repeats_nothing(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    url = own_cluster.url
    awa_fast.migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE calls (job_id bigint, pid int, attempt int, note text,"
            " at timestamptz DEFAULT clock_timestamp())"
        )
    with awa_fast.Client(url) as client:
        client.insert_many([Step("record") for _ in range(5000)])
    server = Serve(
        url,
        tmp_path,
        "--processes",
        "2",
        "--queue",
        "default=100",
        "--set",
        "heartbeat_staleness=3",
        *FAST,
    )
    try:
        wait_until(lambda: states(url).get("completed", 0) > 500, timeout=60)
        own_cluster.pg_ctl("restart", "-m", "fast")
        wait_until(lambda: _done(url) == 5000, timeout=120, what="all 5000 completed")
        [(total, distinct)] = _query(url, "SELECT count(*), count(DISTINCT job_id) FROM calls")
        assert (total, distinct) == (5000, 5000), server.log()[-3000:]
    finally:
        server.close()


def _done(url: str) -> int:
    try:
        return states(url).get("completed", 0)
    except psycopg.OperationalError:
        return -1
