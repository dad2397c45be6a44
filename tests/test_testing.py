"""awa_fast.testing, the Awa SDK's test helpers: ``work_one`` claims with the runner's
claim statement and applies every outcome through the committer's guarded transitions,
against a real Postgres; ``clean()`` empties every table; the SDK's documented usage runs
with its import changed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import awa_fast
import awa_fast.testing
from awa_fast.db.queries import Q
from awa_fast.testing import (
    DEFAULT_DATABASE_URL,
    AwaTestClient,
    HandlerJob,
    NoJob,
    WorkResult,
    get_database_url,
)
from awa_fast.types import JobRow
from tests.factories import insert_job
from tests.helpers import await_until, run, states
from tests.helpers import job as stored_job


@dataclass
class SendEmail:
    to: str
    subject: str


@dataclass
class Resize:
    width: int


EMAIL = SendEmail("a@example.com", "Hi")


@pytest.fixture
def tc(client: awa_fast.Client) -> AwaTestClient:
    return AwaTestClient(client)


def work(tc: AwaTestClient, handler: Any, args_type: type = SendEmail, **kw: Any) -> WorkResult:
    return run(tc.work_one(args_type, handler, **kw))


def job_of(result: WorkResult) -> JobRow:
    assert isinstance(result.job, JobRow), result
    return result.job


def returning(value: object) -> Callable[[awa_fast.Job[Any]], Awaitable[object]]:
    async def handler(job: awa_fast.Job[Any]) -> object:
        return value

    return handler


def raising(exc: Exception) -> Callable[[awa_fast.Job[Any]], Awaitable[object]]:
    async def handler(job: awa_fast.Job[Any]) -> object:
        raise exc

    return handler


# -- outcomes ---------------------------------------------------------------------------


def test_none_completes_the_job_the_handler_got_as_a_worker_would(
    tc: AwaTestClient, dsn: str
) -> None:
    inserted = run(tc.insert(EMAIL, tags=["t"], metadata={"m": 1}))
    seen: list[awa_fast.Job[Any]] = []

    async def handler(job: awa_fast.Job[SendEmail]) -> None:
        seen.append(job)

    result = work(tc, handler)
    assert result.is_completed() and result.outcome == "completed" and result.error is None
    job = job_of(result)
    assert (job.id, job.state, job.attempt, job.run_lease) == (inserted.id, "completed", 1, 1)
    assert job.finalized_at is not None
    [given] = seen
    assert isinstance(given, awa_fast.Job)
    assert given.args == EMAIL and given.kind == "send_email" and given.run_lease == 1
    # The fields of the SDK's HandlerJob, but deadline (see HandlerJob's docstring).
    assert (given.id, given.attempt, given.max_attempts, given.queue, given.priority) == (
        inserted.id,
        1,
        25,
        "default",
        2,
    )
    assert (given.tags, given.metadata, given.is_cancelled()) == (["t"], {"m": 1}, False)
    assert states(dsn) == {"completed": 1}


def test_plain_def_handler_runs_on_a_thread_and_completes(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    threads: list[str] = []

    def handler(job: awa_fast.Job[SendEmail]) -> None:
        threads.append(threading.current_thread().name)
        job.set_progress(50, "half")
        job.update_metadata({"sent": True})

    result = work(tc, handler)
    assert result.is_completed()
    assert threads and threads[0] != threading.main_thread().name
    job = job_of(result)
    assert job.progress is None and job.metadata == {"sent": True}  # completed: no checkpoint


def test_retry_after_makes_the_job_retryable_at_its_time(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    before = datetime.now(UTC)
    result = work(tc, returning(awa_fast.RetryAfter(30)))
    assert result.is_retryable() and result.error is None
    job = job_of(result)
    assert (job.state, job.attempt) == ("retryable", 1)
    assert before + timedelta(seconds=29) < job.datetimes.run_at < before + timedelta(seconds=60)
    assert run(tc.work_one(SendEmail, returning(None))).is_no_job()  # not due yet


def test_retry_after_on_the_last_attempt_fails_the_job(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL, max_attempts=1))
    result = work(tc, returning(awa_fast.RetryAfter(30)))
    assert result.is_failed()
    assert result.error == "RetryAfter(30.0) returned on the final attempt"
    assert job_of(result).state == "failed"


def test_snooze_schedules_the_job_and_gives_the_attempt_back(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    before = datetime.now(UTC)
    result = work(tc, returning(awa_fast.Snooze(60)))
    assert result.is_snoozed() and result.outcome == "snoozed" and result.error is None
    job = job_of(result)
    assert (job.state, job.attempt, job.run_lease) == ("scheduled", 0, 1)
    assert job.datetimes.run_at > before + timedelta(seconds=59)


def test_cancel_cancels_the_job_with_its_reason(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    result = work(tc, returning(awa_fast.Cancel("not needed")))
    assert result.is_cancelled() and result.error == "not needed"
    job = job_of(result)
    assert job.state == "cancelled" and job.errors[-1]["error"] == "cancelled: not needed"


def test_wait_for_callback_parks_the_job_until_the_callback_resolves_it(
    tc: AwaTestClient, client: awa_fast.Client
) -> None:
    run(tc.insert(EMAIL))
    tokens: list[awa_fast.CallbackToken] = []

    async def handler(job: awa_fast.Job[SendEmail]) -> awa_fast.WaitForCallback:
        token = await job.register_callback(timeout_seconds=600)
        tokens.append(token)
        return awa_fast.WaitForCallback(token)

    result = work(tc, handler)
    assert result.is_waiting_external() and result.outcome == "waiting_external"
    job = job_of(result)
    assert job.state == "waiting_external" and job.callback_id == tokens[0].id
    resolved = client.complete_external(tokens[0].id, {"ok": True})
    assert resolved is not None and resolved.state == "completed"


def test_wait_for_callback_without_registering_one_fails_the_job(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    result = work(tc, returning(awa_fast.WaitForCallback("no-such-token")))
    assert result.is_failed()
    assert result.error == "WaitForCallback returned without calling register_callback"


def test_terminal_error_fails_the_job_at_once(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    result = work(tc, raising(awa_fast.TerminalError("card declined")))
    assert result.is_failed() and result.error == "card declined"  # str(exc), as the SDK's
    job = job_of(result)
    assert (job.state, job.attempt, job.max_attempts) == ("failed", 1, 25)
    assert job.errors[-1]["error"] == "TerminalError: card declined"
    assert job.errors[-1]["terminal"] is True


def test_an_exception_with_attempts_left_retries_with_backoff(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    before = datetime.now(UTC)
    result = work(tc, raising(ValueError("smtp down")))
    assert result.is_retryable() and result.error == "smtp down"
    job = job_of(result)
    assert (job.state, job.attempt) == ("retryable", 1)
    assert job.datetimes.run_at > before  # the runner's backoff: about a second for a first attempt
    assert job.errors[-1]["error"] == "ValueError: smtp down" and "traceback" in job.errors[-1]


def test_an_exception_on_the_last_attempt_fails_the_job(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL, max_attempts=1))

    def handler(job: awa_fast.Job[SendEmail]) -> None:
        raise ValueError("smtp down")

    result = work(tc, handler)
    assert result.is_failed() and result.error == "smtp down"
    assert job_of(result).state == "failed"


def test_a_result_of_no_outcome_type_fails_the_job(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    result = work(tc, returning(42))  # the SDK's work_one raised TypeError here
    assert result.is_failed()
    assert result.error is not None and result.error.startswith("handler returned int;")


def test_args_the_type_cannot_decode_fail_the_job(tc: AwaTestClient) -> None:
    run(tc.insert({"width": "wide"}, kind="resize"))
    result = work(tc, returning(None), Resize)
    assert result.is_failed()
    assert result.error is not None and result.error.startswith("undecodable args for kind")


# -- what is claimed ---------------------------------------------------------------------


def test_no_job_when_nothing_matches(tc: AwaTestClient) -> None:
    result = work(tc, returning(None))
    assert result == WorkResult(NoJob, "no_job")
    assert result.is_no_job() and not result.job and repr(result.job) == "NoJob"


def test_only_a_job_of_the_kind_is_claimed_and_others_are_left_untouched(
    tc: AwaTestClient, dsn: str
) -> None:
    email = run(tc.insert(EMAIL))  # ahead of the resize job in claim order
    resize = run(tc.insert(Resize(100)))
    result = work(tc, returning(None), Resize)
    assert job_of(result).id == resize.id and result.is_completed()
    row = stored_job(dsn, email.id)
    assert (row["state"], row["attempt"], row["run_lease"]) == ("available", 0, 0)
    assert work(tc, returning(None), Resize).is_no_job()


def test_kind_overrides_the_args_type_kind(tc: AwaTestClient) -> None:
    inserted = run(tc.insert({"n": 1}, kind="custom"))
    seen: list[object] = []

    async def handler(job: awa_fast.Job[dict[str, int]]) -> None:
        seen.append(job.args)

    result = work(tc, handler, dict, kind="custom")
    assert job_of(result).id == inserted.id and seen == [{"n": 1}]


def test_only_the_given_queue_is_claimed(tc: AwaTestClient, dsn: str) -> None:
    inserted = run(tc.insert(EMAIL, queue="mail"))
    assert work(tc, returning(None)).is_no_job()
    assert stored_job(dsn, inserted.id)["run_lease"] == 0
    result = work(tc, returning(None), queue="mail")
    assert job_of(result).id == inserted.id and result.is_completed()


def test_jobs_are_claimed_in_the_runners_order_priority_first(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL, priority=3))
    urgent = run(tc.insert(EMAIL, priority=1))
    assert job_of(work(tc, returning(None))).id == urgent.id


def test_a_paused_queue_gives_no_job_as_it_gives_a_worker_none(
    tc: AwaTestClient, client: awa_fast.Client
) -> None:
    run(tc.insert(EMAIL))
    client.pause_queue("default")
    assert work(tc, returning(None)).is_no_job()
    client.resume_queue("default")
    assert work(tc, returning(None)).is_completed()


# -- races -------------------------------------------------------------------------------


def test_two_work_one_racing_for_one_job_run_it_once(tc: AwaTestClient) -> None:
    run(tc.insert(EMAIL))
    ran: list[int] = []

    async def handler(job: awa_fast.Job[SendEmail]) -> None:
        ran.append(job.id)

    async def race() -> list[WorkResult]:
        return list(await asyncio.gather(*(tc.work_one(SendEmail, handler) for _ in range(2))))

    outcomes = sorted(r.outcome for r in run(race()))
    assert outcomes == ["completed", "no_job"] and len(ran) == 1


def test_work_one_for_different_kinds_of_one_queue_each_get_their_own(
    tc: AwaTestClient, dsn: str
) -> None:
    for n in range(4):  # interleaved in claim order
        run(tc.insert(Resize(n)))
        run(tc.insert(EMAIL))

    async def race() -> list[WorkResult]:
        calls = [tc.work_one(t, returning(None)) for t in (Resize, SendEmail) * 4]
        return list(await asyncio.gather(*calls))

    results = run(race())
    assert all(r.is_completed() for r in results)
    assert {job_of(r).kind for r in results[0::2]} == {"resize"}
    assert {job_of(r).kind for r in results[1::2]} == {"send_email"}
    assert states(dsn) == {"completed": 8}
    with psycopg.connect(dsn) as conn:  # each claimed once: none given back
        row = conn.execute("SELECT max(run_lease) FROM awa_fast.jobs").fetchone()
    assert row == (1,)


def test_work_one_beside_a_running_worker_runs_each_job_once(dsn: str) -> None:
    """work_one and a runner's claims race for the same jobs: each runs once."""

    async def scenario() -> tuple[list[int], list[int], list[int]]:
        by_worker: list[int] = []
        by_test: list[int] = []
        async with awa_fast.AsyncClient(dsn) as client:

            @client.task(SendEmail)
            async def handle(job: awa_fast.Job[SendEmail]) -> None:
                by_worker.append(job.id)

            async def handler(job: awa_fast.Job[SendEmail]) -> None:
                by_test.append(job.id)

            tc = AwaTestClient(client)
            ids = await client.insert_many([EMAIL] * 60)
            await client.start({"default": 2})
            try:
                while not (await tc.work_one(SendEmail, handler)).is_no_job():
                    pass
                await await_until(lambda: states(dsn) == {"completed": 60}, what="all done")
            finally:
                await client.shutdown()
        return ids, by_worker, by_test

    ids, by_worker, by_test = run(scenario())
    assert sorted(by_worker + by_test) == ids


