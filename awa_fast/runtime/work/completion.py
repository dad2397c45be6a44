"""Completing an attempt in its handler's own transaction (``job.complete_in(conn)``).

A handler that writes business rows in the same database commits them and the completion
of exactly its attempt together: the completion is the committer's own guarded statement
(``job_complete_many``, by id, run lease and state ``running``) run on the handler's
connection, with the follow-ups declared for completion inserted beside it. No row
matched means the attempt no longer owns the job (rescued, cancelled, resolved), and
:class:`~awa_fast.errors.LeaseLost` is raised so the handler's block rolls back.

The runtime writes no outcome for such an attempt, whatever the handler does after: had
it pushed a completion too, a rolled-back transaction would leave the job completed
without its rows. A transaction that rolls back instead leaves the job running with no
worker behind it: its heartbeat stops with its slot, and the rescuer retries it once it
is ``heartbeat_staleness`` silent (docs/handlers.md).
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from awa_fast.db.connections import attempts_params
from awa_fast.db.queries import Q
from awa_fast.errors import LeaseLost
from awa_fast.lifecycle.followups import (
    FollowupRegistry,
    OutcomeContext,
    Spec,
    insert_followups,
    insert_followups_async,
)
from awa_fast.lifecycle.transitions import Outcome
from awa_fast.types import JobRow
from awa_fast.worker import Job

Conn = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]


class InTransaction:
    """Completes attempts in their handlers' transactions, with the completion's
    follow-ups from ``followups``."""

    def __init__(self, followups: FollowupRegistry) -> None:
        self.followups = followups

    async def complete(self, job: Job[Any], conn: psycopg.AsyncConnection[Any]) -> None:
        specs = self._ready(job, conn)
        cur = await conn.execute(Q.job_complete_many, _params(job))
        _owned(job, cur.rowcount)
        if specs:
            found = conn.cursor(row_factory=dict_row)
            await found.execute(Q.job_get, {"id": job.id})
            row, ctx = _row(job, await found.fetchone())
            await insert_followups_async(conn, specs, row, orjson.dumps(row.args), ctx)

    def complete_sync(self, job: Job[Any], conn: psycopg.Connection[Any]) -> None:
        specs = self._ready(job, conn)
        cur = conn.execute(Q.job_complete_many, _params(job))
        _owned(job, cur.rowcount)
        if specs:
            found = conn.cursor(row_factory=dict_row).execute(Q.job_get, {"id": job.id})
            row, ctx = _row(job, found.fetchone())
            insert_followups(conn, specs, row, orjson.dumps(row.args), ctx)

    def _ready(self, job: Job[Any], conn: Conn) -> tuple[Spec, ...]:
        """The completion's follow-ups, once ``conn`` is checked: a connection that would
        commit the completion alone, at once, defeats the point and is refused."""
        if not isinstance(conn, psycopg.Connection | psycopg.AsyncConnection):
            raise TypeError(f"complete_in takes a psycopg connection, got {type(conn).__name__}")
        if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
            raise ValueError(
                f"job {job.id}: complete_in needs a transaction the handler commits; this "
                "connection is in autocommit with none open (use `with conn.transaction():`)"
            )
        return tuple(self.followups.for_(Outcome.COMPLETED, job.kind))


def _params(job: Job[Any]) -> dict[str, Any]:
    return attempts_params({job.id: job.run_lease})


def _owned(job: Job[Any], completed: int) -> None:
    if completed != 1:
        raise LeaseLost(job.id, job.run_lease, "it was rescued, cancelled or decided first")


def _row(job: Job[Any], found: dict[str, Any] | None) -> tuple[JobRow, OutcomeContext]:
    assert found is not None  # completed in this transaction, so visible in it
    return JobRow.from_row(found), OutcomeContext(Outcome.COMPLETED, job.attempt)
