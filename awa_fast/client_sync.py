"""The synchronous twin of :mod:`awa_fast.client`, generated from its asyncio code by
tools/async_to_sync.py: do not edit."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Unpack

from psycopg import Connection
from psycopg.rows import dict_row

from awa_fast import admin, producer, producer_sync
from awa_fast import batch_ops as batch
from awa_fast.client import T, _SyncOnly
from awa_fast.client_pool_sync import ClientPool
from awa_fast.db.dsn import for_reads
from awa_fast.db.migrate import migrate as _migrate
from awa_fast.transaction_sync import SyncTransaction
from awa_fast.types import (
    DEFAULT_CALLBACK_TIMEOUT,
    InsertOptions,
    JobRow,
    check_insert_options,
)


def _execute(conn: Connection[Any], op: admin.Op[T]) -> T:
    cur = conn.cursor(row_factory=dict_row)
    if op.first is not None:
        cur.execute(op.first, op.params)
    cur.execute(op.sql, op.params)
    return op.shape(cur.fetchall() if cur.description else [])


class Client(_SyncOnly):
    """The synchronous client: insert jobs, administer them, run handlers. Give
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
        self._pool = ClientPool(
            self.dsn,
            max_connections=max_connections,
            connect_timeout=connect_timeout,
            prepare_threshold=lambda: self.database.prepare_threshold(),
            writes=True,
        )
        self._read_pool = (
            None
            if read_url is None
            else ClientPool(
                for_reads(read_url),
                max_connections=max_connections,
                connect_timeout=connect_timeout,
                prepare_threshold=lambda: self.database.prepare_threshold(),
                writes=False,
            )
        )

    def _conn(self) -> Any:
        return self._pool.reach()

    def _read_conn(self) -> Any:
        """A connection for a read that may lag: the read URL's, if one was given."""
        return (self._read_pool or self._pool).reach()

    def insert(self, args: object, **options: Unpack[InsertOptions]) -> JobRow:
        check_insert_options("insert", options)
        with self._conn() as conn:
            return producer_sync.insert(conn, args, traces=self.traces, **options)

    def migrate(self) -> list[int]:
        """Apply pending schema migrations; returns the versions applied."""
        return _migrate(self.dsn)

    def insert_many(self, items: Iterable[object], **options: Unpack[InsertOptions]) -> list[int]:
        check_insert_options("insert_many", options)
        with self._conn() as conn:
            return producer_sync.insert_many(conn, items, traces=self.traces, **options)

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
        return SyncTransaction.begin(self._conn(), traces=self.traces)

    def run_op(self, op: admin.Op[T]) -> T:
        """Run an admin operation (an :class:`awa_fast.admin.Op`, as that module's
        functions build them) on one of this client's connections, as this client's admin
        methods run theirs; returns what the Op makes of its rows."""
        with self._conn() as conn:
            return _execute(conn, op)

    def run_read_op(self, op: admin.Op[T]) -> T:
        """:meth:`run_op` for an Op that only reads, on the read URL's connections if this
        client was given one (else as :meth:`run_op`): what it returns may lag the primary
        by the standby's replay delay. The dashboard's pages read so."""
        with self._read_conn() as conn:
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
        """Each queue's counts, read from the read URL if the client was given one (counts
        there lag the primary by the standby's replay delay)."""
        return self.run_read_op(admin.queue_stats())

    def queue_depth(self, queue: str) -> int:
        """``queue``'s available jobs, as a backpressure check reads them (docs/producing.md)."""
        return self.run_op(admin.queue_depth(queue))

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

    # Durable batch operations (awa_fast.batch_ops): stored here, applied by the maintenance
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
        self._pool.close()
        if self._read_pool is not None:
            self._read_pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
