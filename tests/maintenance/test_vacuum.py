"""The vacuum's pass against a real database: it vacuums a job table once its dead rows
pass the threshold, not again while the snapshot that kept them is still the oldest, and
no VACUUM truncates a job table."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest
from psycopg import IsolationLevel

from awa_fast.maintenance.stats import MaintenanceStats
from awa_fast.maintenance.vacuum import Vacuum, VacuumConfig
from tests.factories import TABLE_OF_STATE, insert_job
from tests.helpers import run, wait_until


def _pass(dsn: str, vacuum: Vacuum) -> list[str]:
    async def run_once() -> list[str]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            return await vacuum.run_once(c)

    return run(run_once())


def _dead_tuples(dsn: str) -> int:
    with psycopg.connect(dsn) as other:
        row = other.execute(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs_hot_0'"
        ).fetchone()
        return int(row[0]) if row else 0


def _kill_jobs(dsn: str, conn: psycopg.Connection[Any], ids: list[int]) -> None:
    """Delete them, and wait until the statistics count their dead tuples."""
    conn.execute("DELETE FROM awa_fast.jobs_hot WHERE id = ANY(%s)", (ids,))
    conn.execute("SELECT pg_stat_force_next_flush()")  # report at the end of this statement
    wait_until(lambda: _dead_tuples(dsn) >= len(ids), what="the deletes to reach the statistics")


def test_vacuum_runs_once_dead_tuples_pass_the_threshold(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    vacuum = Vacuum(stats=MaintenanceStats(), config=VacuumConfig(dead_tuples=10))
    assert _pass(dsn, vacuum) == []
    _kill_jobs(dsn, conn, [insert_job(conn) for _ in range(30)])
    assert _pass(dsn, vacuum) == ["jobs_hot_0"]  # the partition written to, alone
    assert _pass(dsn, vacuum) == []
    assert vacuum.stats.vacuumed == 1


def test_a_table_is_not_vacuumed_again_while_the_same_snapshot_holds_its_dead_tuples(
    dsn: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The first VACUUM under the held snapshot removes nothing; the next passes leave the
    table alone, saying why, until the snapshot is let go."""
    vacuum = Vacuum(stats=MaintenanceStats(), config=VacuumConfig(dead_tuples=10))
    ids = [insert_job(conn) for _ in range(30)]
    with psycopg.connect(dsn) as holder:
        holder.isolation_level = IsolationLevel.REPEATABLE_READ
        holder.execute("SELECT count(*) FROM awa_fast.jobs_hot")  # its snapshot sees them
        _kill_jobs(dsn, conn, ids)
        assert _pass(dsn, vacuum) == ["jobs_hot_0"]
        assert _dead_tuples(dsn) >= 30  # none removable
        with caplog.at_level(logging.WARNING, logger="awa_fast.maintenance"):
            assert _pass(dsn, vacuum) == []
            assert _pass(dsn, vacuum) == []
        assert caplog.text.count("no VACUUM can remove until transaction id") == 1
        holder.rollback()
    assert _pass(dsn, vacuum) == ["jobs_hot_0"]
    assert _dead_tuples(dsn) == 0


@pytest.mark.parametrize("state", ["available", "scheduled", "completed"])
def test_vacuum_never_truncates_a_job_table(state: str, conn: psycopg.Connection[Any]) -> None:
    """Truncating a table's empty tail takes an ACCESS EXCLUSIVE lock that stops every
    claim, completion and insert of it; a queue refills the pages it empties, so a VACUUM
    (the leader's or autovacuum's) keeps them."""
    table = TABLE_OF_STATE[state]
    conn.execute(
        f"INSERT INTO awa_fast.{table} (kind, queue, state)"
        " SELECT 'k', 'q', %s FROM generate_series(1, 5000)",
        (state,),
    )

    def pages() -> int:
        row = conn.execute(  # the table's, and its partitions' (migrations 0029-0030)
            "SELECT sum(pg_relation_size(c.oid)) / 8192 FROM pg_class c"
            " WHERE c.oid = %(t)s::regclass"
            "    OR c.oid IN (SELECT relid FROM pg_partition_tree(%(t)s))",
            {"t": f"awa_fast.{table}"},
        ).fetchone()
        assert row is not None
        return int(row[0])

    before = pages()
    conn.execute(f"DELETE FROM awa_fast.{table}")
    conn.execute(f"VACUUM awa_fast.{table}")
    assert before > 50
    assert pages() == before
