"""Drop-in behaviour: programs written for the Awa SDK (awa-pg 0.6.9, ``import awa``) run
here as ``import awa_fast as awa`` and see what the SDK gives them. Each expectation below
was recorded by running the same program text against awa-pg 0.6.9 on its own schema."""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

import awa_fast as awa
from awa_fast.bridge import insert_job_sync
from awa_fast.db.dsn import with_database
from awa_fast.types import iso
from tests.helpers import free_port, job, run, run_until, settled

# ``sorted(n for n in dir(awa) if not n.startswith("_"))`` under awa-pg 0.6.9, with the
# exceptions its later releases added (ported code may name those in an except clause).
SDK_NAMES = [
    "AsyncClient",
    "AwaError",
    "BatchOperation",
    "BatchOperationFilter",
    "BatchOperationKind",
    "BatchOperationPreview",
    "BatchOperationState",
    "CallbackNotFound",
    "CallbackToken",
    "Cancel",
    "Client",
    "DatabaseError",
    "DlqEntry",
    "HealthCheck",
    "Job",
    "JobState",
    "PartitionedQueue",
    "QueueHealth",
    "QueueStat",
    "RawClient",
    "ResolveResult",
    "RetryAfter",
    "RetryFailedResult",
    "SchemaNotMigrated",
    "SerializationError",
    "Snooze",
    "SyncTransaction",
    "TerminalError",
    "Transaction",
    "UniqueConflict",
    "UnknownJobKind",
    "ValidationError",
    "WaitForCallback",
    "callback_contract",
    "client",
    "current_migration_version",
    "derive_kind",
    "init_telemetry",
    "migrate",
    "migrations",
    "migrations_range",
    "schema_patches",
    "shutdown_telemetry",
    "LiveRuntimesRequireExclusiveWindow",
    "RuntimeVersionFloorNotMet",
    "StorageNotFinalized",
]


def test_every_name_the_sdk_exports_is_here() -> None:
    assert [name for name in SDK_NAMES if not hasattr(awa, name)] == []
    exported = set(awa.__all__)
    assert [name for name in SDK_NAMES if name not in exported and name != "client"] == []


@pytest.mark.parametrize("name", SDK_NAMES[-3:])
def test_the_sdks_storage_and_migration_gate_errors_are_awa_errors(name: str) -> None:
    """Never raised here (one storage, no migration gates); an ``except`` naming one still
    runs, and catches nothing else."""
    error = getattr(awa, name)
    assert issubclass(error, awa.AwaError)
    with pytest.raises(awa.JobNotFound):
        try:
            raise awa.JobNotFound(1)
        except error:
            pytest.fail(f"{name} caught another error")


def test_importing_main_does_not_run_the_cli() -> None:
    """``import awa_fast.__main__`` (a doc tool, a test collector) runs no command: running
    one would exit the process, here a SystemExit out of the import."""
    module = importlib.import_module("awa_fast.__main__")
    assert callable(module.main)


def test_the_raw_client_is_both_clients_under_the_sdks_names(dsn: str) -> None:
    """The SDK's raw client: ``name_sync`` methods block, the others are awaited; its
    storage-engine methods say there is no such engine here."""
    raw = awa.RawClient(dsn)
    job = raw.insert_sync({"to": "ada"}, kind="send_email")
    assert raw.get_job_sync(job.id).state is awa.JobState.Available

    async def main() -> awa.JobRow | None:
        try:
            cancelled: awa.JobRow | None = await raw.cancel(job.id)
            return cancelled
        finally:
            await raw.close()

    cancelled = run(main())
    assert cancelled is not None and cancelled.state is awa.JobState.Cancelled
    with pytest.raises(AttributeError, match="queue storage engine has no counterpart"):
        raw.install_queue_storage_sync()


