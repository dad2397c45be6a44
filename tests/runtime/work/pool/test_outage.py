"""A Postgres outage under a running pool: the pool's own host is not taken for dead for
it, no attempt runs twice, nothing is lost, and a producer gets a clear error meanwhile."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.localpg import LocalCluster
from tests.helpers import states, wait_until
from tests.runtime.work.pool.conftest import Serve
from tests.runtime.work.pool.runs_app import Nap

JOBS = 120
OUTAGE = 35.0  # seconds: several staleness windows
RUNS = (
    "CREATE TABLE runs (job_id bigint, attempt int, run_lease bigint, pid int,"
    " at timestamptz DEFAULT clock_timestamp())"
)


def _query(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def _completed(url: str) -> int:
    try:
        return states(url).get("completed", 0)
    except psycopg.OperationalError:
        return -1


@pytest.mark.slow
def test_an_outage_runs_no_attempt_twice_and_loses_nothing(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Postgres stops for longer than several heartbeat_staleness windows while the pool
    runs jobs: handlers that end meanwhile keep their outcomes, prefetched jobs start and
    wait to record themselves. Once it is back, every job completes, each ran once (one
    run, attempt 1), and the host was never taken for dead. An insert meanwhile raises
    DatabaseUnreachable, naming the server."""
    url = own_cluster.url
    awa_fast.migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RUNS)
    with awa_fast.Client(url) as client:
        client.insert_many([Nap(0.5) for _ in range(JOBS)])
    server = Serve(
        url,
        tmp_path,
        "--processes", "2", "--queue", "default=8", "--prefetch", "2",
        "--set", "heartbeat_staleness=10", "--set", "election_interval=0.3",
        "--set", "rescue_interval=0.2", "--set", "backstop_interval=1",
        app="tests.runtime.work.pool.runs_app",
    )  # fmt: skip
    producer = awa_fast.Client(url, connect_timeout=2)
    try:
        producer.insert(Nap(0.5))  # its pool holds a connection when the server goes
        wait_until(lambda: _completed(url) >= 16, timeout=60, what="jobs under way")
        own_cluster.pg_ctl("stop", "-m", "fast")
        outage_ends = time.monotonic() + OUTAGE
        for _ in range(2):  # the connection lost, then none to be had
            with pytest.raises(awa_fast.DatabaseError) as raised:
                producer.insert(Nap(0.5))
            assert isinstance(raised.value, awa_fast.DatabaseUnreachable)
            assert str(raised.value).startswith(
                f"database unreachable at 127.0.0.1:{own_cluster.port}: "
            )
        time.sleep(max(0.0, outage_ends - time.monotonic()))  # the outage itself
        own_cluster.start()
        wait_until(lambda: _completed(url) == JOBS + 1, timeout=120, what="every job completed")
    finally:
        producer.close()
        server.close()
    log = server.log()
    [(runs, jobs, first_attempts)] = _query(
        url,
        "SELECT count(*), count(DISTINCT job_id), count(*) FILTER (WHERE attempt = 1) FROM runs",
    )
    assert (runs, jobs, first_attempts) == (JOBS + 1, JOBS + 1, JOBS + 1), log[-6000:]
    assert _query(url, "SELECT DISTINCT attempt FROM awa_fast.jobs") == [(1,)]
    assert "stopped heartbeating" not in log and "are gone" not in log
