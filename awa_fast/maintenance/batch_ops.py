"""Durable batch operations, the leader's side: the service that applies the oldest
unfinished operation one step (one transaction) at a time, so progress and cancellation
show between chunks. The clients' side is :mod:`awa_fast.batch_ops`.

A step is one of: start a pending operation (snapshot the ids its filter matches), apply
one chunk of that snapshot, or finalize the operation (``completed`` once the snapshot is
used up, ``cancelled`` once asked, ``failed`` when a statement of it fails for a reason a
retry would not fix).

What a chunk costs: ``batch_chunk`` item rows deleted from the snapshot, then one UPDATE
per changed job. ``priority`` and ``queue`` are keys of the claim index
(``jobs_hot_ready``: queue, priority, ready_xid, id), so Postgres cannot update an available
row in place (HOT): each changed job writes a new row version, a new entry in each of
jobs_hot's indexes (primary key, claim) and leaves a dead version for vacuum; a scheduled
job costs the same in jobs_deferred. The chunk's rows stay locked until its commit (one WAL
flush per chunk): a claim that wants one waits for it, then passes over it, and claims the
new version in a later window (migration 0027). A job already as asked is skipped without a
write.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from awa_fast.db.queries import Q
from awa_fast.maintenance.base import Service
from awa_fast.maintenance.leader import Leader, has_work
from awa_fast.maintenance.stats import MaintenanceStats

# How long a finished operation stays listed before the leader deletes it (the SDK's 90
# days); purge_batch_operations removes them sooner.
RETENTION_S = 90 * 24 * 3600.0

Conn = psycopg.AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class BatchStep:
    """What one step did: the operation's state after it, and the jobs it changed and
    skipped (no longer queued, or already as asked)."""

    operation_id: str
    state: str
    changed: int = 0
    skipped: int = 0


class _Failed(Exception):
    """A statement of operation ``operation_id`` failed with ``error``."""

    def __init__(self, operation_id: uuid.UUID, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.operation_id = operation_id


async def step_oldest(conn: Conn, *, chunk: int, runner_instance: uuid.UUID) -> BatchStep | None:
    """One step of the oldest unfinished operation; None when there is none (then
    operations past their retention are deleted). A connection failure propagates (the
    maintenance loop reconnects and the step runs again: a failed step left nothing
    behind); any other database error finalizes the operation as ``failed`` with it, so
    one bad operation does not hold up those submitted after it."""
    try:
        async with conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(Q.batch_operation_lock_next)
            operation = await cur.fetchone()
            if operation is None:
                await conn.execute(Q.batch_operation_delete_expired, {"limit": chunk})
                return None
            try:
                return await _advance(cur, operation, chunk, runner_instance)
            except psycopg.OperationalError:
                raise
            except psycopg.DatabaseError as exc:  # the statement's, not the connection's
                raise _Failed(operation["id"], exc) from exc
    except _Failed as failed:
        async with conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            return await _finish(cur, failed.operation_id, "failed", runner_instance, str(failed))


async def _advance(
    cur: psycopg.AsyncCursor[dict[str, Any]],
    operation: dict[str, Any],
    chunk: int,
    runner_instance: uuid.UUID,
) -> BatchStep:
    op_id = operation["id"]
    if operation["state"] == "cancelling":
        return await _finish(cur, op_id, "cancelled", runner_instance)
    if operation["state"] == "pending":
        params = {"id": op_id, "filter": Jsonb(operation["filter"])}
        await cur.execute(Q.queue_unpack, {"queue": operation["filter"].get("queue")})
        await cur.execute(Q.batch_operation_start, {**params, "runner_instance": runner_instance})
        return BatchStep(str(op_id), "running")
    return await _apply_chunk(cur, operation, chunk, runner_instance)


async def _apply_chunk(
    cur: psycopg.AsyncCursor[dict[str, Any]],
    operation: dict[str, Any],
    chunk: int,
    runner_instance: uuid.UUID,
) -> BatchStep:
    """Take the next ``chunk`` ids of the snapshot and change those still queued: the
    scheduled ones first, then the available ones (job_batch_apply_deferred says why)."""
    op_id, spec = operation["id"], operation["spec"]
    await cur.execute(Q.batch_item_take, {"id": op_id, "limit": chunk})
    ids = [row["job_id"] for row in await cur.fetchall()]
    if not ids:
        return await _finish(cur, op_id, "completed", runner_instance)
    change = {"ids": ids, "priority": spec.get("priority"), "queue": spec.get("queue")}
    await cur.execute(Q.job_batch_apply_deferred, change)
    changed = cur.rowcount
    await cur.execute(Q.job_batch_apply_hot, change)
    changed += cur.rowcount
    progress = {"processed": changed, "skipped": len(ids) - changed, "after_job_id": max(ids)}
    await cur.execute(Q.batch_operation_advance, {"id": op_id, **progress})
    last = len(ids) < chunk  # the snapshot is used up: no step left for it but this one
    if last:
        await _finish(cur, op_id, "completed", runner_instance)
    return BatchStep(str(op_id), "completed" if last else "running", changed, len(ids) - changed)


async def _finish(
    cur: psycopg.AsyncCursor[dict[str, Any]],
    op_id: uuid.UUID,
    state: str,
    runner_instance: uuid.UUID,
    error: str | None = None,
) -> BatchStep:
    params = {
        "id": op_id,
        "state": state,
        "runner_instance": runner_instance,
        "error": error,
        "retention_s": RETENTION_S,
    }
    await cur.execute(Q.batch_operation_finish, params)
    return BatchStep(str(op_id), state)


@dataclass(frozen=True, slots=True)
class BatchOpsConfig:
    """Every ``interval``, look for an operation; each step changes ``chunk`` jobs at most.
    While one has work left, its steps follow each other without waiting an interval."""

    interval: float = 1.0
    chunk: int = 1000


class BatchOps(Service[BatchOpsConfig]):
    """Steps operations under ``leader``'s term, recording ``runner_instance`` as the
    runner that started and finalized them, and counting the jobs changed in ``stats``."""

    name = "batch_ops"

    def __init__(
        self,
        *,
        leader: Leader,
        stats: MaintenanceStats,
        config: BatchOpsConfig,
        runner_instance: uuid.UUID,
    ) -> None:
        super().__init__(leader=leader, stats=stats, config=config)
        self.runner_instance = runner_instance

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> BatchStep | None:
        """Start the oldest unfinished operation, apply one chunk of it, or finalize it;
        returns what the step did, None when no operation is unfinished. A look comes
        first, unfenced: a leader with no operations opens no transaction for them."""
        if not await has_work(conn, Q.batch_operation_due):
            return None
        async with self.leader.fenced(conn):
            done = await step_oldest(
                conn, chunk=self.config.chunk, runner_instance=self.runner_instance
            )
        if done is not None:
            self.stats.batch_changed += done.changed
        return done

    async def step(self, conn: psycopg.AsyncConnection[Any]) -> float:
        """One step; an operation with work left takes its next step at once."""
        return 0.0 if await self.run_once(conn) is not None else self.config.interval
