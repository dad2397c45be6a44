"""The cleaner's pass against a real database: finished jobs past retention go, per queue
where configured."""

from __future__ import annotations

from typing import Any

import psycopg

from awa_fast.maintenance.cleaner import Cleaner, CleanerConfig
from awa_fast.maintenance.stats import MaintenanceStats
from tests.factories import insert_job
from tests.helpers import assert_counts_exact, run
from tests.maintenance.support import leader, one_pass, set_columns


def _clean(dsn: str, **config: Any) -> int:
    cleaner = Cleaner(leader=leader(dsn), stats=MaintenanceStats(), config=CleanerConfig(**config))
    deleted = run(one_pass(cleaner.leader, cleaner.run_once))
    assert cleaner.stats.deleted == deleted
    return deleted


def _slot(conn: psycopg.Connection[Any], job_id: int) -> int | None:
    row = conn.execute("SELECT slot FROM awa_fast.jobs_done WHERE id = %s", (job_id,)).fetchone()
    return None if row is None else int(row[0])


def _period_over(conn: psycopg.Connection[Any]) -> int:
    """Make the partition in use one that has been in use for a day; returns its slot."""
    row = conn.execute(
        "UPDATE awa_fast.done_turns SET turned_at = now() - interval '1 day'"
        " WHERE slot = awa_fast.done_slot() RETURNING slot"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_partition_past_retention_is_truncated_with_its_counts(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """The ring turns once its period is over; a sealed partition whose newest job is past
    the completed retention goes whole, but for the jobs it still keeps (a failed job
    within its longer retention, a queue kept longer), which move to the partition in use.
    The counts, and retry_failed's count of failed jobs pruned, follow exactly."""
    expired = insert_job(conn, state="completed")
    expired_failed = insert_job(conn, state="failed")
    kept_failed = insert_job(conn, state="failed")
    kept_audit = insert_job(conn, state="completed", queue="audit")
    for job_id, age in (
        (expired, "2 days"),
        (expired_failed, "4 days"),
        (kept_failed, "2 days"),
        (kept_audit, "2 days"),
    ):
        set_columns(conn, job_id, f"finalized_at = now() - interval '{age}'")
    sealed = _period_over(conn)
    assert _clean(dsn, queue_retention={"audit": (3 * 86400.0, 3 * 86400.0)}) == 2
    rows = conn.execute("SELECT id FROM awa_fast.jobs ORDER BY id").fetchall()
    assert rows == [(kept_failed,), (kept_audit,)]
    in_use = conn.execute("SELECT awa_fast.done_slot()").fetchone()
    assert in_use is not None and in_use[0] != sealed
    assert {_slot(conn, kept_failed), _slot(conn, kept_audit)} == {in_use[0]}
    pruned = conn.execute(
        "SELECT pruned FROM awa_fast.pruned_failed_counts WHERE queue = 'default'"
    ).fetchone()
    assert pruned == (1,)
    assert_counts_exact(conn)
    assert _clean(dsn) == 0  # the period of the partition now in use has just begun


def test_a_partition_with_a_job_within_retention_is_kept_whole(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Its newest job decides: a partition is freed once all its completed jobs are past
    retention, not before, so a job is kept for its retention and at most a period more.
    A failed job past its own retention waits for its partition too: no row is deleted."""
    old_done = insert_job(conn, state="completed")
    new_done = insert_job(conn, state="completed")
    old_failed = insert_job(conn, state="failed")
    set_columns(conn, old_done, "finalized_at = now() - interval '2 days'")
    set_columns(conn, new_done, "finalized_at = now()")
    set_columns(conn, old_failed, "finalized_at = now() - interval '4 days'")
    _period_over(conn)
    assert _clean(dsn, batch=1) == 0
    rows = conn.execute("SELECT id FROM awa_fast.jobs ORDER BY id").fetchall()
    assert rows == [(old_done,), (new_done,), (old_failed,)]
    assert_counts_exact(conn)


def test_a_failed_job_goes_with_the_first_partition_freed_after_its_retention(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Moved along while its 72 hours last, then truncated with its partition."""
    failed = insert_job(conn, state="failed")
    set_columns(conn, failed, "finalized_at = now() - interval '2 days'")
    first = _period_over(conn)
    assert _clean(dsn) == 0
    moved_to = _slot(conn, failed)
    assert moved_to is not None and moved_to != first
    set_columns(conn, failed, "finalized_at = now() - interval '4 days'")
    assert _clean(dsn) == 0  # the partition in use is not freed
    assert _period_over(conn) == moved_to
    assert _clean(dsn) == 1
    assert conn.execute("SELECT id FROM awa_fast.jobs").fetchall() == []
    pruned = conn.execute(
        "SELECT pruned FROM awa_fast.pruned_failed_counts WHERE queue = 'default'"
    ).fetchone()
    assert pruned == (1,)
    assert_counts_exact(conn)


def test_a_queue_kept_longer_goes_by_partition_not_row_by_row(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Past its own retention, in the partition in use, its job waits for the partition."""
    audit = insert_job(conn, state="completed", queue="audit")
    set_columns(conn, audit, "finalized_at = now() - interval '4 days'")
    assert _clean(dsn, queue_retention={"audit": (3 * 86400.0, 3 * 86400.0)}) == 0
    assert conn.execute("SELECT id FROM awa_fast.jobs").fetchall() == [(audit,)]


def test_retention_is_configurable_per_queue(dsn: str, conn: psycopg.Connection[Any]) -> None:
    short = insert_job(conn, state="completed", queue="short")
    default = insert_job(conn, state="completed", queue="other")
    for job_id in (short, default):
        set_columns(conn, job_id, "finalized_at = now() - interval '2 hours'")
    deleted = _clean(dsn, queue_retention={"short": (3600.0, 3600.0)})
    assert deleted == 1
    assert conn.execute("SELECT id FROM awa_fast.jobs").fetchall() == [(default,)]


def test_freeing_a_partition_takes_its_minutes_away_too(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Jobs freed within the counts' 25 hours leave the per-minute counts (the dashboard's
    throughput) as a delete of them would."""
    gone = [insert_job(conn, state="completed") for _ in range(3)]
    for job_id in gone:
        set_columns(conn, job_id, "finalized_at = now() - interval '2 hours'")
    _period_over(conn)
    assert _clean(dsn, completed_retention=3600.0, failed_retention=3600.0) == 3
    minutes = conn.execute(
        "SELECT count(*) FROM awa_fast.queue_minutes"
        " WHERE n <> 0 AND minute < now() - interval '1 hour'"
    ).fetchone()
    assert minutes == (0,)
    assert_counts_exact(conn)
