"""The user-facing clients: producers, handler registration, and the runner.

``Client`` is the synchronous twin of ``AsyncClient``, generated from it by
tools/async_to_sync.py (the code after this module's last marker line), which is why the
module runs long. Both share one registration surface (:class:`_Handlers`) and the producer
functions in :mod:`awa_fast.producer`; what differs for real is in :class:`_SyncOnly` and
:class:`_AsyncOnly`. Connection pools open on first use, so a client built at import time in
an application module holds no connection when the pool forks its workers.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import Any, TypeVar, Unpack

from psycopg import AsyncConnection, Connection, OperationalError
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from awa_fast import admin, batch, producer
from awa_fast.db.connections import (
    Database,
    connect_timeout_params,
    keepalives,
    refused,
    unreachable,
)
from awa_fast.db.migrate import migrate as _migrate
from awa_fast.db.transitions import Outcome
from awa_fast.descriptors import DescriptorOptions, descriptor
from awa_fast.errors import ConfigError
from awa_fast.maintenance.periodic import PeriodicOptions, periodic_job
from awa_fast.runtime import health
from awa_fast.runtime.config import DEFAULT_CONCURRENCY, QueueSpec, parse_queues
from awa_fast.runtime.followups import FollowupRegistry, Make
from awa_fast.runtime.handlers import Handlers
from awa_fast.runtime.hooks import Hook, HookRegistry
from awa_fast.runtime.options import runner_config
from awa_fast.runtime.runner import Runner
from awa_fast.runtime.serve import serve
from awa_fast.transaction import SyncTransaction, Transaction
from awa_fast.types import (
    DEFAULT_CALLBACK_TIMEOUT,
    InsertOptions,
    JobRow,
    check_insert_options,
)
from awa_fast.worker import HandlerFunc, Registry, Worker

F = TypeVar("F", bound=HandlerFunc)
T = TypeVar("T")


class _Handlers:
    """Registration shared by both clients: handlers, follow-ups, lifecycle hooks."""

    def __init__(self, dsn: str, *, transaction_pooling: bool) -> None:
        # How this client's pool and its runners connect (docs/pgbouncer.md).
        self.database = Database(dsn, pooled=transaction_pooling)
        self.handlers = Handlers(Registry(), FollowupRegistry(), HookRegistry())

    @property
    def dsn(self) -> str:
        return self.database.dsn

    def task(
        self, args_type: type | None = None, *, kind: str | None = None, queue: str = "default"
    ) -> Callable[[F], F]:
        """Register ``async def`` or plain ``def handler(job)`` for ``args_type``'s kind."""

        def decorate(func: F) -> F:
            self.handlers.registry.add(func, args_type=args_type, kind=kind, queue=queue)
            return func

        return decorate

    def worker(
        self, args_type: type | None = None, *, kind: str | None = None, queue: str = "default"
    ) -> Callable[[F], F]:
        """The Awa SDK's deprecated name for :meth:`task`, kept so code written for it runs."""
        warnings.warn(
            "client.worker() is deprecated, use client.task() instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.task(args_type, kind=kind, queue=queue)

    def periodic(
        self,
        name: str,
        cron_expr: str,
        args_type: type,
        args: object,
        **options: Unpack[PeriodicOptions],
    ) -> None:
        """Enqueue ``args`` as a job of ``args_type``'s kind at every time ``cron_expr``
        names (:mod:`awa_fast.cron`). Options: ``timezone`` ("UTC"), ``queue``,
        ``priority``, ``max_attempts``, ``tags``, ``metadata``, ``missed_fire_policy``
        ("coalesce": after downtime, only the latest missed fire; "catch_up": each).
        Validated now; the schedule is written to the database when this client starts
        handlers, and the maintenance leader enqueues its fires."""
        if name in self.handlers.schedules:
            raise ConfigError(f"periodic job {name!r} registered twice")
        self.handlers.schedules[name] = periodic_job(name, cron_expr, args_type, args, **options)

    def queue_descriptor(self, queue: str, **options: Unpack[DescriptorOptions]) -> None:
        """Describe ``queue`` for the catalog (``list_queue_descriptors``): options
        ``display_name``, ``description``, ``owner``, ``docs_url``, ``tags``, ``extra`` (a
        JSON object). Validated now; written when this client starts handlers, which must
        run ``queue`` (else :class:`ConfigError`). Declaring a queue again replaces its
        descriptor, as in the Awa SDK."""
        self.handlers.queue_descriptors[queue] = descriptor("queue", queue, **options)

    def job_kind_descriptor(self, kind: str, **options: Unpack[DescriptorOptions]) -> None:
        """Describe job kind ``kind`` (``list_job_kind_descriptors``), with the options of
        :meth:`queue_descriptor`; written when this client starts handlers. Any kind may be
        described, handled here or not."""
        self.handlers.kind_descriptors[kind] = descriptor("kind", kind, **options)

    def register(self, worker: type[Worker] | Worker) -> None:
        """Register a :class:`~awa_fast.Worker` subclass (or instance)."""
        self.handlers.registry.add_worker(worker)

    def on_event(self, trigger: type | str, hook: Hook) -> None:
        """Call ``hook(event)`` after each lifecycle event of ``trigger``'s kind commits."""
        self.handlers.hooks.add(trigger, hook)

    def on_completed_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.COMPLETED, trigger, make)

    def on_retried_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.RETRIED, trigger, make)

    def on_exhausted_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.EXHAUSTED, trigger, make)

    def on_cancelled_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.CANCELLED, trigger, make)

    def on_waiting_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.WAITING_FOR_CALLBACK, trigger, make)

    def on_rescued_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.RESCUED, trigger, make)

    def run(self, queues: QueueSpec | None = None, **config: Any) -> int:
        """Run handlers for ``queues`` in this process until SIGINT/SIGTERM."""
        return serve(self, queues, processes=None, **config)

    def serve(
        self, queues: QueueSpec | None = None, *, processes: int | None = 0, **config: Any
    ) -> int:
        """Run the multiprocess pool until SIGINT/SIGTERM (``processes`` defaults to the
        number of CPUs); returns the exit code. See :func:`awa_fast.runtime.serve.serve`."""
        return serve(self, queues, processes=processes or os.cpu_count() or 1, **config)

    def default_queues(self) -> dict[str, int]:
        """One entry per queue a handler was registered on, at the default concurrency."""
        return {h.queue: DEFAULT_CONCURRENCY for h in self.handlers.registry.handlers.values()}


