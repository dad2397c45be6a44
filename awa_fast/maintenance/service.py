"""The maintenance loop: every host runs it; only the leader promotes, rescues, cleans
(finished jobs and stale descriptors), enqueues periodic jobs and applies batch operations.

Each step is a ``*_once`` method that returns what it did, so tests call them directly.
Every transaction of a step that changes rows is fenced by the leader's term
(:meth:`awa_fast.maintenance.leader.Leader.fenced`): a step of a leader whose term is
over raises :class:`~awa_fast.maintenance.leader.Deposed` having changed nothing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from awa_fast import descriptors
from awa_fast.db import transitions as tr
from awa_fast.db.connections import APPLY_IN_TRANSACTION
from awa_fast.db.queries import Q
from awa_fast.db.transitions import rescue_params
from awa_fast.maintenance import batch, periodic
from awa_fast.maintenance.leader import Deposed, Leader
from awa_fast.runtime.followups import OutcomeContext, insert_followups
from awa_fast.runtime.hooks import EventType, HookDispatcher
from awa_fast.types import JobRow

if TYPE_CHECKING:
    from awa_fast.runtime.config import RunnerConfig
    from awa_fast.runtime.handlers import Handlers

log = logging.getLogger("awa_fast.maintenance")

MIN_PROMOTE_PAUSE = 0.002  # a due job that a concurrent promoter holds: do not spin on it

STALE = "heartbeat stale: the host running it stopped reporting"
# (selecting query, the state rescued attempts leave, the error each records, whether it is
# a backstop: a read of all of jobs_hot, run every backstop_interval only)
RESCUES = (
    ("job_select_callback_expired", "waiting_external", "callback timed out", False),
    ("job_select_stale", "running", STALE, True),
    ("job_select_overdue", "running", "deadline exceeded", True),
)


async def _sweep(
    conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any], *, by_index: bool
) -> list[tuple[int, int]]:
    """The (id, run_lease) pairs a rescue sweep selects. ``by_index``: read by an index
    scan of a partial index (the callback sweep's, of parked rows), under the hot
    connections' planner settings; otherwise a backstop's read of the whole table, left
    to the planner (under those settings its sequential scan would cost enough to be
    JIT-compiled each time).

    Parked rows number at most the fleet's concurrency, while jobs_hot holds every job
    waiting to run and every row version dead since the last vacuum. Left to itself, the
    planner read the whole table for such a sweep, with parallel workers, every rescue
    interval while the table had no statistics (a new table: autovacuum may take a
    minute to analyze it), and with or without them took a bitmap of the index, which
    visits every dead entry since the last vacuum where an index scan skips those already
    marked dead (awa_fast.db.connections)."""
    async with conn.transaction():
        if by_index:
            await conn.execute(APPLY_IN_TRANSACTION)
        cur = await conn.execute(query, params)
        return await cur.fetchall()


@dataclass(slots=True)
class MaintenanceStats:
    promoted: int = 0
    rescued: dict[str, int] = field(default_factory=dict)
    deleted: int = 0
    descriptors_deleted: int = 0
    vacuumed: int = 0
    periodic: int = 0


class Maintenance:
    def __init__(
        self, dsn: str, config: RunnerConfig, handlers: Handlers, hooks: HookDispatcher
    ) -> None:
        self.dsn = dsn
        self.config = config
        self.handlers = handlers
        self.hooks = hooks
        self.leader = Leader(dsn, interval=config.election_interval)
        self.stats = MaintenanceStats()
        self.instance = uuid.uuid4()  # recorded as runner_instance by the batch steps

    async def run(self, stopping: Callable[[], bool]) -> None:
        conn: psycopg.AsyncConnection[Any] | None = None
        loop = asyncio.get_running_loop()
        next_rescue = next_backstop = next_cleanup = next_vacuum = 0.0
        next_cron = next_batch = 0.0
        election: asyncio.Task[None] | None = None
        try:
            await self.leader.check()
            # renewals on a task of their own: a long step must not let the term lapse
            election = asyncio.create_task(self._elect(), name="awa-fast election")
            while not stopping():
                if election.done():
                    election.result()  # its exception ends this loop, for its supervisor
                now = loop.time()
                pause = self.config.promote_interval
                try:
                    if self.leader.is_leader:
                        if conn is None or conn.closed:
                            conn = await self.leader.connect(
                                application_name="awa-fast maintenance"
                            )
                        await self.promote_once(conn)
                        pause = await self.promote_pause(conn)
                        if now >= next_rescue:
                            next_rescue = now + self.config.rescue_interval
                            backstop = now >= next_backstop
                            if backstop:
                                next_backstop = now + self.config.backstop_interval
                            await self.rescue_once(conn, backstop=backstop)
                        if now >= next_cleanup:
                            next_cleanup = now + self.config.cleanup_interval
                            await self.clean_once(conn)
                            await self.clean_descriptors_once(conn)
                        if now >= next_vacuum:
                            next_vacuum = now + self.config.vacuum_interval
                            await self.vacuum_once(conn)
                        if now >= next_cron:
                            next_cron = now + self.config.cron_interval
                            await self.cron_once(conn)
                        if now >= next_batch:
                            stepped = await self.batch_once(conn)
                            # an operation with work left goes on at the next iteration
                            next_batch = now + (0.0 if stepped else self.config.batch_interval)
                except Deposed:
                    pass  # the leader logged it; its next election decides what follows
                except psycopg.OperationalError as exc:
                    log.warning("maintenance step failed (%s); retrying", exc)
                    if conn is not None:
                        await conn.close()
                    conn = None
                await asyncio.sleep(pause)
        finally:
            if election is not None:
                election.cancel()
                await asyncio.gather(election, return_exceptions=True)  # raised above already
            if conn is not None:
                await conn.close()
            await self.leader.close()

    async def _elect(self) -> None:
        """Renew the term (or try for one) every election interval."""
        while True:
            await asyncio.sleep(self.config.election_interval)
            await self.leader.check()

    async def cron_once(
        self, conn: psycopg.AsyncConnection[Any], *, now: datetime | None = None
    ) -> int:
        """Enqueue the periodic jobs that fell due by ``now`` (the server's clock)."""
        async with self.leader.fenced(conn):
            enqueued = await periodic.enqueue_due(conn, now=now)
        self.stats.periodic += enqueued
        return enqueued

    async def batch_once(self, conn: psycopg.AsyncConnection[Any]) -> batch.BatchStep | None:
        """One step of the oldest unfinished batch operation: start it, apply one chunk of
        ``batch_chunk`` jobs, or finalize it (:mod:`awa_fast.maintenance.batch`)."""
        async with self.leader.fenced(conn):
            return await batch.step(
                conn, chunk=self.config.batch_chunk, runner_instance=self.instance
            )

    async def promote_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Move due scheduled/retryable jobs into the claimable table, in batches."""
        total = 0
        while True:
            async with self.leader.fenced(conn):
                cur = await conn.execute(Q.job_promote_due, {"limit": self.config.promote_batch})
            total += cur.rowcount
            self.stats.promoted += cur.rowcount
            if cur.rowcount < self.config.promote_batch:
                return total

    async def promote_pause(self, conn: psycopg.AsyncConnection[Any]) -> float:
        """Seconds until the next promotion: ``promote_interval``, or less when a deferred
        job falls due sooner, so jobs scheduled for a moment become claimable at that
        moment rather than up to an interval later."""
        cur = await conn.execute(Q.job_next_due_in)
        row = await cur.fetchone()
        if row is None or row[0] is None:
            return self.config.promote_interval
        return min(self.config.promote_interval, max(MIN_PROMOTE_PAUSE, float(row[0])))

    async def rescue_once(
        self, conn: psycopg.AsyncConnection[Any], *, backstop: bool = True
    ) -> dict[str, int]:
        """Rescue the attempts of dead hosts, callback-expired attempts and, with
        ``backstop``, stale and overdue attempts no dead host accounts for (each guarded by
        run_lease, each respecting max_attempts); then events and rescue follow-ups, best
        effort."""
        limits = {
            "staleness_s": self.config.heartbeat_staleness,
            "grace_s": self.config.deadline_grace,
            "limit": self.config.rescue_batch,
        }
        counts: dict[str, int] = {}
        async with self.leader.fenced(conn):
            cur = await conn.execute(Q.host_take_dead, limits)
            dead = [row[0] for row in await cur.fetchall()]
            await conn.execute(Q.standby_drop_orphans)
            if dead:
                cur = await conn.execute(Q.job_select_of_hosts, {"hosts": dead})
                found = await cur.fetchall()
                rescued = await self._rescue(conn, found, "running", STALE)
                counts["host_take_dead"] = len(rescued)
        if dead:
            log.warning(
                "hosts %s stopped heartbeating: %d attempts rescued",
                dead,
                len(rescued),
                extra={"hosts": dead, "job_ids": rescued, "reason": STALE},
            )
            await self._after_rescue(rescued, STALE)
        for select, from_state, reason, is_backstop in RESCUES:
            if is_backstop and not backstop:
                continue
            found = await _sweep(conn, getattr(Q, select), limits, by_index=not is_backstop)
            if not found:
                continue
            async with self.leader.fenced(conn):
                rescued = await self._rescue(conn, found, from_state, reason)
            counts[select] = len(rescued)
            if rescued:
                log.warning(
                    "rescued %d attempts: %s",
                    len(rescued),
                    reason,
                    extra={"job_ids": rescued, "reason": reason},
                )
                await self._after_rescue(rescued, reason)
        for key, value in counts.items():
            self.stats.rescued[key] = self.stats.rescued.get(key, 0) + value
        return counts

    async def _rescue(
        self,
        conn: psycopg.AsyncConnection[Any],
        found: Sequence[tuple[int, int]],
        from_state: str,
        reason: str,
    ) -> list[int]:
        """Rescue the (id, run_lease) attempts ``found`` in ``from_state``; returns the ids
        rescued (an attempt that finished or moved on meanwhile is left alone)."""
        if not found:
            return []
        params = rescue_params(
            dict(found),
            dict.fromkeys((job_id for job_id, _ in found), reason),
            from_state=from_state,
            backoff=self.config.backoff,
            dlq=self.config.dlq_params(),
        )
        cur = await conn.execute(Q.job_rescue_many, params)
        return [row[0] for row in await cur.fetchall()]

    async def _after_rescue(self, ids: list[int], reason: str) -> None:
        """Rescued events and on_rescued_enqueue follow-ups, after the rescue committed.
        A failing follow-up is logged; the rescue stands."""
        specs_wanted = any(o is tr.Outcome.RESCUED for o, _ in self.handlers.followups.specs)
        if not specs_wanted and not self.hooks.registry.hooks:
            return
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(Q.job_get_many, {"ids": ids})
            rows = [JobRow.from_row(r) for r in await cur.fetchall()]
        for row in rows:
            if self.hooks.registry.wants(row.kind):
                self.hooks.submit(EventType.RESCUED, row, reason=reason, attempt=row.attempt)
            specs = self.handlers.followups.for_(tr.Outcome.RESCUED, row.kind)
            if specs:
                ctx = OutcomeContext(tr.Outcome.RESCUED, row.attempt, reason=reason)
                await asyncio.to_thread(self._rescue_followups, specs, row, ctx)

    def _rescue_followups(self, specs: Any, row: JobRow, ctx: OutcomeContext) -> None:
        import orjson

        try:
            with psycopg.connect(self.dsn) as conn, conn.transaction():
                insert_followups(conn, specs, row, orjson.dumps(row.args), ctx)
        except Exception:
            log.exception(
                "job %s: rescue follow-up failed; the rescue stands",
                row.id,
                extra={"job_id": row.id},
            )

    async def vacuum_once(self, conn: psycopg.AsyncConnection[Any]) -> list[str]:
        """VACUUM the job tables whose dead tuples passed ``vacuum_dead_tuples``: under a
        sustained load the claim index fills with dead entries faster than autovacuum (a
        minute between checks) removes them, and every claim walks them.

        One process, no ANALYZE: a parallel vacuum's workers (one per index) and a
        30,000-row sample every few seconds took the cores from the committer — completion
        statements slowed from milliseconds to half a second while one ran. The hot
        statements do not depend on fresh statistics (their plans are tested without any);
        autovacuum still analyzes on its own schedule.

        Not fenced by the term: VACUUM runs outside any transaction, and one run by a
        leader whose term is over changes no row."""
        cur = await conn.execute(Q.job_tables_dead_tuples)
        due = [
            name for name, dead in await cur.fetchall() if dead >= self.config.vacuum_dead_tuples
        ]
        for name in due:
            await conn.execute(f"VACUUM (PARALLEL 0) awa_fast.{name}")
        self.stats.vacuumed += len(due)
        return due

    async def clean_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Delete finished jobs past retention (per queue where configured), in bounded
        batches; each batch counts the failed ones it deletes per queue as it deletes them
        (retry_failed's ``pruned_failed_count``)."""
        overrides = dict(self.config.queue_retention)
        default = (self.config.completed_retention, self.config.failed_retention)
        scopes: list[tuple[str | None, tuple[float, float]]] = [
            *overrides.items(),
            (None, default),
        ]
        total = 0
        for queue, (completed_s, failed_s) in scopes:
            params = {
                "completed_s": completed_s,
                "failed_s": failed_s,
                "limit": self.config.cleanup_batch,
                "queue": queue,
                "excluded": list(overrides),
            }
            while True:
                async with self.leader.fenced(conn):
                    cur = await conn.execute(Q.job_delete_expired, params)
                    [(deleted,)] = await cur.fetchall()
                total += deleted
                if deleted < self.config.cleanup_batch:
                    break
        self.stats.deleted += total
        return total

    async def clean_descriptors_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Delete the queue and kind descriptors no host refreshed within
        ``descriptor_retention`` (none when it is 0): what code no longer running declared.
        Live hosts refresh theirs (:meth:`awa_fast.runtime.runner.Runner._refresh_descriptors`)."""
        retention = self.config.descriptor_retention
        if not retention:
            return 0
        async with self.leader.fenced(conn):
            deleted = await descriptors.delete_stale(conn, retention=retention)
        if deleted:
            log.info("deleted %d descriptors unrefreshed for %g s", deleted, retention)
        self.stats.descriptors_deleted += deleted
        return deleted
