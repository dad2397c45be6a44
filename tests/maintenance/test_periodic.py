"""Periodic jobs: registration, the leader's enqueueing of due fires (once per fire, however
many leaders evaluate it), missed-fire policies, and a schedule run end to end."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.queries import Q
from awa_fast.errors import ConfigError, ValidationError
from awa_fast.lifecycle.schedules import PeriodicJob, periodic_job
from awa_fast.maintenance import periodic
from tests.helpers import await_until, run


@dataclass
class Report:
    name: str


def _register(dsn: str, *jobs: PeriodicJob) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await periodic.register(conn, list(jobs))

    run(main())


def _enqueue_due(dsn: str, now: datetime) -> int:
    async def main() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await periodic.enqueue(conn, await periodic.owed(conn, now=now))

    return run(main())


def _registered_at(conn: psycopg.Connection[Any], name: str) -> datetime:
    row = conn.execute("SELECT created_at FROM awa_fast.cron_jobs WHERE name = %s", (name,))
    found = row.fetchone()
    assert found is not None
    return found[0]  # type: ignore[no-any-return]


def _fired(conn: psycopg.Connection[Any]) -> list[tuple[str, str, str]]:
    rows = conn.execute(
        "SELECT kind, metadata->>'cron_name', metadata->>'cron_fire_at' FROM awa_fast.jobs"
        " ORDER BY id"
    ).fetchall()
    return [(kind, name, fire_at) for kind, name, fire_at in rows]


def _minute(moment: datetime, minutes: int) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=minutes)


def test_registering_writes_the_schedule_and_keeps_its_last_fire(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    nightly = periodic_job("nightly", "0 3 * * *", Report, Report("sales"), queue="reports")
    _register(dsn, nightly)
    conn.execute("UPDATE awa_fast.cron_jobs SET last_enqueued_at = '2026-01-01T03:00Z'")
    _register(dsn, periodic_job("nightly", "0 4 * * *", Report, Report("sales"), priority=1))
    with awa_fast.Client(dsn) as client:
        [row] = client.list_cron_jobs()
        assert (row["name"], row["cron_expr"], row["kind"], row["queue"], row["priority"]) == (
            "nightly",
            "0 4 * * *",
            "report",
            "default",
            1,
        )
        assert row["args"] == {"name": "sales"} and row["missed_fire_policy"] == "coalesce"
        assert row["last_enqueued_at"].isoformat() == "2026-01-01T03:00:00+00:00"
        assert client.delete_cron_job("nightly") is True
        assert client.delete_cron_job("nightly") is False
        assert client.list_cron_jobs() == []


def test_a_schedule_fires_from_its_registration_coalescing_what_it_missed(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    _register(dsn, periodic_job("every-minute", "* * * * *", Report, Report("m")))
    registered = _registered_at(conn, "every-minute")
    assert _enqueue_due(dsn, registered) == 0  # nothing before the first minute after it
    later = _minute(registered, 3)
    assert _enqueue_due(dsn, later) == 1  # three minutes missed: the latest only
    assert _enqueue_due(dsn, later) == 0  # and only once
    assert _fired(conn) == [("report", "every-minute", later.isoformat())]
    assert _enqueue_due(dsn, _minute(registered, 4)) == 1


def test_catch_up_enqueues_each_missed_fire_in_order(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    _register(
        dsn,
        periodic_job("sync", "* * * * *", Report, Report("s"), missed_fire_policy="catch_up"),
    )
    registered = _registered_at(conn, "sync")
    later = _minute(registered, 3)
    assert _enqueue_due(dsn, later) == 3
    assert [fire for _, _, fire in _fired(conn)] == [
        _minute(registered, n).isoformat() for n in (1, 2, 3)
    ]


def test_a_fire_two_leaders_evaluate_at_once_is_enqueued_once(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """One evaluator holds the schedule's row in an open transaction that enqueues the
    fire; the other, evaluating the same fire, waits on that row and, once the first
    commits, finds the fire taken and enqueues nothing."""
    _register(dsn, periodic_job("race", "* * * * *", Report, Report("r")))
    fire = _minute(_registered_at(conn, "race"), 1)

    async def main() -> int:
        async with await psycopg.AsyncConnection.connect(dsn) as first:
            cur = await first.execute(
                Q.cron_enqueue, {"name": "race", "previous": None, "fire_at": fire}
            )
            assert cur.rowcount == 1  # enqueued, not yet committed
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as second:
                pid = second.info.backend_pid
                owed = await periodic.owed(second, now=fire)
                racing = asyncio.ensure_future(periodic.enqueue(second, owed))

                def waiting_on_the_row() -> bool:
                    row = conn.execute(
                        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
                    ).fetchone()
                    return row == ("Lock",)

                await await_until(waiting_on_the_row, what="the second evaluator to wait")
                await first.commit()
                return await racing

    assert run(main()) == 0
    assert _fired(conn) == [("report", "race", fire.isoformat())]


def test_a_row_this_code_cannot_read_is_skipped_and_the_others_fire(
    dsn: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    _register(dsn, periodic_job("good", "* * * * *", Report, Report("g")))
    _register(dsn, periodic_job("bad", "* * * * *", Report, Report("b")))
    conn.execute("UPDATE awa_fast.cron_jobs SET cron_expr = '* * * * * *' WHERE name = 'bad'")
    with caplog.at_level(logging.WARNING, logger="awa_fast.maintenance"):
        assert _enqueue_due(dsn, _minute(_registered_at(conn, "good"), 1)) == 1
    assert [name for _, name, _ in _fired(conn)] == ["good"]
    assert "periodic job 'bad' skipped: cron_expr: '* * * * * *' has 6 fields" in caplog.text


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        ((Report("x"),), {"timezone": "Nowhere/Land"}, "timezone: unknown IANA time zone"),
        ((Report("x"),), {"missed_fire_policy": "all"}, "missed_fire_policy: must be one of"),
        ((Report("x"),), {"priority": 9}, "priority: must be an integer from 1 to 4"),
        ((Report("x"),), {"cron": "* * * * *"}, r"options: unknown option\(s\) cron"),
        (({"name": "x"},), {}, "args: must be a Report, got dict"),
    ],
)
def test_a_bad_schedule_is_refused_when_registered(
    args: tuple[object], options: dict[str, Any], message: str
) -> None:
    client = awa_fast.Client("postgresql://unused")
    with pytest.raises(ValidationError, match=message):
        client.periodic("s", "* * * * *", Report, *args, **options)
    client.periodic("s", "@daily", Report, Report("x"))
    with pytest.raises(ConfigError, match="periodic job 's' registered twice"):
        client.periodic("s", "@hourly", Report, Report("x"))


def test_a_registered_schedule_runs_its_jobs(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """End to end: the client writes its schedule when it starts, the leader enqueues the
    fire it owes (the schedule is backdated, as if registered two minutes ago), a handler
    runs it."""
    handled: list[tuple[str, Any]] = []

    async def main() -> None:
        client = awa_fast.AsyncClient(dsn)
        client.periodic("digest", "* * * * *", Report, Report("digest"), queue="cron")

        @client.task(Report, queue="cron")
        async def report(job: awa_fast.Job[Report]) -> None:
            handled.append((job.args.name, job.metadata["cron_name"]))

        try:
            await client.start({"cron": 1}, cron_interval=0.05)
            conn.execute("UPDATE awa_fast.cron_jobs SET created_at = now() - interval '2 minutes'")
            await await_until(lambda: handled, what="the periodic job to run")
        finally:
            await client.close()

    run(main())
    assert handled == [("digest", "digest")]
