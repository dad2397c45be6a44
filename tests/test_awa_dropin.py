"""Drop-in behaviour: programs written for the Awa SDK (awa-pg 0.6.9, ``import awa``) run
here as ``import awa_fast as awa`` and see what the SDK gives them. Each expectation below
was recorded by running the same program text against awa-pg 0.6.9 on its own schema."""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

import awa_fast as awa
from awa_fast.bridge import insert_job_sync
from awa_fast.db.dsn import with_database
from awa_fast.runtime.config import RunnerConfig, parse_queues
from awa_fast.runtime.options import runner_config
from awa_fast.types import iso
from tests.helpers import await_until, free_port, job, run, run_until, settled, states

# ``sorted(n for n in dir(awa) if not n.startswith("_"))`` under awa-pg 0.6.9, with the
# exceptions its later releases added (ported code may name those in an except clause).
SDK_NAMES = """
    AsyncClient AwaError BatchOperation BatchOperationFilter BatchOperationKind
    BatchOperationPreview BatchOperationState CallbackNotFound CallbackToken Cancel Client
    DatabaseError DlqEntry HealthCheck Job JobState PartitionedQueue QueueHealth QueueStat
    RawClient ResolveResult RetryAfter RetryFailedResult SchemaNotMigrated
    SerializationError Snooze SyncTransaction TerminalError Transaction UniqueConflict
    UnknownJobKind ValidationError WaitForCallback callback_contract client
    current_migration_version derive_kind init_telemetry migrate migrations
    migrations_range schema_patches shutdown_telemetry
    LiveRuntimesRequireExclusiveWindow RuntimeVersionFloorNotMet StorageNotFinalized
""".split()  # noqa: SIM905 (the recorded listing, as printed)


def sdk(words: str) -> str:
    """A pattern of a message that opens with the Awa SDK's ``words``."""
    return f"^{re.escape(words)}"


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
    # awa-pg 0.6.9: ``awa.RawClient is awa._awa.Client``, where its tests also read the
    # callback contract's constants and ``derive_kind``
    assert awa.RawClient is awa._awa.Client is awa._awa.RawClient
    assert awa._awa.CALLBACK_SIGNATURE_HEADER == awa.callback_contract.SIGNATURE_HEADER
    assert awa._awa.CALLBACK_DEFAULT_PATH_PREFIX == awa.callback_contract.DEFAULT_PATH_PREFIX
    assert awa._awa.derive_kind("SendEmail") == "send_email"
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
        with client.transaction() as tx:
            for tx_insert in (tx.insert, tx.insert_many):
                tx_args = {"to": "ada"} if tx_insert is tx.insert else [{"to": "ada"}]
                with pytest.raises(TypeError, match="unexpected keyword argument 'queu'"):
                    tx_insert(tx_args, kind="send_email", **typo)

    async def from_async() -> None:
        async with awa.AsyncClient(dsn) as client:
            await client.insert({"to": "ada"}, kind="send_email", **typo)

    with pytest.raises(TypeError, match="insert\\(\\) got an unexpected keyword argument 'queu'"):
        run(from_async())
    with awa.Client(dsn) as client:
        assert client.list_jobs() == []


def test_a_nul_in_metadata_is_refused_in_the_sdks_words(dsn: str) -> None:
    """awa-pg 0.6.9's bridge raised ValueError "Job args must not contain null bytes
    (\\u0000): Postgres JSONB does not support them", its insert_many_copy ValidationError
    "job args/metadata must not contain null bytes (\\u0000): ..." (its insert, Postgres'
    error). Here each raises ValidationError (a ValueError) naming the field, before
    anything is written."""
    words = re.escape("metadata: must not contain null bytes (\\u0000)")
    with awa.Client(dsn) as client:
        for bad in ({"note": "a\x00b"}, {"a\x00b": 1}):
            with pytest.raises(awa.ValidationError, match=words):
                client.insert({"to": "ada"}, kind="send_email", metadata=bad)
            with pytest.raises(awa.ValidationError, match=words):
                client.insert_many_copy([{"to": "ada"}], kind="send_email", metadata=bad)
            with psycopg.connect(dsn) as conn, pytest.raises(ValueError, match=words):
                insert_job_sync(conn, {"to": "ada"}, kind="send_email", metadata=bad)
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
    """awa-pg 0.6.9: AwaError "register at least one worker before starting the runtime",
    before it looks at the queues; ValueError "start() must configure the worker queues
    declared via @client.worker(..., queue=...): a"."""

    async def main() -> None:
        async with awa.AsyncClient(dsn) as client:
            for queues, options in (
                ([("email", 2)], {}),
                ([("email", 2)], {"global_max_workers": 4}),
            ):
                with pytest.raises(
                    awa.AwaError,
                    match=sdk("register at least one worker before starting the runtime"),
                ):
                    await client.start(queues, **options)

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


