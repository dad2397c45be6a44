"""The vacuum's pass against a real database: it vacuums a job table once its dead rows
pass the threshold, and no VACUUM truncates a job table."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from awa_fast.maintenance.stats import MaintenanceStats
from awa_fast.maintenance.vacuum import Vacuum, VacuumConfig
from tests.factories import TABLE_OF_STATE, insert_job
from tests.helpers import run, wait_until


def test_vacuum_runs_once_dead_tuples_pass_the_threshold(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    vacuum = Vacuum(stats=MaintenanceStats(), config=VacuumConfig(dead_tuples=10))

    async def run_once() -> list[str]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            return await vacuum.run_once(c)

    assert run(run_once()) == []
    ids = [insert_job(conn) for _ in range(30)]
    conn.execute("DELETE FROM awa_fast.jobs_hot WHERE id = ANY(%s)", (ids,))
    conn.execute("SELECT pg_stat_force_next_flush()")  # report at the end of this statement

    def dead_tuples() -> int:
        with psycopg.connect(dsn) as other:
            row = other.execute(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs_hot_0'"
            ).fetchone()
            return int(row[0]) if row else 0

    wait_until(lambda: dead_tuples() >= 30, what="the deletes to reach the statistics")
    assert run(run_once()) == ["jobs_hot_0"]  # the partition written to, alone
    assert run(run_once()) == []
    assert vacuum.stats.vacuumed == 1


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
