"""Two statements that finish the same attempt at once: one wins, the other finds no row.

Finishing moves a row between tables (jobs_hot to jobs_done or jobs_deferred), so a loser
that re-read the row after the winner committed could, if a guard were missing, move it a
second time or leave a copy behind. Each race here is forced deterministically: the
winner's transaction holds the row, the loser is seen waiting on its lock, then the winner
commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from awa_fast.db.connections import IdMap
from awa_fast.db.queries import Q
from tests.factories import insert_job, rescue_params
from tests.helpers import wait_until

LEASE = 1
Finisher = tuple[str, Callable[[int], dict[str, Any]], str]

FINISHERS: dict[str, Finisher] = {
    # name: (statement, its parameters for a job id, the state it leaves the job in)
    "complete": (
        Q.job_complete_many,
        lambda i: {"ids": [i], "leases": IdMap({i: LEASE})},
        "completed",
    ),
    "cancel": (Q.job_cancel, lambda i: {"id": i, "reason": "race"}, "cancelled"),
    "rescue": (
        Q.job_rescue_many,
        lambda i: rescue_params(i, lease=LEASE, message="lost", from_state="running"),
        "retryable",
    ),
}
PAIRS = [(a, b) for a in FINISHERS for b in FINISHERS if a != b]


def _waiting_on_a_lock(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize(("winner", "loser"), PAIRS)
def test_one_finish_wins_a_race(
    winner: str, loser: str, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    job_id = insert_job(conn, state="running", attempt=1, max_attempts=3, run_lease=LEASE)
    win_sql, win_params, win_state = FINISHERS[winner]
    lose_sql, lose_params, _ = FINISHERS[loser]
    lost: list[list[Any]] = []
    with psycopg.connect(dsn) as first, psycopg.connect(dsn, autocommit=True) as second:
        assert first.execute(win_sql, win_params(job_id)).fetchall()  # holds the row
        pid = second.info.backend_pid
        racer = threading.Thread(
            target=lambda: lost.append(second.execute(lose_sql, lose_params(job_id)).fetchall())
        )
        racer.start()
        wait_until(lambda: _waiting_on_a_lock(conn, pid), what=f"{loser} to wait on {winner}")
        first.commit()
        racer.join()
    assert lost == [[]]
    rows = conn.execute(
        "SELECT state::text, attempt FROM awa_fast.jobs WHERE id = %s", (job_id,)
    ).fetchall()
    assert rows == [(win_state, 1)]
