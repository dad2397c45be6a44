"""The rescuer: retries (or fails, on their last attempt) the attempts that cannot finish
on their own: those of dead hosts, callbacks that timed out and, in a backstop sweep of the
whole table, stale and overdue attempts no dead host accounts for.

Each rescue is guarded by the attempt's run_lease and respects max_attempts; rescued
events and ``on_rescued_enqueue`` follow-ups go out after the rescue commits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
import psycopg
from psycopg.rows import dict_row

from awa_fast.db import transitions as tr
from awa_fast.db.connections import APPLY_IN_TRANSACTION
from awa_fast.db.queries import Q
from awa_fast.maintenance.leader import Leader, has_work
from awa_fast.maintenance.stats import MaintenanceStats
from awa_fast.runtime.followups import FollowupRegistry, OutcomeContext, Spec, insert_followups
from awa_fast.runtime.hooks import EventType, HookDispatcher
from awa_fast.types import JobRow

log = logging.getLogger("awa_fast.maintenance")

STALE = "heartbeat stale: the host running it stopped reporting"


class Sweep(NamedTuple):
    """A rescue by a scan: the selecting query, the state its attempts leave, the error
    each records, and whether it is a backstop (a read of all of jobs_hot)."""

    select: str
    from_state: str
    reason: str
    backstop: bool


RESCUES = (
    Sweep("job_select_callback_expired", "waiting_external", "callback timed out", False),
    Sweep("job_select_stale", "running", STALE, True),
    Sweep("job_select_overdue", "running", "deadline exceeded", True),
)


def _no_dlq() -> dict[str, Any]:
    return {"dlq_all": False, "no_dlq": [], "dlq": []}


@dataclass(frozen=True, slots=True)
class RescuerConfig:
    """How often to rescue, and whom: attempts of hosts silent for ``heartbeat_staleness``
    and attempts ``deadline_grace`` past their deadline, ``batch`` a query. The backstop
    sweeps run every ``backstop_interval`` only, since each reads all of jobs_hot.
    ``dlq`` is the DLQ policy as job_rescue_many's parameters
    (:meth:`~awa_fast.runtime.config.RunnerConfig.dlq_params`): none by default."""

    interval: float = 1.0
    backstop_interval: float = 60.0
    batch: int = 1000
    heartbeat_staleness: float = 30.0
    deadline_grace: float = 5.0
    backoff: tr.Backoff = field(default_factory=tr.Backoff)
    dlq: Mapping[str, Any] = field(default_factory=_no_dlq)


async def _select(
    conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any], *, by_index: bool
) -> list[tuple[int, int]]:
    """The (id, run_lease) pairs a sweep selects. ``by_index``: under the hot connections'
    planner settings (:mod:`awa_fast.db.connections`), so the callback sweep reads the few
    parked rows through its partial index whatever the table's statistics say; a backstop
    reads the whole table anyway, and is left to the planner."""
    async with conn.transaction():
        if by_index:
            await conn.execute(APPLY_IN_TRANSACTION)
        cur = await conn.execute(query, params)
        return await cur.fetchall()


class Rescuer:
    """Rescues under ``leader``'s term, counting in ``stats``; sends rescued events to
    ``hooks`` and enqueues ``followups`` on connections of its own to ``dsn``."""

    def __init__(
        self,
        *,
        dsn: str,
        leader: Leader,
        followups: FollowupRegistry,
        hooks: HookDispatcher,
        stats: MaintenanceStats,
        config: RescuerConfig,
    ) -> None:
        self.dsn = dsn
        self.leader = leader
        self.followups = followups
        self.hooks = hooks
        self.stats = stats
        self.config = config

    async def run_once(
        self, conn: psycopg.AsyncConnection[Any], *, backstop: bool = True
    ) -> dict[str, int]:
        """Rescue dead hosts' attempts, then each sweep's (the backstops with
        ``backstop`` only); returns the attempts rescued by the query that found them."""
        limits = {
            "staleness_s": self.config.heartbeat_staleness,
            "grace_s": self.config.deadline_grace,
            "limit": self.config.batch,
        }
        counts = await self._rescue_dead_hosts(conn, limits)
        for sweep in RESCUES:
            if backstop or not sweep.backstop:
                found = await _select(
                    conn, getattr(Q, sweep.select), limits, by_index=not sweep.backstop
                )
                if found:
                    counts[sweep.select] = await self._rescue_found(conn, found, sweep)
        for key, value in counts.items():
            self.stats.rescued[key] = self.stats.rescued.get(key, 0) + value
        return counts

    async def _rescue_dead_hosts(
        self, conn: psycopg.AsyncConnection[Any], limits: dict[str, Any]
    ) -> dict[str, int]:
        """Remove the hosts whose heartbeat went stale, with their standby claims, and
        rescue their running attempts in the same transaction. A look comes first,
        unfenced: a leader whose hosts all beat opens no transaction for them."""
        if not await has_work(conn, Q.host_rescue_due, limits):
            return {}
        async with self.leader.fenced(conn):
            cur = await conn.execute(Q.host_take_dead, limits)
            dead = [row[0] for row in await cur.fetchall()]
            await conn.execute(Q.standby_drop_orphans)
            if not dead:
                return {}
            cur = await conn.execute(Q.job_select_of_hosts, {"hosts": dead})
            rescued = await self._rescue(conn, await cur.fetchall(), "running", STALE)
        log.warning(
            "hosts %s stopped heartbeating: %d attempts rescued",
            dead,
            len(rescued),
            extra={"hosts": dead, "job_ids": rescued, "reason": STALE},
        )
        await self._after_rescue(rescued, STALE)
        return {"host_take_dead": len(rescued)}

    async def _rescue_found(
        self, conn: psycopg.AsyncConnection[Any], found: Sequence[tuple[int, int]], sweep: Sweep
    ) -> int:
        async with self.leader.fenced(conn):
            rescued = await self._rescue(conn, found, sweep.from_state, sweep.reason)
        if rescued:
            log.warning(
                "rescued %d attempts: %s",
                len(rescued),
                sweep.reason,
                extra={"job_ids": rescued, "reason": sweep.reason},
            )
            await self._after_rescue(rescued, sweep.reason)
        return len(rescued)

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
        params = tr.rescue_params(
            dict(found),
            dict.fromkeys((job_id for job_id, _ in found), reason),
            from_state=from_state,
            backoff=self.config.backoff,
            dlq=self.config.dlq,
        )
        cur = await conn.execute(Q.job_rescue_many, params)
        return [row[0] for row in await cur.fetchall()]

    async def _after_rescue(self, ids: list[int], reason: str) -> None:
        """Rescued events and follow-ups, after the rescue committed. A failing follow-up
        is logged; the rescue stands."""
        wanted = any(outcome is tr.Outcome.RESCUED for outcome, _ in self.followups.specs)
        if not ids or not (wanted or self.hooks.registry.hooks):
            return
        async with await psycopg.AsyncConnection.connect(
            self.dsn, application_name="awa-fast maintenance"
        ) as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(Q.job_get_many, {"ids": ids})
            rows = [JobRow.from_row(r) for r in await cur.fetchall()]
        for row in rows:
            if self.hooks.registry.wants(row.kind):
                self.hooks.submit(EventType.RESCUED, row, reason=reason, attempt=row.attempt)
            specs = self.followups.for_(tr.Outcome.RESCUED, row.kind)
            if specs:
                ctx = OutcomeContext(tr.Outcome.RESCUED, row.attempt, reason=reason)
                await asyncio.to_thread(self._insert_followups, specs, row, ctx)

    def _insert_followups(self, specs: Sequence[Spec], row: JobRow, ctx: OutcomeContext) -> None:
        try:
            with (
                psycopg.connect(self.dsn, application_name="awa-fast maintenance") as conn,
                conn.transaction(),
            ):
                insert_followups(conn, specs, row, orjson.dumps(row.args), ctx)
        except Exception:
            log.exception(
                "job %s: rescue follow-up failed; the rescue stands",
                row.id,
                extra={"job_id": row.id},
            )