# ---- start()'s options, weighted mode and the per-queue claim settings ----------------------


GMW = {"global_max_workers": 4}


@pytest.mark.parametrize(
    ("queues", "options", "error", "message"),
    [
        (
            [("a", 4)],
            GMW,
            ValueError,
            sdk(
                "tuple queue config is not supported with global_max_workers; use dict form with "
                "min_workers/weight"
            ),
        ),
        *(
            (
                [{"name": "a", "max_workers": 2, "min_workers": 1}],
                options,
                ValueError,
                sdk(
                    "use max_workers for hard-reserved mode or min_workers for weighted mode, "
                    "not both"
                ),
            )
            for options in (GMW, {})
        ),
        (
            [{"name": "a", "min_workers": 3}, {"name": "b", "min_workers": 3}],
            GMW,
            awa.AwaError,
            sdk("sum of min_workers (6) exceeds global_max_workers (4)"),
        ),
        ([{"name": "a", "weight": 0}], GMW, ValueError, sdk("weight must be > 0")),
        ([{"name": "a", "max_workers": 2, "weight": 0}], {}, ValueError, sdk("weight must be > 0")),
        (
            None,
            GMW,
            ValueError,
            sdk(
                "weighted mode requires explicit queue configs (global_max_workers set but "
                "queues=None)"
            ),
        ),
        ([("a", 2), ("a", 3)], {}, awa.AwaError, sdk("queue 'a' configured more than once")),
        (
            [{"name": "a"}, {"name": "a"}],
            GMW,
            awa.AwaError,
            sdk("queue 'a' configured more than once"),
        ),
        *(
            (
                [{"name": "a", "max_workers": 2, "rate_limit": limit}],
                {},
                TypeError,
                sdk("rate_limit must be a (max_rate: float, burst: int) tuple or None"),
            )
            for limit in ("fast", (1.0,), (1.0, 2.5), {"max_rate": 1.0})
        ),
        (
            [{"name": "a", "max_workers": 2, "rate_limit": (0.0, 2)}],
            {},
            awa.AwaError,
            sdk("rate_limit max_rate must be > 0.0"),
        ),
        *(
            ([{"name": "a", "max_workers": 2, key: 0}], {}, ValueError, sdk(f"{key} must be > 0"))
            for key in ("claim_batch_size", "claimers")
        ),
        ([("a", 2)], {"cleanup_batch_size": 0}, ValueError, sdk("cleanup_batch_size must be > 0")),
        ([{"name": "a", "max_workers": "2"}], {}, TypeError, "must be an integer, got '2'"),
        ([("a", 2)], {"poll_interval_ms": "200"}, TypeError, "poll_interval_ms must be a number"),
        ([("a", 2)], {"global_max_workers": "4"}, TypeError, "global_max_workers must be an int"),
        ([("a", 2)], {"poll_intervall_ms": 5}, TypeError, "unknown runner option"),
    ],
)
def test_start_refuses_bad_options_as_the_sdk_does(
    dsn: str, queues: Any, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    """The error class awa-pg 0.6.9's start raised for each, and its words where they say
    what is wrong (not Python's "'str' object cannot be interpreted as an integer"): what
    awa-fast says after them names the value and the queue."""
    client = awa.AsyncClient(dsn)
    client.task(kind="noop", queue="a")(lambda job: None)

    async def main() -> None:
        async with client:
            with pytest.raises(error, match=message):
                await client.start(queues, **options)
            assert not (await client.health_check()).healthy  # nothing started

    run(main())


def test_a_partitioned_queue_configured_twice_is_an_awa_error(dsn: str) -> None:
    """awa-pg 0.6.9: AwaError "queue 'pq' configured more than once", a partition's own
    dict given beside the queue's ``queue_configs``."""
    queue = awa.PartitionedQueue("pq", 2)
    client = awa.AsyncClient(dsn)
    client.task(kind="noop", queue=queue.physical_queues[0])(lambda job: None)
    twice = [{"name": "pq", "max_workers": 1}, *queue.queue_configs(max_workers_per_partition=1)]

    async def main() -> None:
        async with client:
            with pytest.raises(awa.AwaError, match=sdk("queue 'pq' configured more than once")):
                await client.start(twice)

    run(main())


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        (
            {"storage_transition_role": "queue-storage-now"},
            ValueError,
            "storage_transition_role must be one of 'auto', 'canonical_drain', or "
            "'queue_storage_target' (got 'queue-storage-now')",
        ),
        ({"storage_transition_role": 5}, TypeError, "storage_transition_role must be a str"),
        ({"queue_storage_schema": 5}, TypeError, "queue_storage_schema must be a str"),
        *(
            ({name: 0}, ValueError, f"{name} must be > 0")
            for name in (
                "terminal_count_rollup_interval_ms",
                "queue_storage_queue_slot_count",
                "queue_storage_lease_slot_count",
                "queue_storage_claim_slot_count",
                "queue_storage_queue_stripe_count",
                "queue_storage_queue_rotate_interval_ms",
                "queue_storage_lease_rotate_interval_ms",
                "queue_storage_claim_rotate_interval_ms",
            )
        ),
        ({"queue_storage_queue_slot_count": "16"}, TypeError, "queue_storage_queue_slot_count"),
        (
            {"queue_storage_claim_rotate_interval_ms": 1.5},
            TypeError,
            "queue_storage_claim_rotate_interval_ms must be an integer",
        ),
    ],
)
def test_the_storage_options_values_are_checked_as_the_sdk_checks_them(
    options: dict[str, Any], error: type[Exception], words: str
) -> None:
    """awa-pg 0.6.9's start refused these before starting anything, with these words;
    here they change nothing, and are refused all the same."""
    with pytest.raises(error, match=sdk(words)):
        runner_config(options)


