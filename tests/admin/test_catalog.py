"""Periodic schedules and descriptors as admins see them (admin/catalog.py): a
periodic job run now, off its schedule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

import awa_fast
from awa_fast import admin
from awa_fast.db.queries import Q
from awa_fast.lifecycle.schedules import periodic_job


@dataclass
class Report:
    day: str


def test_run_now_inserts_the_schedules_job_and_leaves_its_next_fire(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    schedule = periodic_job("nightly", "0 3 * * *", Report, Report("today"), queue="reports")
    conn.execute(Q.cron_register, schedule.params())
    job_id = client.run_op(admin.run_cron_job_now("nightly", actor="ops@example.com"))
    assert job_id is not None
    job = client.get_job(job_id)
    assert (job.kind, job.queue, job.args, job.state) == (
        "report",
        "reports",
        {"day": "today"},
        "available",
    )
    assert job.metadata == {"cron_name": "nightly", "cron_run_by": "ops@example.com"}
    row = conn.execute("SELECT last_enqueued_at FROM awa_fast.cron_jobs").fetchone()
    assert row == (None,)
    assert client.run_op(admin.run_cron_job_now("nope", actor="ops")) is None