def test_an_outcome_for_a_job_cancelled_meanwhile_is_dropped(
    tc: AwaTestClient, client: awa_fast.Client
) -> None:
    run(tc.insert(EMAIL))

    def handler(job: awa_fast.Job[SendEmail]) -> None:
        assert client.cancel(job.id) is not None  # an admin, while the handler runs

    result = work(tc, handler)
    assert result.is_cancelled()
    job = job_of(result)
    assert job.state == "cancelled" and job.errors[-1]["error"] == "cancelled: by admin"


# -- the client's follow-ups and hooks ---------------------------------------------------


def test_followups_and_hooks_of_the_client_run_as_a_worker_runs_them(
    tc: AwaTestClient, client: awa_fast.Client, dsn: str
) -> None:
    events: list[str] = []
    client.on_event(SendEmail, lambda event: events.append(str(event.type)))
    client.on_completed_enqueue(SendEmail, lambda args, row, ctx: Resize(len(args.to)))
    run(tc.insert(EMAIL))
    assert work(tc, returning(None)).is_completed()
    assert events == ["Started", "Completed"]  # delivered before work_one returned
    followup = work(tc, returning(None), Resize)
    assert followup.is_completed()
    assert job_of(followup).args == {"width": len(EMAIL.to)}
    assert states(dsn) == {"completed": 2}


