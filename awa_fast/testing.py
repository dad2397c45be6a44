"""The Awa SDK's test helpers (``awa.testing``) on awa-fast's own machinery.

Tests written against ``awa.testing`` run with the import changed: :class:`AwaTestClient`,
:class:`WorkResult`, :data:`NoJob`, :class:`HandlerJob`, :class:`JobRow`,
:func:`get_database_url` and the ``awa_client`` fixture have the SDK's names and calling
conventions. Where the SDK's ``work_one`` claims and finishes a job with SQL of its own,
this one takes the runner's path, so a test shows what a worker run would:

* the job is claimed by the runner's claim function (``awa_fast.claim_jobs``, as
  ``job_claim_batch`` claims: claim order, paused queues, a new run_lease, the deadline);
* the handler runs in the runner's :class:`~awa_fast.runtime.work.executor.Executor`, which
  hands it an :class:`awa_fast.Job` and turns what it returns or raises into the outcome
  table's transition (docs/architecture.md, "The outcome table");
* the runner's :class:`~awa_fast.runtime.committer.Committer` applies the transition,
  guarded by (id, run_lease, state), with the client's follow-ups and lifecycle hooks,
  which have run by the time ``work_one`` returns.

So its results are a worker's where the SDK's helper took shortcuts: jobs are claimed by
priority first and not from a paused queue; a snooze schedules the job (state
"scheduled", outcome "snoozed"); a retry sets the job's next run (backoff for an
exception) and fails it on its last attempt; ``WaitForCallback`` parks the job (outcome
"waiting_external"); a result of another type fails the job rather than raising
``TypeError``. Handlers may be ``async def`` or plain ``def`` (run on a thread).
:class:`JobRow` is :class:`awa_fast.JobRow`, whose ``state`` equals the SDK's strings.
Importing this module needs pytest (for the fixture), as the SDK's needs pytest-asyncio.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Awaitable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar, Unpack, cast

import psycopg
import pytest

from awa_fast._core import OutcomeRing
from awa_fast.client import AsyncClient
from awa_fast.client_sync import Client
from awa_fast.db.connections import connect_hot
from awa_fast.db.migrate import migrate
from awa_fast.db.queries import Q
from awa_fast.lifecycle.hooks import EventType, HookDispatcher
from awa_fast.runtime.claim.claimer import connect_claimer, started_row
from awa_fast.runtime.claimed import Claimed
from awa_fast.runtime.committer import Committer, Records
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.work.attempt_writer import AttemptWriter
from awa_fast.runtime.work.completion import InTransaction
from awa_fast.runtime.work.executor import Executor
from awa_fast.types import InsertOptions, JobRow, JobState
from awa_fast.worker import HandlerFunc, Job, Registry

__all__ = [
    "DEFAULT_DATABASE_URL",
    "AwaTestClient",
    "HandlerJob",
    "JobRow",
    "NoJob",
    "WorkResult",
    "awa_client",
    "get_database_url",
]

DEFAULT_DATABASE_URL = "postgres://postgres:test@localhost:5432/awa_test"
"""The SDK's default test database, used when ``DATABASE_URL`` is not set."""

T = TypeVar("T")
_APPLICATION = "awa-fast test client"
# The runner's defaults: the deadline a claim sets and the backoff of a retry.
_CONFIG = RunnerConfig()
# Jobs run one at a time here: each outcome commits at once, not after a batch's delay.
_COMMITTER = replace(_CONFIG.committer(), delay=0.002)


def get_database_url() -> str:
    """The test database: ``DATABASE_URL``, else :data:`DEFAULT_DATABASE_URL` (the SDK's)."""
    return os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL)


class _NoJob:
    """What :attr:`WorkResult.job` is when no job was there to claim; falsy."""

    def __repr__(self) -> str:
        return "NoJob"

    def __bool__(self) -> bool:
        return False


NoJob = _NoJob()


@dataclass
class HandlerJob(Generic[T]):
    """The SDK's stand-in job, for calling a handler directly without a database.

    ``work_one`` does not use it: it hands handlers the :class:`awa_fast.Job` a worker
    hands them, which has these fields (and more: kind, run_lease, errors, progress,
    ``register_callback()``, ...)."""

    args: T
    id: int
    attempt: int
    max_attempts: int
    queue: str
    priority: int
    deadline: datetime | None
    metadata: dict[str, Any]
    tags: list[str]

    def is_cancelled(self) -> bool:
        return False


