"""The ledger pruner against a real database: each lane keeps its newest claim window, and
nothing is pruned while a transaction holds the horizon."""

from __future__ import annotations

from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.ledger import LedgerPruner, LedgerPrunerConfig
from tests.factories import insert_job
from tests.helpers import run
from tests.maintenance.support import leader, one_pass

CLAIM = {"queue": "default", "limit": 1, "deadline_s": 60.0, "host_id": None}


def _prune(dsn: str, **config: float) -> int:
    pruner = LedgerPruner(leader=leader(dsn), config=LedgerPrunerConfig(**config))
    return run(one_pass(pruner.leader, pruner.run_once))


def _ledger(conn: psycopg.Connection[Any]) -> list[tuple[int, int]]:
    rows = conn.execute(
        "SELECT priority, n FROM awa_fast.claim_windows ORDER BY priority, n"
    ).fetchall()
    return [(row[0], row[1]) for row in rows]


def test_each_lane_keeps_its_newest_window(dsn: str, conn: psycopg.Connection[Any]) -> None:
    for priority in (1, 1, 1, 3, 3):
        insert_job(conn, priority=priority)
    for _ in range(5):
        assert conn.execute(Q.job_claim_batch, CLAIM).fetchall()
    assert _ledger(conn) == [(1, 1), (1, 2), (1, 3), (3, 1), (3, 2)]
    assert _prune(dsn) == 3
    assert _ledger(conn) == [(1, 3), (3, 2)]
    insert_job(conn, priority=3)  # claims go on from the windows kept
    assert len(conn.execute(Q.job_claim_batch, CLAIM).fetchall()) == 1


def test_nothing_is_pruned_while_a_horizon_is_held(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Held for ``held_for`` (0 here, so that the test need not wait): no prune
    until that transaction ends."""
    for _ in range(2):
        insert_job(conn)
        assert conn.execute(Q.job_claim_batch, CLAIM).fetchall()
    with psycopg.connect(dsn) as held:
        held.execute("SELECT pg_current_xact_id()")
        assert _prune(dsn, held_for=0.0) == 0
    assert _prune(dsn, held_for=0.0) == 1
    assert _ledger(conn) == [(2, 2)]