@pytest.mark.parametrize("where", ["no such database", "nobody listening"])
def test_a_database_out_of_reach_raises_database_error_at_once(
    dsn: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's client raises its DatabaseError on the spot (awa-pg 0.6.9: "error
    returned from database: database ... does not exist"); a pool would instead retry in
    the background, logging each failure, until its 30 s timeout."""
    url = (
        with_database(dsn, "no_such_database")
        if where == "no such database"
        else f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    )
    started = time.monotonic()
    with caplog.at_level(logging.WARNING), awa.Client(url) as client:
        with pytest.raises(awa.DatabaseError):
            client.insert({"to": "ada"}, kind="send_email")
        with pytest.raises(awa.DatabaseError):  # and again: nothing half-open is kept
            client.queue_stats()

    async def from_async() -> None:
        async with awa.AsyncClient(url) as client:
            await client.get_job(1)

    with caplog.at_level(logging.WARNING), pytest.raises(awa.DatabaseError):
        asyncio.run(from_async())
    assert time.monotonic() - started < 10
    assert [r.getMessage() for r in caplog.records if "connecting" in r.getMessage()] == []


def test_an_unknown_insert_keyword_is_a_type_error(dsn: str) -> None:
    """As a Python function raises it (awa-pg 0.6.9: "Client.insert() got an unexpected
    keyword argument 'queu'"), before anything is written."""
    typo: dict[str, Any] = {"queu": "x"}
    with awa.Client(dsn) as client:
        for insert in (client.insert, client.insert_many_copy, client.enqueue_many_copy):
            args = {"to": "ada"} if insert is client.insert else [{"to": "ada"}]
            with pytest.raises(TypeError, match="unexpected keyword argument 'queu'"):
                insert(args, kind="send_email", **typo)
        with psycopg.connect(dsn) as conn, pytest.raises(TypeError, match="'queu'"):
            insert_job_sync(conn, {"to": "ada"}, kind="send_email", **typo)

    async def from_async() -> None:
        async with awa.AsyncClient(dsn) as client:
            await client.insert({"to": "ada"}, kind="send_email", **typo)

    with pytest.raises(TypeError, match="insert\\(\\) got an unexpected keyword argument 'queu'"):
        run(from_async())
    with awa.Client(dsn) as client:
        assert client.list_jobs() == []


def test_cancel_without_a_reason_records_the_sdks(dsn: str) -> None:
    """awa-pg 0.6.9 records "cancelled: cancelled by handler" for a bare ``Cancel()``."""
    client = awa.AsyncClient(dsn)

    @client.task(kind="give_up")
    async def give_up(job: awa.Job[dict[str, str]]) -> awa.Cancel:
        return awa.Cancel()

    async def main() -> int:
        async with client:
            inserted = await client.insert({"why": "none"}, kind="give_up")
            await run_until(client, {"default": 1}, lambda: settled(dsn))
            return inserted.id

    cancelled = job(dsn, run(main()))
    assert (cancelled["state"], cancelled["errors"][-1]["error"]) == (
        "cancelled",
        "cancelled: cancelled by handler",
    )


def test_start_refuses_what_the_sdks_start_refuses(dsn: str) -> None:
    """awa-pg 0.6.9: AwaError "register at least one worker before starting the runtime";
    ValueError "start() must configure the worker queues declared via
    @client.worker(..., queue=...): a"."""

    async def main() -> None:
        async with awa.AsyncClient(dsn) as client:
            with pytest.raises(awa.AwaError, match="register at least one handler"):
                await client.start([("email", 2)])

            @client.task(kind="send_email", queue="email")
            async def send(job: awa.Job[dict[str, str]]) -> None: ...

            with pytest.raises(ValueError, match="queues its handlers were registered on: email"):
                await client.start([("reports", 2)])
            assert not (await client.health_check()).healthy  # nothing started

    run(main())


def test_progress_and_metadata_as_the_sdk_models_them(dsn: str) -> None:
    """What awa-pg 0.6.9 showed for the same handler: metadata updates under
    ``progress["metadata"]`` on the job at once and on its row after a flush, percent held
    to 0..100 (a negative one, which the SDK refuses with OverflowError, to 0 here), the
    progress kept for the retry and gone once the job completes."""
    seen: list[object] = []
    client = awa.AsyncClient(dsn)

    @client.task(kind="report")
    async def report(job: awa.Job[dict[str, int]]) -> awa.RetryAfter | None:
        seen.append(("start", job.attempt, job.progress))
        if job.attempt == 2:
            return None
        job.update_metadata({"a": 1})
        seen.append(("after update_metadata", job.progress))
        job.set_progress(200, "hi")
        seen.append(("after set_progress(200)", job.progress))
        job.set_progress(-5)
        seen.append(("after set_progress(-5)", job.progress))
        await job.flush_progress()
        seen.append(("row after flush", (await client.get_job(job.id)).progress))
        return awa.RetryAfter(0)

    async def main() -> tuple[awa.JobRow, awa.JobRow]:
        async with client:
            inserted = await client.insert({"n": 1}, kind="report")
            await run_until(
                client,
                {"default": 1},
                lambda: job(dsn, inserted.id)["state"] == "completed",
                promote_interval=0.01,
            )
            return inserted, await client.get_job(inserted.id)

    _, done = run(main())
    saved = {"message": "hi", "metadata": {"a": 1}, "percent": 0}
    assert seen == [
        ("start", 1, None),
        ("after update_metadata", {"metadata": {"a": 1}}),
        ("after set_progress(200)", {"message": "hi", "metadata": {"a": 1}, "percent": 100}),
        ("after set_progress(-5)", saved),
        ("row after flush", saved),
        ("start", 2, saved),  # the retry resumes from the checkpoint
    ]
    assert (done.state, done.attempt, done.progress) == (awa.JobState.Completed, 2, None)


def test_resume_external_runs_a_parked_job_again(dsn: str) -> None:
    """awa-pg 0.6.9, a handler that returned WaitForCallback(token): resume_external gives
    the job back as running, attempt 1; no handler carries it on, so once its heartbeat is
    stale it is rescued ("heartbeat stale") and attempt 2 runs. The payload stays on the
    job here, as its callback_result."""
    client = awa.AsyncClient(dsn)
    tokens: list[str] = []

    @client.task(kind="charge")
    async def charge(job: awa.Job[dict[str, int]]) -> awa.WaitForCallback | None:
        if job.attempt == 1:
            token = await job.register_callback(timeout_seconds=60)
            tokens.append(token.id)
            return awa.WaitForCallback(token)
        return None

    async def main() -> tuple[awa.JobRow, awa.JobRow]:
        async with client:
            row = await client.insert({"cents": 500}, kind="charge")
            await run_until(client, {"default": 1}, lambda: job(dsn, row.id)["callback_id"])
            resumed = await client.resume_external(tokens[0], {"paid": True})
            await run_until(
                client,
                {"default": 1},
                lambda: job(dsn, row.id)["state"] == "completed",
                heartbeat_staleness=0.5,
                backstop_interval=0.2,
                rescue_interval=0.1,
                promote_interval=0.05,
            )
            return resumed, await client.get_job(row.id)

    resumed, done = run(main())
    assert (resumed.state, resumed.attempt, resumed.callback_result) == (
        awa.JobState.Running,
        1,
        {"paid": True},
    )
    assert (done.state, done.attempt, done.callback_result) == ("completed", 2, {"paid": True})
    assert "heartbeat" in done.errors[-1]["error"]
    with awa.Client(dsn) as admin, pytest.raises(awa.CallbackNotFound):  # spent
        admin.resume_external(tokens[0], {"paid": True})


def test_times_are_the_sdks_iso_text(dsn: str) -> None:
    """awa-pg 0.6.9 gives a job's times as ISO 8601 text in UTC (created_at
    "2026-12-02T06:22:36.374637+00:00", finalized_at None until the job ends, deadline None
    on a row that has none), which ported code parses with ``datetime.fromisoformat``; the
    same instants are datetimes under ``datetimes``."""
    seen: list[tuple[object, ...]] = []
    client = awa.AsyncClient(dsn)

    @client.task(kind="stamp")
    async def stamp(job: awa.Job[dict[str, int]]) -> None:
        parsed = [datetime.fromisoformat(t) for t in (job.run_at, job.created_at, job.deadline)]
        times = job.datetimes
        seen.append((job.finalized_at, parsed == [times.run_at, times.created_at, times.deadline]))

    async def main() -> tuple[awa.JobRow, awa.JobRow]:
        async with client:
            inserted = await client.insert({"n": 1}, kind="stamp")
            await run_until(client, {"default": 1}, lambda: settled(dsn))
            return inserted, await client.get_job(inserted.id)

    inserted, done = run(main())
    assert seen == [(None, True)]
    assert isinstance(inserted.created_at, str) and inserted.created_at.endswith("+00:00")
    assert (inserted.finalized_at, inserted.deadline, inserted.deadline_at) == (None, None, None)
    assert datetime.fromisoformat(inserted.created_at) == inserted.datetimes.created_at
    assert done.finalized_at is not None and done.datetimes.finalized_at is not None
    assert datetime.fromisoformat(done.finalized_at) == done.datetimes.finalized_at
    assert done.datetimes.created_at.tzinfo is not None
    assert done.datetimes.finalized_at >= done.datetimes.created_at


PLUS_2 = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    ("at", "text"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, 374637, tzinfo=UTC), "2026-01-02T03:04:05.374637+00:00"),
        (datetime(2026, 1, 2, 3, 4, 5, 374000, tzinfo=UTC), "2026-01-02T03:04:05.374+00:00"),
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02T03:04:05+00:00"),
        (
            datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2))),
            "2026-01-02T03:04:05+00:00",
        ),
    ],
)
def test_times_read_as_the_sdk_writes_them(at: datetime, text: str) -> None:
    """The SDK's text (chrono's RFC 3339 in UTC): as many decimals as the second needs, in
    threes."""
    assert iso(at) == text