# -- clients, clean, the fixture ---------------------------------------------------------


def test_dict_args_without_a_kind_is_refused_before_anything_is_claimed(
    tc: AwaTestClient, dsn: str
) -> None:
    run(tc.insert({"n": 1}, kind="custom"))
    with pytest.raises(awa_fast.ConfigError, match="explicit kind="):
        work(tc, returning(None), dict)
    assert states(dsn) == {"available": 1}


def test_an_async_client_works_as_the_sync_one(dsn: str) -> None:
    async def scenario() -> WorkResult:
        async with awa_fast.AsyncClient(dsn) as client:
            tc = AwaTestClient(client)
            assert tc.client is client
            await tc.migrate()
            await tc.insert(EMAIL)
            return await tc.work_one(SendEmail, returning(awa_fast.Snooze(5)))

    result = run(scenario())
    assert result.is_snoozed() and job_of(result).state == "scheduled"


def test_clean_empties_every_table_in_one_statement(
    tc: AwaTestClient, client: awa_fast.Client, dsn: str
) -> None:
    run(tc.insert(EMAIL))  # jobs_hot
    run(tc.insert(EMAIL, run_at=datetime.now(UTC) + timedelta(hours=1)))  # jobs_deferred
    run(tc.insert(EMAIL, unique={"by_args": True}))  # unique_claims
    client.pause_queue("default")  # queue_meta
    with psycopg.connect(dsn, autocommit=True) as conn:
        insert_job(conn, state="completed")  # jobs_done
        conn.execute(Q.host_register, {"name": "h", "queues": Jsonb({})})
        conn.execute(
            "INSERT INTO awa_fast.dlq (kind, queue, dlq_reason) VALUES ('k', 'default', 'r')"
        )
        conn.execute(
            "INSERT INTO awa_fast.cron_jobs (name, cron_expr, timezone, kind, queue, args,"
            " priority, max_attempts, tags, metadata, missed_fire_policy) VALUES"
            " ('c', '* * * * *', 'UTC', 'k', 'default', '{}', 2, 25, '{}', '{}', 'coalesce')"
        )
    tables = [
        "jobs_hot",
        "jobs_deferred",
        "jobs_done",
        "dlq",
        "queue_meta",
        "unique_claims",
        "hosts",
        "cron_jobs",
    ]
    assert all(_count(dsn, t) > 0 for t in tables)
    run(tc.clean())
    assert {t: _count(dsn, t) for t in tables} == dict.fromkeys(tables, 0)
    assert _count(dsn, "schema_version") == len(awa_fast.db.migrate.migrations())
    assert run(tc.insert(EMAIL)).state == "available"  # still usable


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM awa_fast.{table}").fetchone()
        assert row is not None
        return int(row[0])