def _check_registered(handlers: Handlers) -> None:
    """Refuse to start what would claim nothing, before looking at its configuration, as
    the Awa SDK's ``start`` refuses it (an AwaError, in its words)."""
    if not handlers.registry.handlers:
        raise ConfigError(
            "register at least one worker before starting the runtime: a handler "
            "(client.task) or a Worker (client.register)"
        )


def _check_handled(handlers: Handlers, queues: Mapping[str, int]) -> None:
    """Refuse to leave a registered handler's queue unclaimed, as the Awa SDK's ``start``
    refuses (a ValueError)."""
    registered = handlers.registry.handlers.values()
    unrun = sorted({handler.queue for handler in registered} - queues.keys())
    if unrun:
        raise ConfigError(
            f"start() must run the queues its handlers were registered on: {', '.join(unrun)} "
            "missing"
        )


# The client's own sessions (inserts, admin): autocommit, named in pg_stat_activity as
# every other part of awa-fast is.
_SESSION = {"autocommit": True, "application_name": "awa-fast client"}


class _SyncOnly(_Handlers):
    """What only :class:`Client` has, or does its own way: it starts no handlers that
    outlive a call (``run`` and ``serve`` return when theirs stop)."""

    def health_check(self) -> health.HealthCheck:
        """Whether Postgres answers (``postgres_connected``, within a few seconds, up or
        down). ``healthy`` is False, as in the Awa SDK: this client runs no handlers here
        (``serve``'s pool answers its own ``/health``)."""
        return health.health_of(None, health.available(self.dsn, []))

    def _stop_handlers(self) -> None:
        """Nothing to stop on close: no handlers run on this client's behalf by then."""


class _AsyncOnly(_Handlers):
    """What only :class:`AsyncClient` has: handlers started on the caller's event loop, and
    their health."""

    def __init__(self, dsn: str, *, transaction_pooling: bool) -> None:
        super().__init__(dsn, transaction_pooling=transaction_pooling)
        self._runner: Runner | None = None

    async def health_check(self) -> health.HealthCheck:
        """Whether Postgres answers (within a few seconds, up or down) and, once started,
        whether this client claims and heartbeats: for readiness and liveness probes.
        ``healthy`` is False before ``start()`` and after ``shutdown()``, as in the Awa SDK."""
        return await health.probe(self.dsn, self._runner)

    async def start(
        self, queues: QueueSpec | None = None, *, processes: int | None = None, **config: Any
    ) -> Runner:
        """Start handlers for ``queues`` from this event loop: in this process, or in
        ``processes`` forked worker processes. Returns the running runner. ``config`` takes
        :class:`~awa_fast.runtime.config.RunnerConfig`'s fields or the Awa SDK's option names
        (:mod:`awa_fast.runtime.options`), ``global_max_workers`` with queue dicts of
        ``min_workers`` and ``weight`` for its weighted mode (:mod:`awa_fast.runtime.shares`)."""
        if self._runner is not None:
            raise RuntimeError("this client is already running; call shutdown() first")
        _check_registered(self.handlers)
        settings = runner_config(config, queues=queues, pooled=self.database.pooled)
        given = queues if queues is not None else self.default_queues()
        parsed = parse_queues(given, config=settings)
        _check_handled(self.handlers, parsed)
        runner = Runner(self.dsn, self.handlers, parsed, settings, processes=processes)
        await runner.start()
        self._runner = runner
        return runner

    async def shutdown(
        self, timeout: float | None = None, *, timeout_ms: int | None = None
    ) -> None:
        """Stop claiming, let running handlers finish (up to ``timeout`` s, or the Awa SDK's
        ``timeout_ms``), flush outcomes."""
        if timeout_ms is not None:
            if timeout is not None:
                raise ValueError("give timeout or timeout_ms, not both")
            timeout = timeout_ms / 1000
        runner = self._runner
        if runner is None or runner.stopping:  # not started, or another call is stopping it
            return
        try:
            await runner.stop(timeout)
        finally:  # kept until stopped, so that a health check meanwhile says shutting down
            self._runner = None

    async def _stop_handlers(self) -> None:
        """On close, stop the handlers ``start`` started."""
        await self.shutdown()


# The Awa SDK's queue storage engine, which RawClient (like the clients) has no part of.
_STORAGE_ENGINE_METHODS = frozenset(
    {"install_queue_storage", "prepare_queue_storage_schema", "install_queue_storage_sync"}
)


