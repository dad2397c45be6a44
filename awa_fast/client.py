"""The user-facing clients: producers, handler registration, and the runner.

``Client`` is the synchronous twin of ``AsyncClient``, generated from it by
tools/async_to_sync.py, in :mod:`awa_fast.client_sync`. Both share one registration surface
(:class:`~awa_fast.registration.Registration`) and the producer functions in
:mod:`awa_fast.producer`; what differs for real is in :class:`_SyncOnly` and
:class:`_AsyncOnly`. Connection pools open on first use, so a client built at import time in
an application module holds no connection when the pool forks its workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar, Unpack, overload

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from awa_fast import admin, producer
from awa_fast import batch_ops as batch
from awa_fast.client_pool import AsyncClientPool
from awa_fast.db.dsn import for_reads
from awa_fast.db.migrate import migrate as _migrate
from awa_fast.registration import Registration, check_handled, check_registered
from awa_fast.runtime import health
from awa_fast.runtime.config import QueueSpec, parse_queues
from awa_fast.runtime.maintenance_host import MaintenanceHost
from awa_fast.runtime.options import runner_config
from awa_fast.runtime.runner import Runner
from awa_fast.runtime.serve import maintenance_host
from awa_fast.transaction import Transaction
from awa_fast.types import (
    DEFAULT_CALLBACK_TIMEOUT,
    InsertOptions,
    JobRow,
    check_insert_options,
)

T = TypeVar("T")


class _SyncOnly(Registration):
    """What only :class:`~awa_fast.client_sync.Client` has, or does its own way: it starts
    no handlers that outlive a call (``run`` and ``serve`` return when theirs stop)."""

    def health_check(self) -> health.HealthCheck:
        """Whether Postgres answers (``postgres_connected``, within a few seconds, up or
        down). ``healthy`` is False, as in the Awa SDK: this client runs no handlers here
        (``serve``'s pool answers its own ``/health``)."""
        return health.health_of(None, health.available(self.dsn, []))

    def _stop_handlers(self) -> None:
        """Nothing to stop on close: no handlers run on this client's behalf by then."""


class _AsyncOnly(Registration):
    """What only :class:`AsyncClient` has: handlers started on the caller's event loop, and
    their health."""

    def __init__(self, dsn: str, *, transaction_pooling: bool, traces: bool = True) -> None:
        super().__init__(dsn, transaction_pooling=transaction_pooling, traces=traces)
        self._runner: Runner | MaintenanceHost | None = None

    async def health_check(self) -> health.HealthCheck:
        """Whether Postgres answers (within a few seconds, up or down) and, once started,
        whether this client claims and heartbeats: for readiness and liveness probes.
        ``healthy`` is False before ``start()`` and after ``shutdown()``, as in the Awa SDK."""
        return await health.probe(self.dsn, self._runner)

    @overload
    async def start(
        self, queues: None = None, *, maintenance_only: Literal[True], **config: Any
    ) -> MaintenanceHost: ...
    @overload
    async def start(
        self, queues: QueueSpec | None = None, *, processes: int | None = None, **config: Any
    ) -> Runner: ...
    async def start(
        self, queues: QueueSpec | None = None, *, processes: int | None = None, **config: Any
    ) -> Runner | MaintenanceHost:
        """Start handlers for ``queues`` from this event loop: in this process, or in
        ``processes`` forked worker processes. Returns the running runner. ``config`` takes
        :class:`~awa_fast.runtime.config.RunnerConfig`'s fields or the Awa SDK's option names
        (:mod:`awa_fast.runtime.options`), ``global_max_workers`` with queue dicts of
        ``min_workers`` and ``weight`` for its weighted mode
        (:mod:`awa_fast.runtime.claim.shares`). ``maintenance_only=True`` starts a host that
        claims nothing (:mod:`awa_fast.runtime.maintenance_host`): no queues, no handlers."""
        if self._runner is not None:
            raise RuntimeError("this client is already running; call shutdown() first")
        if not config.get("maintenance_only"):
            check_registered(self.handlers)
        settings = runner_config(
            config, queues=queues, pooled=self.database.pooled, traces=self.traces
        )
        runner: Runner | MaintenanceHost
        if settings.maintenance_only:
            runner = maintenance_host(self, queues, settings, processes=processes)
        else:
            given = queues if queues is not None else self.default_queues()
            parsed = parse_queues(given, config=settings)
            check_handled(self.handlers, parsed)
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


# ---- asyncio source: its synchronous twin is generated from it ----


async def _execute_async(conn: AsyncConnection[Any], op: admin.Op[T]) -> T:
    cur = conn.cursor(row_factory=dict_row)
    if op.first is not None:
        await cur.execute(op.first, op.params)
    await cur.execute(op.sql, op.params)
    return op.shape(await cur.fetchall() if cur.description else [])


class AsyncClient(_AsyncOnly):
    """The asyncio client: insert jobs, administer them, run handlers. Give
    ``transaction_pooling=True`` when ``dsn`` goes through a transaction pooler
    (PgBouncer's ``pool_mode=transaction``, docs/pgbouncer.md): no connection of this
    client or of the runners it starts then prepares a statement. A call that gets no
    connection within ``connect_timeout`` seconds raises
    :class:`~awa_fast.errors.DatabaseUnreachable` (docs/producing.md). ``traces=False``
    turns off, for this client's inserts and runners, the spans they make with
    OpenTelemetry set up (docs/observability.md).

    ``dsn`` may name several hosts (``postgresql://a:5432,b:5432/app``): every connection
    goes to the primary among them, and, with no ``target_session_attrs`` in it, it gets
    ``read-write``. ``read_url``, a standby's, takes the reads that may lag behind the
    primary by the standby's replay delay: ``queue_stats`` (docs/high-availability.md)."""

    def __init__(
        self,
        dsn: str,
        *,
        max_connections: int = 10,
        transaction_pooling: bool = False,
        connect_timeout: float = 5.0,
        read_url: str | None = None,
        traces: bool = True,
    ) -> None:
        super().__init__(dsn, transaction_pooling=transaction_pooling, traces=traces)
        self._pool = AsyncClientPool(
            self.dsn,
            max_connections=max_connections,
            connect_timeout=connect_timeout,
            prepare_threshold=lambda: self.database.prepare_threshold(),
            writes=True,
        )
        self._read_pool = (
            None
            if read_url is None
            else AsyncClientPool(
                for_reads(read_url),
                max_connections=max_connections,
                connect_timeout=connect_timeout,
                prepare_threshold=lambda: self.database.prepare_threshold(),
                writes=False,
            )
        )

    async def _conn(self) -> Any:
        return await self._pool.reach()

    async def _read_conn(self) -> Any:
        """A connection for a read that may lag: the read URL's, if one was given."""
        return await (self._read_pool or self._pool).reach()

    async def insert(self, args: object, **options: Unpack[InsertOptions]) -> JobRow:
        check_insert_options("insert", options)
        async with await self._conn() as conn:
            return await producer.insert_async(conn, args, traces=self.traces, **options)

    async def migrate(self) -> list[int]:
        """Apply pending schema migrations; returns the versions applied."""
        return await asyncio.to_thread(_migrate, self.dsn)

    async def insert_many(
        self, items: Iterable[object], **options: Unpack[InsertOptions]
    ) -> list[int]:
        check_insert_options("insert_many", options)
        async with await self._conn() as conn:
            return await producer.insert_many_async(conn, items, traces=self.traces, **options)

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
        return await Transaction.begin(await self._conn(), traces=self.traces)

    async def run_op(self, op: admin.Op[T]) -> T:
        """Run an admin operation (an :class:`awa_fast.admin.Op`, as that module's
        functions build them) on one of this client's connections, as this client's admin
        methods run theirs; returns what the Op makes of its rows."""
        async with await self._conn() as conn:
            return await _execute_async(conn, op)

    async def run_read_op(self, op: admin.Op[T]) -> T:
        """:meth:`run_op` for an Op that only reads, on the read URL's connections if this
        client was given one (else as :meth:`run_op`): what it returns may lag the primary
        by the standby's replay delay. The dashboard's pages read so."""
        async with await self._read_conn() as conn:
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
        """Each queue's counts, read from the read URL if the client was given one (counts
        there lag the primary by the standby's replay delay)."""
        return await self.run_read_op(admin.queue_stats())

    async def queue_depth(self, queue: str) -> int:
        """``queue``'s available jobs, as a backpressure check reads them (docs/producing.md)."""
        return await self.run_op(admin.queue_depth(queue))

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

    # Durable batch operations (awa_fast.batch_ops): stored here, applied by the maintenance
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
        await self._pool.close()
        if self._read_pool is not None:
            await self._read_pool.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