def test_the_sdks_storage_engine_options_are_accepted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """awa-pg 0.6.9 took terminal_count_rollup_interval_ms and storage_transition_role
    (and its queue_storage_* options, on its own engine); here they change nothing."""
    options = {"terminal_count_rollup_interval_ms": 1000, "storage_transition_role": "auto"}
    with caplog.at_level(logging.WARNING, logger="awa_fast.runtime.options"):
        first = runner_config({**options, "queue_storage_schema": "awa_exp"})
        again = runner_config(options)
    assert first == again == RunnerConfig()
    logged = [r.getMessage().split()[0] for r in caplog.records]
    assert sorted(logged) == sorted([*options, "queue_storage_schema"])  # each once
    for role in ("canonical_drain", "queue_storage_target"):  # the SDK's other roles
        assert runner_config({"storage_transition_role": role}) == RunnerConfig()


def test_per_queue_claim_settings_and_weights_become_the_runners() -> None:
    queues = [
        {"name": "a", "min_workers": 2, "weight": 3, "claim_batch_size": 16, "claimers": 4},
        {"name": "b", "priority_aging_interval_ms": 1500, "deadline_duration_ms": 9000},
    ]
    config = runner_config({"global_max_workers": 10}, queues=queues)
    assert config.queue_weights == {"a": (2, 3), "b": (0, 1)}
    assert (config.queue_claim_batches, config.claimers) == ({"a": 16}, 4)
    assert (config.queue_aging, config.queue_deadlines) == ({"b": 1.5}, {"b": 9.0})
    # each queue may run up to its minimum and all the minimums leave of the pool
    assert parse_queues(queues, config=config) == {"a": 10, "b": 8}


def test_zero_turns_a_queues_aging_and_deadline_off() -> None:
    """As in the SDK: ``priority_aging_interval_ms=0`` is no aging (the queue has none, as
    one that names none), ``deadline_duration_ms=0`` no deadline (None)."""
    queues = [{"name": "q", "max_workers": 1, "priority_aging_interval_ms": 0}]
    queues.append({"name": "r", "max_workers": 1, "deadline_duration_ms": 0})
    config = runner_config({}, queues=queues)
    assert (config.queue_aging, config.queue_deadlines) == ({}, {"r": None})
    assert (config.deadline_for("r"), config.deadline_for("q")) == (None, config.deadline)


