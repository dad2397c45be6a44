"""Workers SIGKILLed and SIGSTOPped under load (issue #33): every outcome pushed reaches the
database, no attempt runs twice, and the jobs finish through the ring, not the rescuer."""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import psycopg
import pytest

import awa_fast
from tests.helpers import busy_worker, states, wait_until
from tests.runtime.work.pool.app import Step

JOBS = 30_000  # the first backlog; topped up so that no step finds the queue drained
FLOOR = 4_000  # jobs left waiting before each step: more than a step's 200 and its overshoot
KILLS = 36
STOPPED_FOR = 4.0  # twice the ring's stall timeout
KILLED = re.compile(r"worker process \d+ was killed by SIGKILL")


def _query(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def _completed(dsn: str) -> int:
    return states(dsn).get("completed", 0)


def _stall(dsn: str) -> dict[str, Any]:
    """What a stall needs to be read: states, each lane's ledger head and the sessions."""
    return {
        "states": states(dsn),
        "lanes": _query(
            dsn,
            "SELECT DISTINCT ON (queue, priority) queue, priority, n, lo::text, hi::text,"
            " pos_xid::text, pos_id FROM awa_fast.claim_windows"
            " ORDER BY queue, priority, n DESC",
        ),
        "available": _query(
            dsn,
            "SELECT priority, ready_xid::text, id, xmin::text FROM awa_fast.jobs_hot"
            " WHERE state = 'available' ORDER BY priority, ready_xid, id LIMIT 5",
        ),
        "sessions": _query(
            dsn,
            "SELECT pid, state, wait_event_type, wait_event, backend_xid::text,"
            " backend_xmin::text, now() - xact_start, left(query, 60) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()",
        ),
        "snapshot": _query(dsn, "SELECT pg_current_snapshot()::text"),
    }


class Backlog:
    """The jobs inserted, kept above FLOOR waiting before each step: a pool fast enough to
    drain the first backlog before the storm ends would leave a step waiting forever."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.inserted = 0
        self.top_up(JOBS)

    def top_up(self, jobs: int = FLOOR) -> None:
        if states(self._dsn).get("available", 0) >= FLOOR:
            return
        with awa_fast.Client(self._dsn) as client:
            client.insert_many([Step("record") for _ in range(jobs)])
        self.inserted += jobs


def _after_progress(dsn: str, jobs: int, *, backlog: Backlog) -> None:
    """Returns once ``jobs`` more jobs completed, the backlog first topped up."""
    backlog.top_up()
    target = _completed(dsn) + jobs
    wait_until(
        lambda: _completed(dsn) >= target,
        timeout=60,
        what=f"{jobs} more completions",
        explain=lambda: _stall(dsn),
    )


@pytest.mark.slow
def test_kill_storm_and_a_long_stop_lose_and_repeat_nothing(serve: Any, dsn: str) -> None:
    backlog = Backlog(dsn)
    # The rescuer's backstops out of reach: only the ring and the lost reports finish jobs.
    server = serve(
        "--processes", "2", "--queue", "default=64",
        "--set", "heartbeat_staleness=600", "--set", "deadline=600",
    )  # fmt: skip
    supervisor = server.proc.pid
    _after_progress(dsn, 500, backlog=backlog)
    for _ in range(KILLS):
        os.kill(busy_worker(dsn, supervisor, table="calls"), signal.SIGKILL)
        _after_progress(dsn, 200, backlog=backlog)
    # A worker stopped past the stall timeout keeps its slot; resumed, it goes on.
    stopped = busy_worker(dsn, supervisor, table="calls")
    os.kill(stopped, signal.SIGSTOP)
    time.sleep(STOPPED_FOR)  # the stop under test, not a wait for anything
    os.kill(stopped, signal.SIGCONT)
    _after_progress(dsn, 200, backlog=backlog)
    # One stopped and then killed: dead, not paused, so its slot is taken back.
    stopped = busy_worker(dsn, supervisor, table="calls")
    os.kill(stopped, signal.SIGSTOP)
    os.kill(stopped, signal.SIGKILL)
    total = backlog.inserted
    wait_until(lambda: _completed(dsn) == total, timeout=180, what=f"all {total} completed")

    [(calls, attempts)] = _query(
        dsn, "SELECT count(*), count(DISTINCT (job_id, attempt)) FROM calls"
    )
    assert calls == attempts, "an attempt ran twice"
    rows = _query(dsn, "SELECT id, attempt, errors FROM awa_fast.jobs")
    retried = [(i, a, e) for i, a, e in rows if a > 1]
    for job_id, attempt, errors in retried:
        assert len(errors) == attempt - 1, (job_id, errors)
        assert all(KILLED.fullmatch(e["error"]) for e in errors), (job_id, errors)
    assert len(retried) >= KILLS // 2, "the kills hit no running attempt"
    ran = _query(dsn, "SELECT count(*) FROM calls c JOIN awa_fast.jobs j ON j.id = c.job_id"
                 " AND j.attempt = c.attempt")  # fmt: skip
    assert ran == [(total,)], "a job completed without its last attempt running"
    server.signal()
    assert server.wait(60) == 0
