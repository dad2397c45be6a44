"""The cleaner's pass against a real database: finished jobs past retention go, per queue
where configured."""

from __future__ import annotations

from typing import Any

import psycopg

from awa_fast.maintenance.cleaner import Cleaner, CleanerConfig
from awa_fast.maintenance.stats import MaintenanceStats
from tests.factories import insert_job
from tests.helpers import run
from tests.maintenance.support import leader, one_pass, set_columns


def _clean(dsn: str, **config: Any) -> int:
    cleaner = Cleaner(leader=leader(dsn), stats=MaintenanceStats(), config=CleanerConfig(**config))
    deleted = run(one_pass(cleaner.leader, cleaner.run_once))
    assert cleaner.stats.deleted == deleted
    return deleted


def test_retention_deletes_only_expired_finished_jobs(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    old_done = insert_job(conn, state="completed")
    new_done = insert_job(conn, state="completed")
    old_failed = insert_job(conn, state="failed")
    set_columns(conn, old_done, "finalized_at = now() - interval '2 days'")
    set_columns(conn, new_done, "finalized_at = now()")
    set_columns(conn, old_failed, "finalized_at = now() - interval '4 days'")
    assert _clean(dsn, batch=1) == 2
    rows = conn.execute("SELECT id FROM awa_fast.jobs").fetchall()
    assert rows == [(new_done,)]


def test_retention_is_configurable_per_queue(dsn: str, conn: psycopg.Connection[Any]) -> None:
    short = insert_job(conn, state="completed", queue="short")
    default = insert_job(conn, state="completed", queue="other")
    for job_id in (short, default):
        set_columns(conn, job_id, "finalized_at = now() - interval '2 hours'")
    deleted = _clean(dsn, queue_retention={"short": (3600.0, 3600.0)})
    assert deleted == 1
    assert conn.execute("SELECT id FROM awa_fast.jobs").fetchall() == [(default,)]