@dataclass
class WorkResult:
    """What ``work_one`` did: the job as stored afterwards (:data:`NoJob` if there was
    none), the outcome ("completed", "retryable", "failed", "cancelled", "snoozed",
    "waiting_external", "no_job") and the error: what the handler raised, as ``str()``,
    a ``Cancel``'s reason, or the error the attempt recorded (bad args, a bad result)."""

    job: JobRow | _NoJob
    outcome: str
    error: str | None = None

    def is_completed(self) -> bool:
        return self.outcome == "completed"

    def is_failed(self) -> bool:
        return self.outcome == "failed"

    def is_retryable(self) -> bool:
        return self.outcome == "retryable"

    def is_cancelled(self) -> bool:
        return self.outcome == "cancelled"

    def is_snoozed(self) -> bool:
        return self.outcome == "snoozed"

    def is_waiting_external(self) -> bool:
        return self.outcome == "waiting_external"

    def is_no_job(self) -> bool:
        return self.outcome == "no_job"


class AwaTestClient:
    """Runs one job at a time through a real client, for tests. Its methods are async, as
    the SDK's are; it wraps a :class:`~awa_fast.Client` (whose calls then run on a thread)
    or an :class:`~awa_fast.AsyncClient`."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self._client = client

    @property
    def client(self) -> Client | AsyncClient:
        return self._client

    async def insert(self, args: object, **options: Unpack[InsertOptions]) -> JobRow:
        """Insert a job through the client."""
        if isinstance(self._client, AsyncClient):
            return await self._client.insert(args, **options)
        return await asyncio.to_thread(self._client.insert, args, **options)

    async def migrate(self) -> None:
        """Apply pending schema migrations."""
        await asyncio.to_thread(migrate, self._client.dsn)

    async def clean(self) -> None:
        """Delete every row of awa-fast's tables in one transaction, for test isolation."""
        await asyncio.to_thread(_clean, self._client.dsn)

    async def work_one(
        self,
        args_type: type,
        handler: HandlerFunc,
        *,
        kind: str | None = None,
        queue: str = "default",
    ) -> WorkResult:
        """Claim the first available job of ``args_type``'s kind (or ``kind``) in ``queue``,
        run ``handler`` on it and apply its outcome, as a worker would (module docstring).
        Returns ``WorkResult(NoJob, "no_job")`` when there is none to claim."""
        raised = _Raised()
        registry = Registry()
        entry = registry.add(raised.watch(handler), args_type=args_type, kind=kind, queue=queue)
        async with _Worker(self._client, registry) as worker:
            row = await worker.claim(entry.kind, queue)
            if row is None:
                return WorkResult(NoJob, "no_job")
            record = await worker.run(row)
        job = await self._get_job(row.id)
        outcome = "snoozed" if job.state is JobState.Scheduled else str(job.state)
        return WorkResult(job, outcome, _error(raised.exc, record))

    async def _get_job(self, job_id: int) -> JobRow:
        if isinstance(self._client, AsyncClient):
            return await self._client.get_job(job_id)
        return await asyncio.to_thread(self._client.get_job, job_id)


@dataclass(slots=True)
class _Raised:
    """Watches a handler for what it raises: the SDK's ``WorkResult.error`` is its
    ``str()``, which the error recorded on the job prefixes with its type."""

    exc: Exception | None = None

    def watch(self, handler: HandlerFunc) -> HandlerFunc:
        """``handler``, async if it is, noting what it raises."""
        if inspect.iscoroutinefunction(handler):

            async def watched_async(job: Job[Any]) -> object:
                try:
                    return await cast(Awaitable[object], handler(job))
                except Exception as exc:
                    self.exc = exc
                    raise

            return watched_async

        def watched(job: Job[Any]) -> object:
            try:
                return handler(job)
            except Exception as exc:
                self.exc = exc
                raise

        return watched