def test_get_database_url_reads_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert get_database_url() == DEFAULT_DATABASE_URL
    monkeypatch.setenv("DATABASE_URL", "postgresql://elsewhere/db")
    assert get_database_url() == "postgresql://elsewhere/db"


def test_handler_job_stands_in_for_a_job_without_a_database() -> None:
    async def handler(job: HandlerJob[SendEmail]) -> str:
        return f"{job.args.to} {job.attempt} {job.is_cancelled()}"

    job = HandlerJob(EMAIL, 1, 1, 25, "default", 2, None, {}, [])
    assert run(handler(job)) == "a@example.com 1 False"


# The usage in awa.testing's module docstring, verbatim but for `awa` -> `awa_fast` in its
# import, with the SendEmail and handler it assumes. It runs in a pytest of its own, so
# that the fixture is imported as the SDK documents; that pytest runs `async def` tests
# with the hook below, as pytest-asyncio would (it is not installed here).
SDK_USAGE = """
import pytest
from awa_fast.testing import awa_client

from dataclasses import dataclass


@dataclass
class SendEmail:
    to: str
    subject: str


async def handle_send_email(job):
    assert job.args.to == "a@b.com"


@pytest.fixture
async def client(awa_client):
    return awa_client

async def test_send_email(awa_client):
    await awa_client.insert(SendEmail(to="a@b.com", subject="Hi"))
    result = await awa_client.work_one(SendEmail, handler=handle_send_email)
    assert result.is_completed()
"""

ASYNC_TESTS = """
import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        names = pyfuncitem._fixtureinfo.argnames
        asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))
        return True
    return None
"""


def test_the_sdks_documented_usage_runs_with_the_import_changed(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:  # the fixture cleans it away first
        insert_job(conn, kind="send_email", args={"to": "old@example.com", "subject": "x"})
    (tmp_path / "test_sdk_usage.py").write_text(SDK_USAGE)
    (tmp_path / "conftest.py").write_text(textwrap.dedent(ASYNC_TESTS))
    env = {"DATABASE_URL": dsn, "PYTHONPATH": str(Path(awa_fast.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert states(dsn) == {}  # the fixture cleaned up after the test