class RawClient:
    """The Awa SDK's raw client (its PyO3 ``Client``), for legacy code written against it:
    its asynchronous methods are :class:`AsyncClient`'s and each ``name_sync`` is
    :class:`Client`'s ``name``, each side on a pool of its own. The SDK's storage-engine
    methods have no counterpart here, and raise AttributeError saying so."""

    def __init__(
        self, database_url: str, max_connections: int = 10, *, transaction_pooling: bool = False
    ) -> None:
        self._async = AsyncClient(
            database_url, max_connections=max_connections, transaction_pooling=transaction_pooling
        )
        self._sync = Client(
            database_url, max_connections=max_connections, transaction_pooling=transaction_pooling
        )

    def __getattr__(self, name: str) -> Any:
        if name in _STORAGE_ENGINE_METHODS:
            raise AttributeError(
                f"RawClient.{name}: the Awa SDK's queue storage engine has no counterpart "
                "in awa-fast, which has one storage"
            )
        if name.endswith("_sync"):
            return getattr(self._sync, name.removesuffix("_sync"))
        return getattr(self._async, name)

    async def close(self) -> None:
        """Close both sides' pools (and stop handlers started here)."""
        await self._async.close()
        self._sync.close()

    def close_sync(self) -> None:
        """Close the synchronous side's pool: the SDK's name for it."""
        self._sync.close()


# ---- asyncio source: the synchronous code at the end is generated from it ----


async def _execute_async(conn: AsyncConnection[Any], op: admin.Op[T]) -> T:
    cur = conn.cursor(row_factory=dict_row)
    if op.first is not None:
        await cur.execute(op.first, op.params)
    await cur.execute(op.sql, op.params)
    return op.shape(await cur.fetchall() if cur.description else [])