def _standby_queues(dsn: str) -> list[str]:
    """The queues a standby claim waits on."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT queue FROM awa_fast.standby_claims WHERE job_id IS NULL ORDER BY queue"
        ).fetchall()
    return [queue for (queue,) in rows]


@pytest.mark.parametrize("processes", [None, 2], ids=["in-process", "forked"])
def test_a_queue_of_deadline_0_runs_its_jobs_with_no_deadline(
    dsn: str, processes: int | None
) -> None:
    """awa-pg 0.6.9, a handler in a queue of ``deadline_duration_ms=0``: ``job.deadline``
    None, and none on the job's row. Here too, and after a wait for a callback; a job's
    own deadline holds there still, and another queue keeps its deadline. The queue takes
    no standby claim (one carries the deadline its job starts with): its jobs are claimed
    as usual."""
    client = awa.AsyncClient(dsn)

    def deadlines(attempt: awa.Job[dict[str, Any]]) -> list[bool]:
        """Whether the attempt has a deadline: as text, as a datetime, on its row."""
        row = job(dsn, attempt.id)
        found = (attempt.deadline, attempt.datetimes.deadline, row["deadline_at"])
        return [deadline is not None for deadline in found]

    async def beaten(attempt: awa.Job[dict[str, Any]], since: datetime) -> datetime:
        """When its host next heartbeats the attempt, after ``since``."""
        await await_until(lambda: job(dsn, attempt.id)["heartbeat_at"] > since)
        beat: datetime = job(dsn, attempt.id)["heartbeat_at"]
        return beat

    async def beaten_twice(attempt: awa.Job[dict[str, Any]]) -> None:
        """By the second beat, the cancel flag the first would set on an attempt its host
        took for overdue, or no longer its own, is set."""
        await beaten(attempt, await beaten(attempt, job(dsn, attempt.id)["heartbeat_at"]))

    async def record(attempt: awa.Job[dict[str, Any]]) -> None:
        await beaten_twice(attempt)
        seen = [deadlines(attempt)]
        if attempt.args:  # {"wait": 1}: after a wait for a callback too
            await attempt.wait_for_callback(await attempt.register_callback())
        seen.append(deadlines(attempt))
        attempt.update_metadata({"deadlines": seen, "cancelled": attempt.is_cancelled()})

    client.task(kind="open", queue="open")(record)
    client.task(kind="timed", queue="timed")(record)
    queues: list[Any] = [{"name": "open", "max_workers": 4, "deadline_duration_ms": 0}]
    queues.append(("timed", 1))

    async def main() -> dict[str, Any]:
        async with client:
            await client.start(
                queues, processes=processes, poll_interval_ms=50, heartbeat_interval_ms=100
            )
            try:
                await await_until(lambda: "timed" in _standby_queues(dsn))
                ids = {
                    "plain": (await client.insert({}, kind="open", queue="open")).id,
                    "own": (await client.insert({}, kind="open", queue="open", deadline=30)).id,
                    "waits": (await client.insert({"wait": 1}, kind="open", queue="open")).id,
                    "timed": (await client.insert({}, kind="timed", queue="timed")).id,
                }
                await await_until(lambda: job(dsn, ids["waits"])["state"] == "waiting_external")
                assert job(dsn, ids["waits"])["deadline_at"] is None  # nor while it waits
                await client.resume_external(str(job(dsn, ids["waits"])["callback_id"]))
                await await_until(lambda: states(dsn) == {"completed": 4})
                await await_until(lambda: "timed" in _standby_queues(dsn))
                assert _standby_queues(dsn) == ["timed"]
            finally:
                await client.shutdown()
            return {name: job(dsn, job_id)["metadata"] for name, job_id in ids.items()}

    found = run(main())
    nothing, each = [False] * 3, [True] * 3
    assert found == {
        "plain": {"deadlines": [nothing, nothing], "cancelled": False},
        "waits": {"deadlines": [nothing, nothing], "cancelled": False},
        "own": {"deadlines": [each, each], "cancelled": False},
        "timed": {"deadlines": [each, each], "cancelled": False},
    }


def _running(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT queue, count(*) FROM awa_fast.jobs WHERE state = 'running' GROUP BY queue"
        ).fetchall()
    return dict(rows)


@pytest.mark.parametrize(
    ("queues", "busy", "bounds"),
    [
        # both busy: the pool of 8 shared 3:1
        (
            [{"name": "a", "weight": 3}, {"name": "b", "weight": 1}],
            "ab",
            {"a": (6, 6), "b": (2, 2)},
        ),
        # b's guaranteed 3, and each at most half the pool of 5 (rounded up) on top
        ([{"name": "a"}, {"name": "b", "min_workers": 3}], "ab", {"a": (2, 3), "b": (5, 6)}),
        # b idle: its share goes to a, which runs the whole pool
        ([{"name": "a", "weight": 1}, {"name": "b", "weight": 3}], "a", {"a": (8, 8)}),
    ],
)
def test_weighted_mode_runs_minimums_then_the_pool_by_weight(
    dsn: str, queues: list[dict[str, Any]], busy: str, bounds: dict[str, tuple[int, int]]
) -> None:
    """``global_max_workers=8``: handlers hold their jobs until the runner is saturated;
    then what runs per queue is the minimums and the shares of the pool."""
    client = awa.AsyncClient(dsn)
    release = asyncio.Event()

    async def hold(job: awa.Job[dict[str, int]]) -> None:
        await release.wait()

    for queue in ("a", "b"):
        client.task(kind=f"hold_{queue}", queue=queue)(hold)
    seen: dict[str, int] = {}
    health: dict[str, Any] = {}

    async def main() -> None:
        async with client:
            for queue in busy:
                await client.enqueue_many_copy(
                    [{"n": i} for i in range(12)], kind=f"hold_{queue}", queue=queue
                )
            await client.start(queues, global_max_workers=8, poll_interval_ms=50)
            try:
                await await_until(lambda: sum(_running(dsn).values()) == 8)
                seen.update(_running(dsn))
                health.update((await client.health_check()).queues)
            finally:
                release.set()
                await client.shutdown()

    run(main())
    assert seen.keys() == bounds.keys()
    assert all(low <= seen[q] <= high for q, (low, high) in bounds.items()), seen
    # health_check reports each queue's weighted settings, and what runs past its minimum
    for queue in queues:
        low, weight = queue.get("min_workers", 0), queue.get("weight", 1)
        found = health[queue["name"]]
        running = seen.get(queue["name"], 0)
        assert (found.min_workers, found.weight) == (low, weight)
        assert (found.in_flight, found.overflow_held) == (running, max(0, running - low))


def _claim_order(dsn: str, queue: str, **aging: int) -> list[str]:
    """The order a one-at-a-time runner of ``queue`` takes an old job of priority 4 and a
    new one of priority 1 in."""
    client = awa.AsyncClient(dsn)
    done: list[str] = []

    @client.task(kind="step", queue=queue)
    async def step(job: awa.Job[dict[str, str]]) -> None:
        done.append(job.args["name"])

    async def main() -> None:
        async with client:
            old = datetime.now(UTC) - timedelta(seconds=10)
            await client.insert({"name": "old"}, kind="step", queue=queue, priority=4, run_at=old)
            await client.insert({"name": "new"}, kind="step", queue=queue, priority=1)
            await run_until(
                client,
                [{"name": queue, "max_workers": 1, "claim_batch_size": 1, **aging}],
                lambda: len(done) == 2,
                claimers=1,  # two claim loops would each lock one job, and start it first
            )

    run(main())
    return done


def test_priority_aging_claims_an_old_low_priority_job_first(dsn: str) -> None:
    """With ``priority_aging_interval_ms`` a job waiting ten intervals is claimed as if of
    priority 1, ahead of a newer one of priority 1; without it, or at 0 (awa-pg 0.6.9
    claimed the new job first at 0 with the old one waiting 600 s), priority decides."""
    assert _claim_order(dsn, "aged", priority_aging_interval_ms=1000) == ["old", "new"]
    assert _claim_order(dsn, "plain") == ["new", "old"]
    assert _claim_order(dsn, "off", priority_aging_interval_ms=0) == ["new", "old"]
    with psycopg.connect(dsn) as conn:  # the stored priority is the given one
        assert conn.execute("SELECT max(priority) FROM awa_fast.jobs").fetchone() == (4,)


def test_a_queues_claim_batch_size_bounds_each_claim(dsn: str) -> None:
    client = awa.AsyncClient(dsn)
    client.task(kind="tick", queue="q")(lambda job: None)

    async def main() -> int:
        async with client:
            await client.enqueue_many_copy([{"n": i} for i in range(6)], kind="tick", queue="q")
            runner = await client.start([{"name": "q", "max_workers": 10, "claim_batch_size": 2}])
            try:
                await await_until(lambda: states(dsn) == {"completed": 6})
            finally:
                await client.shutdown()
            return runner.snapshot().claimed["q"], runner.snapshot().claims["q"]

    claimed, claims = run(main())
    assert claimed == 6 and claims >= 3  # two at most a claim