def _error(raised: Exception | None, record: dict[str, Any]) -> str | None:
    if raised is not None:
        return str(raised)
    if "reason" in record:  # Cancel(reason)
        return str(record["reason"])
    entry = record.get("error")
    return str(entry["error"]) if entry else None


class _NeverCancelled:
    """No admin cancel reaches a work_one attempt (the runner's come over NOTIFY); as in
    the SDK, ``job.is_cancelled()`` stays False."""

    def is_cancelled(self, slot: int) -> bool:
        return False

    def mark_started(self, slot: int) -> None:
        """Nothing to mark: a work_one attempt has no worker process to lose."""


class _Worker:
    """The runner's parts, for one job: a claim connection, an executor whose outcome
    record goes into an outcome ring, and a committer that applies it."""

    def __init__(self, client: Client | AsyncClient, registry: Registry) -> None:
        database = client.database
        self.database = database
        self.registry = registry
        self.ring = OutcomeRing(64, 128)
        self.hooks = HookDispatcher(client.handlers.hooks)
        self.committer = Committer(
            lambda: connect_hot(database, application_name=_APPLICATION),
            self.ring,
            registry=registry,
            followups=client.handlers.followups,
            hooks=self.hooks,
            config=_COMMITTER,
        )
        self.threads = ThreadPoolExecutor(1, thread_name_prefix="awa-fast-test-sync")
        self.executor = Executor(
            registry,
            self.ring,
            _NeverCancelled(),
            _CONFIG.backoff,
            AttemptWriter(database),
            self.threads,
            completion=InTransaction(client.handlers.followups),
        )
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> _Worker:
        self._stack.callback(self.threads.shutdown)
        self._stack.push_async_callback(self.executor.writer.close)
        self._stack.callback(self.committer.close)
        # Delivers the events of this job first; a hook may take its time.
        self._stack.push_async_callback(asyncio.to_thread, self.hooks.stop)
        self.hooks.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def claim(self, kind: str, queue: str) -> Claimed | None:
        """The first available job of ``kind`` in ``queue``, claimed by the runner's claim
        function, told which kind to take (awa_fast/db/sql/testing.sql), once the queue's
        packs are unpacked, so that their jobs are found as rows."""
        conn = await self._stack.enter_async_context(await self._claim_connection())
        await conn.execute(Q.queue_unpack, {"queue": queue})
        params = {
            "queue": queue,
            "kind": kind,
            "deadline_s": _CONFIG.deadline_for(queue),
            "host_id": None,
        }
        cur = await conn.cursor(binary=True).execute(Q.testing_job_claim, params)
        row = await cur.fetchone()
        return None if row is None else Claimed._make(row)

    async def _claim_connection(self) -> psycopg.AsyncConnection[Any]:
        return await connect_claimer(self.database, application_name=_APPLICATION)

    async def run(self, job: Claimed) -> dict[str, Any]:
        """Run the handler on the claimed ``job`` and commit its outcome; returns the
        outcome object its record carried (error, reason, callback id, ...)."""
        if self.hooks.registry.wants(job.kind):
            self.hooks.submit(EventType.STARTED, started_row(job))
        await self.executor.run(job, 0)
        return await self._commit()

    async def _commit(self) -> dict[str, Any]:
        """Commit the one record in the ring as the committer's loop would."""
        self.ring.drain_into(self.committer.batcher, 0.0)
        batch = self.committer.batcher.take()
        if batch is None:  # none is pushed for a job completed in its handler's transaction
            return {}
        await asyncio.to_thread(self.committer.commit, batch)
        return Records.of(batch).extra(0)


def _clean(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, application_name=_APPLICATION) as conn:
        conn.execute(Q.testing_tables_clear)


@pytest.fixture
def awa_client() -> Iterator[AwaTestClient]:
    """An :class:`AwaTestClient` over a :class:`~awa_fast.Client` of
    :func:`get_database_url`, migrated and cleaned before the test and cleaned after.

    A plain fixture, where the SDK's is a pytest-asyncio one: it serves sync and async
    tests alike (its client's methods are awaited either way)."""
    url = get_database_url()
    migrate(url)
    _clean(url)
    with Client(url) as client:
        yield AwaTestClient(client)
    _clean(url)
