"""The counts' rollup (maintenance/counts.py) against a real database: a pass folds the
sealed deltas without changing a count, and a writer still in the partition it folds
loses nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from awa_fast.cli.schema import grant_sql
from awa_fast.maintenance.counts import Counts, CountsConfig
from awa_fast.maintenance.leader import Deposed
from awa_fast.maintenance.stats import MaintenanceStats
from tests.factories import finish_jobs, insert_job
from tests.helpers import COUNTED, assert_counts_exact, await_until, counts, lock_waiters, run
from tests.maintenance.support import leader, one_pass

FOLDER = "awa-fast counts test leader"


def _counts(dsn: str, **config: Any) -> Counts:
    return Counts(leader=leader(dsn), stats=MaintenanceStats(), config=CountsConfig(**config))


def _pass(counter: Counts) -> int | None:
    return run(one_pass(counter.leader, counter.run_once))


def _deltas(conn: psycopg.Connection[Any]) -> dict[int, int]:
    """Deltas waiting to be folded, by partition."""
    rows = conn.execute("SELECT slot, count(*) FROM awa_fast.count_deltas GROUP BY 1")
    return dict(rows.fetchall())


def _slot(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT awa_fast.count_slot()").fetchone()
    assert row is not None
    return int(row[0])


def _work(conn: psycopg.Connection[Any], queue: str) -> None:
    """Jobs in a few states, some of them finished this minute."""
    ids = [insert_job(conn, queue=queue) for _ in range(4)]
    finish_jobs(conn, "completed", ids[:2])
    finish_jobs(conn, "failed", ids[2:3])
    insert_job(conn, queue=queue, state="scheduled")


def test_a_pass_seals_then_folds_and_no_count_changes(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    counter = _counts(dsn)
    _work(conn, "a")
    before = counts(conn, COUNTED)
    assert _deltas(conn).keys() == {0}
    assert _pass(counter) == 0  # nothing sealed yet: it seals the partition written
    assert (_slot(conn), _deltas(conn).keys()) == (1, {0})
    _work(conn, "b")  # into the other partition
    assert_counts_exact(conn)
    folded = _pass(counter)
    assert folded and folded == counter.stats.counts_folded
    assert (_slot(conn), _deltas(conn).keys()) == (0, {1})
    assert_counts_exact(conn)
    assert _pass(counter)
    assert _deltas(conn) == {}
    assert_counts_exact(conn)
    assert counts(conn, COUNTED) == {
        **before,
        **{("b", state): n for (_, state), n in before.items()},
    }
    assert _pass(counter) == 0  # nothing to fold, nothing to seal
    assert _slot(conn) == 0
    minutes = conn.execute("SELECT queue, state, n FROM awa_fast.count_minutes ORDER BY 1, 2")
    assert minutes.fetchall() == [
        ("a", "completed", 2),
        ("a", "failed", 1),
        ("b", "completed", 2),
        ("b", "failed", 1),
    ]


def test_sums_that_come_to_zero_leave_no_rows(dsn: str, conn: psycopg.Connection[Any]) -> None:
    counter = _counts(dsn)
    _work(conn, "a")
    _pass(counter)
    _pass(counter)
    conn.execute("TRUNCATE awa_fast.jobs_hot, awa_fast.jobs_deferred, awa_fast.jobs_done")
    _pass(counter)
    _pass(counter)
    assert conn.execute("SELECT count(*) FROM awa_fast.count_rollup").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM awa_fast.count_minutes").fetchone() == (0,)
    assert _deltas(conn) == {}


def test_a_writer_in_the_sealed_partition_holds_the_fold_off_and_loses_nothing(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A transaction that wrote deltas before its partition was sealed, still open: the
    fold cannot lock the partition, gives up after its lock timeout and leaves every delta
    where it is; once the writer commits, the next pass folds its deltas too."""
    counter = _counts(dsn)
    _work(conn, "a")
    with psycopg.connect(dsn) as writer:  # BEGIN at its first statement
        insert_job(writer, queue="w")
        assert _pass(counter) == 0  # seals the partition the writer is in
        assert _pass(counter) is None  # its lock is not granted while the writer runs
        assert _slot(conn) == 1 and _deltas(conn).keys() == {0}
        insert_job(writer, queue="w", state="scheduled")  # into the current partition
        assert_counts_exact(conn)
        writer.commit()
    assert counts(conn, COUNTED)[("w", "available")] == 1
    assert _pass(counter)  # folds the writer's first delta, seals its second
    assert _deltas(conn).keys() == {1}
    assert_counts_exact(conn)
    assert _pass(counter)
    assert _deltas(conn) == {}
    assert_counts_exact(conn)


def test_a_fold_waits_for_a_writer_within_its_lock_timeout(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Readers and the fold queue behind the writer's lock; the writer commits while the
    fold waits, and the fold takes its deltas with the rest."""
    counter = _counts(dsn, lock_timeout=60.0)
    insert_job(conn, queue="a")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, application_name=FOLDER) as c:
            await c.set_autocommit(True)
            with psycopg.connect(dsn) as writer:
                insert_job(writer, queue="w")
                assert await counter.leader.check()
                try:
                    assert await counter.run_once(c) == 0  # seals the writer's partition
                    fold = asyncio.create_task(counter.run_once(c))
                    await await_until(
                        lambda: lock_waiters(dsn, application_name=FOLDER) == 1,
                        what="the fold to wait for the writer",
                    )
                    writer.commit()
                    assert await fold == 2  # a's delta and the writer's
                finally:
                    await counter.leader.close()

    run(main())
    assert _deltas(conn) == {}
    assert counts(conn, COUNTED) == {("a", "available"): 1, ("w", "available"): 1}


def test_minutes_past_the_horizon_go_with_a_fold(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO awa_fast.count_minutes (minute, queue, state, n) VALUES"
        " (date_trunc('minute', now()) - awa_fast.count_horizon() - interval '1 minute',"
        "  'a', 'completed', 5),"
        " (date_trunc('minute', now()), 'a', 'completed', 3)"
    )
    counter = _counts(dsn)
    insert_job(conn, queue="a")
    _pass(counter)
    _pass(counter)
    assert conn.execute("SELECT n FROM awa_fast.count_minutes").fetchall() == [(3,)]


def test_a_deposed_leader_folds_nothing(dsn: str, conn: psycopg.Connection[Any]) -> None:
    counter = _counts(dsn)
    insert_job(conn, queue="a")
    _pass(counter)  # sealed

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            with pytest.raises(Deposed):
                await counter.run_once(c)  # its term was released

    run(main())
    assert _deltas(conn).keys() == {0}


def test_the_applications_role_counts_and_folds(
    dsn: str, outsider_dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A role given the printed grants, and nothing more, appends deltas as it moves jobs
    and, as the leader, seals and folds them (TRUNCATE is the schema owner's, in
    awa_fast.count_fold)."""
    role = conninfo.conninfo_to_dict(outsider_dsn)["user"]
    conn.execute(grant_sql(str(role)).encode())
    with psycopg.connect(outsider_dsn, autocommit=True) as app:
        _work(app, "a")
    counter = _counts(outsider_dsn)
    assert _pass(counter) == 0
    assert _pass(counter)
    assert _deltas(conn) == {}
    assert_counts_exact(conn)