@asynccontextmanager
async def _reached_async(
    pool: AsyncConnectionPool[Any], dsn: str
) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection of ``pool`` for one call. An outage raises DatabaseUnreachable naming
    the server: no connection within the pool's timeout while the pool cannot open one
    (with every connection merely busy, the pool's own PoolTimeout), or the connection
    lost under the call."""
    try:
        async with pool.connection() as conn:
            try:
                yield conn
            except OperationalError as exc:
                if conn.broken:
                    raise unreachable(dsn, f"the connection was lost ({exc})") from exc
                raise
    except PoolTimeout as exc:
        if pool.get_stats().get("pool_size", 0) >= (pool.max_size or 0):
            raise
        raise unreachable(dsn, f"no connection within {pool.timeout:g} s") from exc


class AsyncClient(_AsyncOnly):
    """The asyncio client: insert jobs, administer them, run handlers. Give
    ``transaction_pooling=True`` when ``dsn`` goes through a transaction pooler
    (PgBouncer's ``pool_mode=transaction``, docs/pgbouncer.md): no connection of this
    client or of the runners it starts then prepares a statement. A call that gets no
    connection within ``connect_timeout`` seconds raises
    :class:`~awa_fast.errors.DatabaseUnreachable` (docs/producing.md)."""

    def __init__(
        self,
        dsn: str,
        *,
        max_connections: int = 10,
        transaction_pooling: bool = False,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(dsn, transaction_pooling=transaction_pooling)
        self._connect_params = {
            **_SESSION,
            **keepalives(dsn),
            **connect_timeout_params(dsn, connect_timeout),
        }
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=0,
            max_size=max_connections,
            open=False,
            kwargs=self._connect_params,
            configure=self._configure,
            timeout=connect_timeout,
        )
        self._opened = False

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        """No prepared statements behind a transaction pooler: read as the pool opens each
        connection, for ``serve --pgbouncer`` tells a client made at import afterwards."""
        conn.prepare_threshold = self.database.prepare_threshold()

    async def _conn(self) -> Any:
        if not self._opened:
            # One connection first, so that a database out of reach raises at once: the
            # pool would retry in the background, logging each failure, until its timeout.
            try:
                await (await AsyncConnection.connect(self.dsn, **self._connect_params)).close()
            except OperationalError as exc:
                if refused(exc):
                    raise
                raise unreachable(self.dsn, str(exc)) from exc
            await self._pool.open()
            self._opened = True
        return _reached_async(self._pool, self.dsn)

    async def insert(self, args: object, **options: Unpack[InsertOptions]) -> JobRow:
        check_insert_options("insert", options)
        async with await self._conn() as conn:
            return await producer.insert_async(conn, args, **options)

    async def migrate(self) -> list[int]:
        """Apply pending schema migrations; returns the versions applied."""
        return await asyncio.to_thread(_migrate, self.dsn)

    async def insert_many(
        self, items: Iterable[object], **options: Unpack[InsertOptions]
    ) -> list[int]:
        check_insert_options("insert_many", options)
        async with await self._conn() as conn:
            return await producer.insert_many_async(conn, items, **options)

    async def insert_many_copy(
        self,
        items: Iterable[object],
        *,
        opts: Sequence[Mapping[str, Any] | None] | None = None,
        **options: Unpack[InsertOptions],
    ) -> list[JobRow]:
        """:meth:`insert_many` returning the jobs, as the Awa SDK's method of this name does;
        ``opts``, one entry per job or None, sets a job's own ``queue`` or ``ordering_key``."""
        check_insert_options("insert_many_copy", options)
        laid = producer.with_item_options(items, options, opts)
        return await self.run_op(admin.get_jobs(await self.insert_many(laid, **options)))

    async def enqueue_many_copy(
        self,
        items: Iterable[object],
        *,
        opts: Sequence[Mapping[str, Any] | None] | None = None,
        **options: Unpack[InsertOptions],
    ) -> int:
        """:meth:`insert_many` returning how many jobs it inserted (the Awa SDK's name);
        ``opts`` as for :meth:`insert_many_copy`."""
        check_insert_options("enqueue_many_copy", options)
        laid = producer.with_item_options(items, options, opts)
        return len(await self.insert_many(laid, **options))

    async def transaction(self) -> Transaction:
        """Open a transaction on one of this client's connections, for the application's
        statements and job inserts together (``async with await client.transaction() as
        tx:``); the block commits when it ends and rolls back on an exception."""
        return await Transaction.begin(await self._conn())

    async def run_op(self, op: admin.Op[T]) -> T:
        """Run an admin operation (an :class:`awa_fast.admin.Op`, as that module's
        functions build them) on one of this client's connections, as this client's admin
        methods run theirs; returns what the Op makes of its rows."""
        async with await self._conn() as conn:
            return await _execute_async(conn, op)

    async def _run_locked(self, locked: admin.Locked[T]) -> T:
        async with await self._conn() as conn, conn.transaction():
            decided = await _execute_async(conn, locked.lock)
            return await _execute_async(conn, decided) if isinstance(decided, admin.Op) else decided

    async def get_job(self, job_id: int) -> JobRow:
        """The job; :class:`~awa_fast.errors.JobNotFound` when there is none."""
        return await self.run_op(admin.get_job(job_id))

    async def cancel(self, job_id: int) -> JobRow | None:
        """Cancel the job (a running handler sees ``is_cancelled()``); None if finished."""
        cancelled = await self.run_op(admin.cancel(job_id))
        return await self.run_op(admin.find_job(job_id)) if cancelled else None

    async def retry(self, job_id: int) -> JobRow | None:
        """Run a failed, cancelled or parked (waiting_external) job again, attempts reset;
        None if it was in none of those states. A parked job's callback is spent."""
        return await self._resolved(admin.retry(job_id))

    async def cancel_by_unique_key(
        self,
        kind: str,
        *,
        queue: str | None = None,
        args: object = None,
        period_bucket: int | None = None,
    ) -> JobRow | None:
        """Cancel the oldest unfinished job with this unique key (give ``queue``, ``args``,
        ``period_bucket`` as its UniqueOpts took them); None if there is none."""
        holder = admin.unique_key_holder(kind, queue=queue, args=args, period_bucket=period_bucket)
        job_id = await self.run_op(holder)
        return None if job_id is None else await self.cancel(job_id)

    async def retry_failed(
        self, *, kind: str | None = None, queue: str | None = None
    ) -> admin.RetryFailedResult:
        """Run every failed job of ``kind`` and ``queue`` again (each None for any)."""
        return await self.run_op(admin.retry_failed(kind=kind, queue=queue))

    async def discard_failed(self, kind: str) -> int:
        return await self.run_op(admin.discard_failed(kind))

    async def dump_job(self, job_id: int) -> str:
        return await self.run_op(admin.dump_job(job_id))

    async def dump_run(self, job_id: int, attempt: int | None = None) -> str:
        """One attempt of a job as JSON (the current one unless ``attempt`` is given)."""
        return await self.run_op(admin.dump_run(job_id, attempt))

    async def pause_queue(self, queue: str, paused_by: str | None = None) -> None:
        await self.run_op(admin.pause_queue(queue, paused_by))

    async def resume_queue(self, queue: str) -> None:
        await self.run_op(admin.resume_queue(queue))

    async def drain_queue(self, queue: str) -> int:
        return await self.run_op(admin.drain_queue(queue))

    async def flush_admin_metadata(self) -> None:
        """Nothing to flush: queue_stats() reads counters the statements that move jobs
        keep in their own transactions, exact at every call (the Awa SDK caches its
        counters; code that flushes them first runs unchanged)."""

    async def queue_stats(self) -> list[admin.QueueStat]:
        return await self.run_op(admin.queue_stats())

    async def storage_status(self) -> str:
        """The Awa SDK's storage-transition report, as pretty JSON: one engine, always
        active, with nothing to transition to (its blockers say so)."""
        return await self.run_op(admin.storage_status())

    async def list_jobs(self, **filters: Any) -> list[JobRow]:
        """Newest first; filters: ``state``, ``kind``, ``queue``, ``limit`` (100)."""
        return await self.run_op(admin.list_jobs(**filters))

    async def list_dlq(self, **filters: Any) -> list[admin.DlqEntry]:
        """Dead-lettered jobs, newest first; filters: ``kind``, ``queue``, ``tag``, the
        cursor ``before_dlq_at``/``before_id``, ``limit``."""
        return await self.run_op(admin.list_dlq(**filters))

    async def get_dlq_job(self, job_id: int) -> admin.DlqEntry | None:
        return await self.run_op(admin.get_dlq_job(job_id))

    async def dlq_depth(self, *, queue: str | None = None) -> int:
        return await self.run_op(admin.dlq_depth(queue=queue))

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        return await self.run_op(admin.dlq_depth_by_queue())

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRow | None:
        op = admin.retry_from_dlq(job_id, run_at=run_at, priority=priority, queue=queue)
        return await self._resolved(op)

    async def _resolved(self, op: admin.Op[int | None]) -> JobRow | None:
        job_id = await self.run_op(op)
        return None if job_id is None else await self.run_op(admin.find_job(job_id))

    async def bulk_retry_from_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        allow_all: bool = False,
    ) -> int:
        return await self.run_op(
            admin.bulk_retry_from_dlq(kind=kind, queue=queue, tag=tag, allow_all=allow_all)
        )

    async def move_failed_to_dlq(self, job_id: int, reason: str) -> admin.DlqEntry | None:
        return await self.run_op(admin.move_failed_to_dlq(job_id, reason))

    async def bulk_move_failed_to_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        reason: str = "manual",
        allow_all: bool = False,
    ) -> int:
        return await self.run_op(
            admin.bulk_move_failed_to_dlq(
                kind=kind, queue=queue, reason=reason, allow_all=allow_all
            )
        )

    async def purge_dlq_job(self, job_id: int) -> bool:
        return await self.run_op(admin.purge_dlq_job(job_id))

    async def purge_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        before_id: int | None = None,
        before_dlq_at: datetime | None = None,
        allow_all: bool = False,
    ) -> int:
        op = admin.purge_dlq(
            kind=kind,
            queue=queue,
            tag=tag,
            before_id=before_id,
            before_dlq_at=before_dlq_at,
            allow_all=allow_all,
        )
        return await self.run_op(op)

    # Durable batch operations (awa_fast.batch): stored here, applied by the maintenance
    # leader in chunks. Operations and previews are the Awa SDK's dicts.

    async def preview_batch_operation(
        self,
        op_kind: batch.BatchOperationKind,
        *,
        spec: dict[str, Any],
        filter: batch.BatchOperationFilter | None = None,
    ) -> batch.BatchOperationPreview:
        """How many queued jobs the operation would change, and a sample; changes nothing."""
        return await self.run_op(batch.preview(op_kind, spec=spec, filter=filter))

    async def submit_batch_operation(
        self,
        op_kind: batch.BatchOperationKind,
        *,
        spec: dict[str, Any],
        filter: batch.BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> batch.BatchOperation:
        """Store the operation for the leader (a filter-less one needs ``allow_all``)."""
        op = batch.submit(
            op_kind, spec=spec, filter=filter, submitted_by=submitted_by, allow_all=allow_all
        )
        return await self.run_op(op)

    async def preview_set_priority(
        self, priority: int, *, filter: batch.BatchOperationFilter | None = None
    ) -> batch.BatchOperationPreview:
        return await self.preview_batch_operation(
            "set_priority", spec={"priority": priority}, filter=filter
        )

    async def set_priority(
        self,
        priority: int,
        *,
        filter: batch.BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> batch.BatchOperation:
        """Submit an operation setting the priority of the queued jobs ``filter`` selects."""
        return await self.submit_batch_operation(
            "set_priority",
            spec={"priority": priority},
            filter=filter,
            submitted_by=submitted_by,
            allow_all=allow_all,
        )

    async def preview_move_queue(
        self,
        queue: str,
        *,
        priority: int | None = None,
        filter: batch.BatchOperationFilter | None = None,
    ) -> batch.BatchOperationPreview:
        spec = batch.move_spec(queue, priority)
        return await self.preview_batch_operation("move_queue", spec=spec, filter=filter)

    async def move_queue(
        self,
        queue: str,
        *,
        priority: int | None = None,
        filter: batch.BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> batch.BatchOperation:
        """Submit an operation moving the queued jobs ``filter`` selects to ``queue`` (and
        ``priority``, when given)."""
        return await self.submit_batch_operation(
            "move_queue",
            spec=batch.move_spec(queue, priority),
            filter=filter,
            submitted_by=submitted_by,
            allow_all=allow_all,
        )

    async def list_batch_operations(
        self, *, state: batch.BatchOperationState | None = None, limit: int = 100
    ) -> list[batch.BatchOperation]:
        """Newest first."""
        return await self.run_op(batch.list_operations(state=state, limit=limit))

    async def get_batch_operation(self, operation_id: str) -> batch.BatchOperation:
        return await self.run_op(batch.get(operation_id))

    async def cancel_batch_operation(self, operation_id: str) -> batch.BatchOperation:
        """Stop the operation between chunks (``cancelling`` until the leader's next step)."""
        return await self.run_op(batch.cancel(operation_id))

    async def purge_batch_operations(self, before: datetime, *, limit: int = 1000) -> int:
        """Delete finished operations finalized before ``before``; returns how many."""
        return await self.run_op(batch.purge(before, limit=limit))

    async def complete_external(self, callback_id: str, payload: object = None) -> JobRow:
        """Complete the job waiting on ``callback_id`` (CallbackNotFound if none waits)."""
        return await self.run_op(admin.complete_external(callback_id, payload))

    async def fail_external(self, callback_id: str, error: str) -> JobRow:
        return await self.run_op(admin.fail_external(callback_id, error))

    async def retry_external(self, callback_id: str) -> JobRow:
        return await self.run_op(admin.retry_external(callback_id))

    async def resolve_callback(
        self, callback_id: str, payload: object = None, default_action: str = "ignore"
    ) -> admin.ResolveResult:
        """Decide the job waiting on ``callback_id`` by its callback's CEL expressions, else
        by ``default_action`` ("complete", "fail" or "ignore")."""
        op = admin.resolve_callback(callback_id, payload, default_action)
        return await self._run_locked(op)

    async def resume_external(self, callback_id: str, payload: object = None) -> JobRow:
        """Hand ``payload`` to the handler waiting in ``job.wait_for_callback``; a parked
        job runs again (:func:`awa_fast.admin.callbacks.resume_external`)."""
        return await self.run_op(admin.resume_external(callback_id, payload))

    async def heartbeat_callback(
        self, callback_id: str, timeout_seconds: float = DEFAULT_CALLBACK_TIMEOUT
    ) -> JobRow:
        """Push the callback's timeout to ``timeout_seconds`` from now."""
        return await self.run_op(admin.heartbeat_callback(callback_id, timeout_seconds))

    async def list_cron_jobs(self) -> list[dict[str, Any]]:
        return await self.run_op(admin.list_cron_jobs())

    async def list_queue_descriptors(self) -> list[dict[str, Any]]:
        return await self.run_op(admin.list_queue_descriptors())

    async def list_job_kind_descriptors(self) -> list[dict[str, Any]]:
        return await self.run_op(admin.list_job_kind_descriptors())

    async def delete_cron_job(self, name: str) -> bool:
        return await self.run_op(admin.delete_cron_job(name))

    async def close(self) -> None:
        await self._stop_handlers()
        if self._opened:
            await self._pool.close()
            self._opened = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ---- generated by tools/async_to_sync.py from the code above: do not edit ----


def _execute(conn: Connection[Any], op: admin.Op[T]) -> T:
    cur = conn.cursor(row_factory=dict_row)
    if op.first is not None:
        cur.execute(op.first, op.params)
    cur.execute(op.sql, op.params)
    return op.shape(cur.fetchall() if cur.description else [])


@contextmanager
def _reached(pool: ConnectionPool[Any], dsn: str) -> Iterator[Connection[Any]]:
    """A connection of ``pool`` for one call. An outage raises DatabaseUnreachable naming
    the server: no connection within the pool's timeout while the pool cannot open one
    (with every connection merely busy, the pool's own PoolTimeout), or the connection
    lost under the call."""
    try:
        with pool.connection() as conn:
            try:
                yield conn
            except OperationalError as exc:
                if conn.broken:
                    raise unreachable(dsn, f"the connection was lost ({exc})") from exc
                raise
    except PoolTimeout as exc:
        if pool.get_stats().get("pool_size", 0) >= (pool.max_size or 0):
            raise
        raise unreachable(dsn, f"no connection within {pool.timeout:g} s") from exc


class Client(_SyncOnly):
    """The synchronous client: insert jobs, administer them, run handlers. Give
    ``transaction_pooling=True`` when ``dsn`` goes through a transaction pooler
    (PgBouncer's ``pool_mode=transaction``, docs/pgbouncer.md): no connection of this
    client or of the runners it starts then prepares a statement. A call that gets no
    connection within ``connect_timeout`` seconds raises
    :class:`~awa_fast.errors.DatabaseUnreachable` (docs/producing.md)."""

    def __init__(
        self,
        dsn: str,
        *,
        max_connections: int = 10,
        transaction_pooling: bool = False,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(dsn, transaction_pooling=transaction_pooling)
        self._connect_params = {
            **_SESSION,
            **keepalives(dsn),
            **connect_timeout_params(dsn, connect_timeout),
        }
        self._pool = ConnectionPool(
            dsn,
            min_size=0,
            max_size=max_connections,
            open=False,
            kwargs=self._connect_params,
            configure=self._configure,
            timeout=connect_timeout,
        )
        self._opened = False

    def _configure(self, conn: Connection[Any]) -> None:
        """No prepared statements behind a transaction pooler: read as the pool opens each
        connection, for ``serve --pgbouncer`` tells a client made at import afterwards."""
        conn.prepare_threshold = self.database.prepare_threshold()

    def _conn(self) -> Any:
        if not self._opened:
            # One connection first, so that a database out of reach raises at once: the
            # pool would retry in the background, logging each failure, until its timeout.
            try:
                (Connection.connect(self.dsn, **self._connect_params)).close()
            except OperationalError as exc:
                if refused(exc):
                    raise
                raise unreachable(self.dsn, str(exc)) from exc
            self._pool.open()
            self._opened = True
        return _reached(self._pool, self.dsn)

    def insert(self, args: object, **options: Unpack[InsertOptions]) -> JobRow:
        check_insert_options("insert", options)
        with self._conn() as conn:
            return producer.insert(conn, args, **options)

    def migrate(self) -> list[int]:
        """Apply pending schema migrations; returns the versions applied."""
        return _migrate(self.dsn)

    def insert_many(self, items: Iterable[object], **options: Unpack[InsertOptions]) -> list[int]:
        check_insert_options("insert_many", options)
        with self._conn() as conn:
            return producer.insert_many(conn, items, **options)

    def insert_many_copy(
        self,
        items: Iterable[object],
        *,
        opts: Sequence[Mapping[str, Any] | None] | None = None,
        **options: Unpack[InsertOptions],
    ) -> list[JobRow]:
        """:meth:`insert_many` returning the jobs, as the Awa SDK's method of this name does;
        ``opts``, one entry per job or None, sets a job's own ``queue`` or ``ordering_key``."""
        check_insert_options("insert_many_copy", options)
        laid = producer.with_item_options(items, options, opts)
        return self.run_op(admin.get_jobs(self.insert_many(laid, **options)))

    def enqueue_many_copy(
        self,
        items: Iterable[object],
        *,
        opts: Sequence[Mapping[str, Any] | None] | None = None,
        **options: Unpack[InsertOptions],
    ) -> int:
        """:meth:`insert_many` returning how many jobs it inserted (the Awa SDK's name);
        ``opts`` as for :meth:`insert_many_copy`."""
        check_insert_options("enqueue_many_copy", options)
        laid = producer.with_item_options(items, options, opts)
        return len(self.insert_many(laid, **options))

    def transaction(self) -> SyncTransaction:
        """Open a transaction on one of this client's connections, for the application's
        statements and job inserts together (``with client.transaction() as
        tx:``); the block commits when it ends and rolls back on an exception."""
        return SyncTransaction.begin(self._conn())

    def run_op(self, op: admin.Op[T]) -> T:
        """Run an admin operation (an :class:`awa_fast.admin.Op`, as that module's
        functions build them) on one of this client's connections, as this client's admin
        methods run theirs; returns what the Op makes of its rows."""
        with self._conn() as conn:
            return _execute(conn, op)

    def _run_locked(self, locked: admin.Locked[T]) -> T:
        with self._conn() as conn, conn.transaction():
            decided = _execute(conn, locked.lock)
            return _execute(conn, decided) if isinstance(decided, admin.Op) else decided

    def get_job(self, job_id: int) -> JobRow:
        """The job; :class:`~awa_fast.errors.JobNotFound` when there is none."""
        return self.run_op(admin.get_job(job_id))

    def cancel(self, job_id: int) -> JobRow | None:
        """Cancel the job (a running handler sees ``is_cancelled()``); None if finished."""
        cancelled = self.run_op(admin.cancel(job_id))
        return self.run_op(admin.find_job(job_id)) if cancelled else None

    def retry(self, job_id: int) -> JobRow | None:
        """Run a failed, cancelled or parked (waiting_external) job again, attempts reset;
        None if it was in none of those states. A parked job's callback is spent."""
        return self._resolved(admin.retry(job_id))

    def cancel_by_unique_key(
        self,
        kind: str,
        *,
        queue: str | None = None,
        args: object = None,
        period_bucket: int | None = None,
    ) -> JobRow | None:
        """Cancel the oldest unfinished job with this unique key (give ``queue``, ``args``,
        ``period_bucket`` as its UniqueOpts took them); None if there is none."""
        holder = admin.unique_key_holder(kind, queue=queue, args=args, period_bucket=period_bucket)
        job_id = self.run_op(holder)
        return None if job_id is None else self.cancel(job_id)

    def retry_failed(
        self, *, kind: str | None = None, queue: str | None = None
    ) -> admin.RetryFailedResult:
        """Run every failed job of ``kind`` and ``queue`` again (each None for any)."""
        return self.run_op(admin.retry_failed(kind=kind, queue=queue))

    def discard_failed(self, kind: str) -> int:
        return self.run_op(admin.discard_failed(kind))

    def dump_job(self, job_id: int) -> str:
        return self.run_op(admin.dump_job(job_id))

    def dump_run(self, job_id: int, attempt: int | None = None) -> str:
        """One attempt of a job as JSON (the current one unless ``attempt`` is given)."""
        return self.run_op(admin.dump_run(job_id, attempt))

    def pause_queue(self, queue: str, paused_by: str | None = None) -> None:
        self.run_op(admin.pause_queue(queue, paused_by))

    def resume_queue(self, queue: str) -> None:
        self.run_op(admin.resume_queue(queue))

    def drain_queue(self, queue: str) -> int:
        return self.run_op(admin.drain_queue(queue))

    def flush_admin_metadata(self) -> None:
        """Nothing to flush: queue_stats() reads counters the statements that move jobs
        keep in their own transactions, exact at every call (the Awa SDK caches its
        counters; code that flushes them first runs unchanged)."""

    def queue_stats(self) -> list[admin.QueueStat]:
        return self.run_op(admin.queue_stats())

    def storage_status(self) -> str:
        """The Awa SDK's storage-transition report, as pretty JSON: one engine, always
        active, with nothing to transition to (its blockers say so)."""
        return self.run_op(admin.storage_status())

    def list_jobs(self, **filters: Any) -> list[JobRow]:
        """Newest first; filters: ``state``, ``kind``, ``queue``, ``limit`` (100)."""
        return self.run_op(admin.list_jobs(**filters))

    def list_dlq(self, **filters: Any) -> list[admin.DlqEntry]:
        """Dead-lettered jobs, newest first; filters: ``kind``, ``queue``, ``tag``, the
        cursor ``before_dlq_at``/``before_id``, ``limit``."""
        return self.run_op(admin.list_dlq(**filters))

    def get_dlq_job(self, job_id: int) -> admin.DlqEntry | None:
        return self.run_op(admin.get_dlq_job(job_id))

    def dlq_depth(self, *, queue: str | None = None) -> int:
        return self.run_op(admin.dlq_depth(queue=queue))

    def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        return self.run_op(admin.dlq_depth_by_queue())

    def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRow | None:
        op = admin.retry_from_dlq(job_id, run_at=run_at, priority=priority, queue=queue)
        return self._resolved(op)

    def _resolved(self, op: admin.Op[int | None]) -> JobRow | None:
        job_id = self.run_op(op)
        return None if job_id is None else self.run_op(admin.find_job(job_id))

    def bulk_retry_from_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        allow_all: bool = False,
    ) -> int:
        return self.run_op(
            admin.bulk_retry_from_dlq(kind=kind, queue=queue, tag=tag, allow_all=allow_all)
        )

    def move_failed_to_dlq(self, job_id: int, reason: str) -> admin.DlqEntry | None:
        return self.run_op(admin.move_failed_to_dlq(job_id, reason))

    def bulk_move_failed_to_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        reason: str = "manual",
        allow_all: bool = False,
    ) -> int:
        return self.run_op(
            admin.bulk_move_failed_to_dlq(
                kind=kind, queue=queue, reason=reason, allow_all=allow_all
            )
        )

    def purge_dlq_job(self, job_id: int) -> bool:
        return self.run_op(admin.purge_dlq_job(job_id))

    def purge_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        before_id: int | None = None,
        before_dlq_at: datetime | None = None,
        allow_all: bool = False,
    ) -> int:
        op = admin.purge_dlq(
            kind=kind,
            queue=queue,
            tag=tag,
            before_id=before_id,
            before_dlq_at=before_dlq_at,
            allow_all=allow_all,
        )
        return self.run_op(op)

    # Durable batch operations (awa_fast.batch): stored here, applied by the maintenance
    # leader in chunks. Operations and previews are the Awa SDK's dicts.

    def preview_batch_operation(
        self,
        op_kind: batch.BatchOperationKind,
        *,
        spec: dict[str, Any],
        filter: batch.BatchOperationFilter | None = None,
    ) -> batch.BatchOperationPreview:
        """How many queued jobs the operation would change, and a sample; changes nothing."""
        return self.run_op(batch.preview(op_kind, spec=spec, filter=filter))

    def submit_batch_operation(
        self,
        op_kind: batch.BatchOperationKind,
        *,
        spec: dict[str, Any],
        filter: batch.BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> batch.BatchOperation:
        """Store the operation for the leader (a filter-less one needs ``allow_all``)."""
        op = batch.submit(
            op_kind, spec=spec, filter=filter, submitted_by=submitted_by, allow_all=allow_all
        )
        return self.run_op(op)

    def preview_set_priority(
        self, priority: int, *, filter: batch.BatchOperationFilter | None = None
    ) -> batch.BatchOperationPreview:
        return self.preview_batch_operation(
            "set_priority", spec={"priority": priority}, filter=filter
        )

    def set_priority(
        self,
        priority: int,
        *,
        filter: batch.BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> batch.BatchOperation:
        """Submit an operation setting the priority of the queued jobs ``filter`` selects."""
        return self.submit_batch_operation(
            "set_priority",
            spec={"priority": priority},
            filter=filter,
            submitted_by=submitted_by,
            allow_all=allow_all,
        )

    def preview_move_queue(
        self,
        queue: str,
        *,
        priority: int | None = None,
        filter: batch.BatchOperationFilter | None = None,
    ) -> batch.BatchOperationPreview:
        spec = batch.move_spec(queue, priority)
        return self.preview_batch_operation("move_queue", spec=spec, filter=filter)

    def move_queue(
        self,
        queue: str,
        *,
        priority: int | None = None,
        filter: batch.BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> batch.BatchOperation:
        """Submit an operation moving the queued jobs ``filter`` selects to ``queue`` (and
        ``priority``, when given)."""
        return self.submit_batch_operation(
            "move_queue",
            spec=batch.move_spec(queue, priority),
            filter=filter,
            submitted_by=submitted_by,
            allow_all=allow_all,
        )

    def list_batch_operations(
        self, *, state: batch.BatchOperationState | None = None, limit: int = 100
    ) -> list[batch.BatchOperation]:
        """Newest first."""
        return self.run_op(batch.list_operations(state=state, limit=limit))

    def get_batch_operation(self, operation_id: str) -> batch.BatchOperation:
        return self.run_op(batch.get(operation_id))

    def cancel_batch_operation(self, operation_id: str) -> batch.BatchOperation:
        """Stop the operation between chunks (``cancelling`` until the leader's next step)."""
        return self.run_op(batch.cancel(operation_id))

    def purge_batch_operations(self, before: datetime, *, limit: int = 1000) -> int:
        """Delete finished operations finalized before ``before``; returns how many."""
        return self.run_op(batch.purge(before, limit=limit))

    def complete_external(self, callback_id: str, payload: object = None) -> JobRow:
        """Complete the job waiting on ``callback_id`` (CallbackNotFound if none waits)."""
        return self.run_op(admin.complete_external(callback_id, payload))

    def fail_external(self, callback_id: str, error: str) -> JobRow:
        return self.run_op(admin.fail_external(callback_id, error))

    def retry_external(self, callback_id: str) -> JobRow:
        return self.run_op(admin.retry_external(callback_id))

    def resolve_callback(
        self, callback_id: str, payload: object = None, default_action: str = "ignore"
    ) -> admin.ResolveResult:
        """Decide the job waiting on ``callback_id`` by its callback's CEL expressions, else
        by ``default_action`` ("complete", "fail" or "ignore")."""
        op = admin.resolve_callback(callback_id, payload, default_action)
        return self._run_locked(op)

    def resume_external(self, callback_id: str, payload: object = None) -> JobRow:
        """Hand ``payload`` to the handler waiting in ``job.wait_for_callback``; a parked
        job runs again (:func:`awa_fast.admin.callbacks.resume_external`)."""
        return self.run_op(admin.resume_external(callback_id, payload))

    def heartbeat_callback(
        self, callback_id: str, timeout_seconds: float = DEFAULT_CALLBACK_TIMEOUT
    ) -> JobRow:
        """Push the callback's timeout to ``timeout_seconds`` from now."""
        return self.run_op(admin.heartbeat_callback(callback_id, timeout_seconds))

    def list_cron_jobs(self) -> list[dict[str, Any]]:
        return self.run_op(admin.list_cron_jobs())

    def list_queue_descriptors(self) -> list[dict[str, Any]]:
        return self.run_op(admin.list_queue_descriptors())

    def list_job_kind_descriptors(self) -> list[dict[str, Any]]:
        return self.run_op(admin.list_job_kind_descriptors())

    def delete_cron_job(self, name: str) -> bool:
        return self.run_op(admin.delete_cron_job(name))

    def close(self) -> None:
        self._stop_handlers()
        if self._opened:
            self._pool.close()
            self._opened = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
