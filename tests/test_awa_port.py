"""Code written for the Awa Python SDK (awa-pg 0.6) runs with its import changed: the
SDK's names, option names and calling conventions, as its docs and stubs give them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_fast as awa
from awa_fast.db.dsn import with_database
from awa_fast.errors import ConfigError
from awa_fast.runtime.config import RunnerConfig, parse_queues
from awa_fast.runtime.options import AWA_OPTIONS, runner_config
from tests.factories import finish_jobs
from tests.helpers import run


@dataclass
class SendEmail:
    to: str
    subject: str


# What awa-pg 0.6.9's awa.derive_kind returned for these names.
@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("SendEmail", "send_email"),
        ("HTTPPing", "http_ping"),
        ("ABC", "abc"),
        ("sendEmail", "send_email"),
        ("Send_Email", "send_email"),
        ("S3Upload", "s3_upload"),
        ("Upload2S3", "upload2_s3"),
        ("already_snake", "already_snake"),
    ],
)
def test_derive_kind_names_kinds_as_the_sdk_does(name: str, kind: str) -> None:
    assert awa.derive_kind(name) == kind
    assert awa.derive_kind(type(name, (), {})) == kind


def test_job_states_have_the_sdk_names_and_equal_their_text(client: awa.Client) -> None:
    assert [s.name for s in awa.JobState] == [
        "Scheduled",
        "Available",
        "Running",
        "WaitingExternal",
        "Retryable",
        "Completed",
        "Failed",
        "Cancelled",
    ]
    job = client.insert(SendEmail("a@example.com", "hi"))
    assert job.state is awa.JobState.Available
    assert job.state == "available"
    cancelled = client.cancel(job.id)
    assert cancelled is not None and cancelled.state is awa.JobState.Cancelled


def test_sdk_runner_options_become_runner_config_fields() -> None:
    config = runner_config(
        {
            "poll_interval_ms": 200,
            "heartbeat_interval_ms": 2500,
            "completed_retention_hours": 2,
            "cleanup_batch_size": 500,
            "descriptor_retention_days": 7,
            "heartbeat_rescue_interval_ms": 3000,
            "deadline_rescue_interval_ms": 1500,  # the shortest rescue interval wins
            "callback_rescue_interval_ms": None,  # None: the default, as in the SDK
            "global_max_workers": None,
            "claimers": 3,  # awa-fast's own names mix in
        }
    )
    assert config.poll_interval == pytest.approx(0.2)
    assert config.heartbeat_interval == pytest.approx(2.5)
    assert config.completed_retention == pytest.approx(7200.0)
    assert config.cleanup_batch == 500
    assert config.descriptor_retention == pytest.approx(7 * 86400.0)
    assert config.rescue_interval == pytest.approx(1.5)
    assert config.claimers == 3
    assert config.failed_retention == RunnerConfig().failed_retention
    assert {field for field, _ in AWA_OPTIONS.values()} <= {
        f for f in RunnerConfig.__dataclass_fields__
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"poll_interval": 1.0, "poll_interval_ms": 200}, "poll_interval: given twice"),
        ({"poll_interval_ms": "200"}, "poll_interval_ms must be a number, got '200'"),
        ({"cleanup_batch_size": 10.5}, "cleanup_batch_size must be an integer"),
        ({"poll_intervall": 1.0}, "unknown runner option 'poll_intervall'; the options are"),
        ({"poll_interval_ms": 0}, "poll_interval must be > 0 seconds"),
        (
            {"descriptor_retention_days": -1},
            r"descriptor_retention_days must be a non-negative finite number, got -1",
        ),
        ({"descriptor_retention_days": float("nan")}, "descriptor_retention_days must be a non-"),
        ({"descriptor_retention_days": float("inf")}, "descriptor_retention_days must be a non-"),
        ({"descriptor_retention_days": True}, "descriptor_retention_days must be a number"),
        ({"descriptor_retention_days": "30"}, "descriptor_retention_days must be a number"),
        (
            {"descriptor_retention": 60.0, "descriptor_retention_days": 1},
            "descriptor_retention: given twice",
        ),
    ],
)
def test_runner_options_that_cannot_be_honoured_are_refused_by_name(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        runner_config(options)


def test_descriptor_retention_days_0_disables_retention_and_none_keeps_the_default() -> None:
    """The SDK's: 0 disables retention (a catalog managed elsewhere); None, as any SDK
    option given as None, keeps the default of 30 days."""
    assert runner_config({"descriptor_retention_days": 0}).descriptor_retention == 0
    default = runner_config({"descriptor_retention_days": None}).descriptor_retention
    assert default == RunnerConfig().descriptor_retention == 30 * 86400.0
    half_day = runner_config({"descriptor_retention_days": 0.5}).descriptor_retention
    assert half_day == pytest.approx(43200.0)


def test_weighted_queue_keys_need_the_global_pool() -> None:
    assert parse_queues([{"name": "email", "max_workers": 4}, ("bulk", 2)]) == {
        "email": 4,
        "bulk": 2,
    }
    with pytest.raises(ConfigError, match=r"queue 'email': min_workers, weight need global_"):
        parse_queues([{"name": "email", "min_workers": 1, "weight": 3}])
    with pytest.raises(ConfigError, match=r"queue 'email': unknown key\(s\) max_worker;"):
        parse_queues([{"name": "email", "max_worker": 4}])


def test_sdk_queue_dicts_set_rate_limits_deadlines_and_retention_per_queue() -> None:
    queues = [
        {"name": "email", "max_workers": 4, "rate_limit": (10.0, 5)},
        {"name": "reports", "max_workers": 2, "deadline_duration_ms": 90_000},
        {"name": "audit", "max_workers": 1, "retention": {"failed_hours": 1}},
        ("bulk", 8),
    ]
    config = runner_config({"completed_retention_hours": 2}, queues=queues)
    assert config.queue_rate_limits == {"email": (10.0, 5)}
    assert config.queue_deadlines == {"reports": 90.0}
    # A retention left out keeps the runner's: 2 h completed here, failed the default.
    assert config.queue_retention == {"audit": (7200.0, 3600.0)}
    assert config.deadline_for("reports") == 90.0


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"rate_limit": 10}, r"rate_limit must be a \(max_rate: .* got 10 for queue 'q'"),
        ({"rate_limit": (0, 5)}, "rate_limit max_rate must be > 0.0, got 0 for queue 'q'"),
        ({"rate_limit": (5, 0)}, "rate_limit burst must be an integer >= 1, got 0 for queue 'q'"),
        ({"rate_limit": (5, 2.5)}, r"rate_limit must be a \(max_rate: .* got \(5, 2.5\) for"),
        ({"deadline_duration_ms": -1}, "queue 'q': deadline_duration_ms must be a number > 0"),
        ({"retention": {"completed_days": 1}}, "queue 'q': retention must be a dict of"),
        ({"retention": {"failed_hours": "1"}}, "queue 'q': retention failed_hours must be"),
    ],
)
def test_bad_per_queue_settings_are_refused_naming_the_queue(
    entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        runner_config({}, queues=[{"name": "q", "max_workers": 1, **entry}])


def test_a_queue_setting_given_in_two_places_is_refused() -> None:
    with pytest.raises(ConfigError, match="queue_rate_limits: queue\\(s\\) q given in two places"):
        runner_config(
            {"queue_rate_limits": {"q": (1.0, 1)}},
            queues=[{"name": "q", "max_workers": 1, "rate_limit": (2.0, 2)}],
        )


def test_the_sdk_worker_lifecycle_runs_jobs(dsn: str) -> None:
    """The worker lifecycle of the SDK's AsyncClient docstring: ``await migrate()``, the
    deprecated ``worker`` decorator, tuple queue configs and the SDK's option names,
    ``shutdown(timeout_ms=)``."""
    handled: list[str] = []

    async def main() -> awa.JobRow | None:
        client = awa.AsyncClient(dsn)
        assert await client.migrate() == []
        with pytest.deprecated_call():

            @client.worker(SendEmail, queue="email")
            async def handle(job: awa.Job[SendEmail]) -> None:
                handled.append(job.args.to)

        await client.start([("email", 2)], poll_interval_ms=200, heartbeat_interval_ms=1000)
        job = await client.insert(SendEmail("ada@example.com", "hi"), queue="email")
        while (await client.get_job(job.id)).state != awa.JobState.Completed:
            await asyncio.sleep(0.02)
        await client.shutdown(timeout_ms=2000)
        finished = await client.get_job(job.id)
        await client.close()
        return finished

    finished = run(main())
    assert handled == ["ada@example.com"]
    assert finished is not None and finished.state is awa.JobState.Completed


def test_sdk_bulk_inserts_return_jobs_or_a_count(dsn: str) -> None:
    emails = [SendEmail(f"u{i}@example.com", "news") for i in range(5)]
    with awa.Client(dsn) as client:
        jobs = client.insert_many_copy(emails, queue="news", priority=1)
        assert [j.args["to"] for j in jobs] == [e.to for e in emails]
        assert {(j.queue, j.priority, j.state) for j in jobs} == {("news", 1, "available")}
        assert client.enqueue_many_copy(emails, queue="news") == 5

    async def main() -> tuple[list[awa.JobRow], int]:
        async with awa.AsyncClient(dsn) as client:
            return (
                await client.insert_many_copy(emails[:2], kind="raw_email"),
                await client.enqueue_many_copy(emails[:3]),
            )

    rows, count = run(main())
    assert [(r.kind, r.args["to"]) for r in rows] == [("raw_email", e.to) for e in emails[:2]]
    assert count == 3
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM awa_fast.jobs").fetchone()
    assert row == (15,)


def test_sdk_per_job_opts_route_jobs_of_one_bulk_insert(dsn: str) -> None:
    """``opts`` (the SDK's): one entry per job, None or a queue / ordering key of its own
    over the batch's options; anything else in an entry is refused, naming it."""
    emails = [SendEmail(f"u{i}@example.com", "news") for i in range(3)]
    routes = [{"queue": "eu"}, None, {"queue": "us", "ordering_key": "tenant-7"}]
    with awa.Client(dsn) as client:
        jobs = client.insert_many_copy(emails, queue="news", priority=1, opts=routes)
        assert [(j.queue, j.priority) for j in jobs] == [("eu", 1), ("news", 1), ("us", 1)]
        with pytest.raises(awa.ValidationError) as extra:
            client.enqueue_many_copy(emails, opts=[None, {"priority": 4}, None])
        assert extra.value.field == "opts[1]" and "priority" in str(extra.value)
        with pytest.raises(awa.ValidationError, match="one entry per job"):
            client.insert_many_copy(emails, opts=[None])

    async def main() -> int:
        async with awa.AsyncClient(dsn) as client:
            return await client.enqueue_many_copy(emails[:2], opts=[None, {"queue": "eu"}])

    assert run(main()) == 2
    with psycopg.connect(dsn) as conn:
        counted = conn.execute(
            "SELECT queue, count(*) FROM awa_fast.jobs GROUP BY queue ORDER BY queue"
        ).fetchall()
    assert counted == [("default", 1), ("eu", 2), ("news", 1), ("us", 1)]


def test_module_migrate_is_awaited_as_the_sdks_is(server_url: str) -> None:
    """``await awa.migrate(url)``, as code written for the SDK says it, migrates and gives
    the versions applied; called plainly it does the same."""
    name = "awa_fast_port_await_migrate"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    url = with_database(server_url, name)

    async def main() -> list[int]:
        return await awa.migrate(url)

    try:
        assert run(main()) == list(range(1, awa.current_migration_version() + 1))
        assert awa.migrate(url) == []
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_ordering_key_is_checked_and_stores_nothing_else(client: awa.Client) -> None:
    plain = client.insert(SendEmail("a@example.com", "hi"), queue="q")
    keyed = client.insert(SendEmail("a@example.com", "hi"), queue="q", ordering_key=b"cust-42")
    also = client.insert(SendEmail("a@example.com", "hi"), queue="q", ordering_key="cust-42")
    assert {(j.queue, j.kind, str(j.args)) for j in (plain, keyed, also)} == {
        ("q", "send_email", str(plain.args))
    }
    with pytest.raises(awa.ValidationError, match="ordering_key: must be bytes or str, got int"):
        client.insert(SendEmail("a@example.com", "hi"), ordering_key=42)  # type: ignore[typeddict-item]
    assert len(client.list_jobs(queue="q")) == 3


def test_args_that_cannot_be_encoded_raise_serialization_error(client: awa.Client) -> None:
    with pytest.raises(awa.SerializationError, match="args: not JSON-serialisable") as raised:
        client.insert(SendEmail("a@example.com", object()))  # type: ignore[arg-type]
    assert isinstance(raised.value, awa.ValidationError) and raised.value.field == "args"
    assert client.list_jobs() == []


def test_the_sdk_stats_pattern_flush_then_read_counts_what_is_there(client: awa.Client) -> None:
    """SDK tests flush the admin counters before queue_stats(); here there are none to
    flush, and the stats read right after an insert already count it."""
    client.insert(SendEmail("a@example.com", "hi"), queue="stats")
    client.flush_admin_metadata()
    [stat] = [s for s in client.queue_stats() if s.queue == "stats"]
    assert (stat.available, stat.total_queued) == (1, 1)


def test_sdk_names_for_errors_stats_and_the_schema_version(dsn: str, client: awa.Client) -> None:
    """Ported ``except awa.DatabaseError`` clauses catch what the database raised, and
    ``except awa.UnknownJobKind`` ones let other errors pass (an except clause naming a
    missing attribute would itself raise, hiding the error); the admin types and the schema
    version are named as in the SDK."""
    with pytest.raises(awa.DatabaseError):
        awa.migrate(with_database(dsn, "no_such_db"))
    with pytest.raises(awa.JobNotFound):
        try:
            client.get_job(-1)
        except awa.UnknownJobKind:  # evaluated as the error passes; matches nothing
            pytest.fail("get_job raised UnknownJobKind")
    client.insert(SendEmail("a@example.com", "hi"))
    assert all(isinstance(stat, awa.QueueStat) for stat in client.queue_stats())
    with psycopg.connect(dsn) as conn:
        [(version,)] = conn.execute("SELECT max(version) FROM awa_fast.schema_version").fetchall()
    assert awa.current_migration_version() == version


def test_storage_status_is_the_sdks_report_of_one_engine_and_its_live_backlog(
    dsn: str, client: awa.Client, conn: Any
) -> None:
    """Ported monitoring reads ``storage_status()`` as the SDK's JSON for a cluster on its
    canonical engine: active since the schema was installed, every unfinished job in the
    backlog (a finished one is not), and a blocker that says why no transition can start."""
    client.insert(SendEmail("a@example.com", "due"))
    client.insert(
        SendEmail("b@example.com", "later"), run_at=datetime.now(UTC) + timedelta(hours=1)
    )
    finished = client.insert(SendEmail("c@example.com", "done"))
    finish_jobs(conn, "completed", [finished.id])
    report = json.loads(client.storage_status())
    [(installed_at,)] = conn.execute(
        "SELECT applied_at FROM awa_fast.schema_version WHERE version = 1"
    ).fetchall()
    assert datetime.fromisoformat(report["entered_at"]) == installed_at
    assert report["canonical_live_backlog"] == 2
    assert (report["current_engine"], report["active_engine"], report["state"]) == (
        "canonical",
        "canonical",
        "canonical",
    )
    assert report["can_enter_mixed_transition"] is False and report["can_finalize"] is False
    assert report["enter_mixed_transition_blockers"] == [
        "awa-fast has one storage engine: there is no queue storage to move to"
    ]

    async def from_async() -> str:
        async with awa.AsyncClient(dsn) as async_client:
            return await async_client.storage_status()

    assert json.loads(asyncio.run(from_async())) == report


def test_retry_failed_returns_the_sdks_result(client: awa.Client, conn: Any) -> None:
    """Ported code reads retry_failed's result as the SDK's (awa's own CLI does this):
    ``jobs``, ``matched``, and ``pruned_failed_count``, None when filtering by kind."""
    failed = client.insert(SendEmail("a@example.com", "hi"), queue="mail").id
    finish_jobs(conn, "failed", [failed])
    outcome = client.retry_failed(queue="mail")
    retried = len(outcome.jobs)
    message = f"Retried {retried} failed jobs"
    if outcome.matched != retried:
        message += f" (matched {outcome.matched})"
    if outcome.pruned_failed_count is not None and outcome.pruned_failed_count > 0:
        message += f"; {outcome.pruned_failed_count} failed rows have been pruned"
    assert message == "Retried 1 failed jobs"
    assert isinstance(outcome, awa.RetryFailedResult)
    assert [(j.id, j.state) for j in outcome.jobs] == [(failed, awa.JobState.Available)]
    assert client.retry_failed(kind="send_email").pruned_failed_count is None
