"""The rescuer: retries (or fails, on their last attempt) the attempts that cannot finish
on their own: those of dead hosts, callbacks that timed out and, in a backstop sweep of the
whole table, stale and overdue attempts no dead host accounts for.

A host is dead when its session lock is free (it is gone: its connection to the database
closed) or when its heartbeat is stale (it froze, or was cut off). A gone host's attempts
that it held unstarted at its last heartbeat are given back with their attempt; the rest
are rescued. Neither rule counts time when nobody could reach the database: a rule applies
only once the server and this leader's connection have been up for its window (the
staleness, or :data:`SETTLE` for locks), so that live hosts have beaten and taken their
locks again first.

Each rescue is guarded by the attempt's run_lease and respects max_attempts; rescued
events and ``on_rescued_enqueue`` follow-ups go out after the rescue commits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
import psycopg
from psycopg.rows import dict_row

from awa_fast.db.connections import APPLY_IN_TRANSACTION, attempts_params, rescue_params
from awa_fast.db.queries import Q
from awa_fast.lifecycle import transitions as tr
from awa_fast.lifecycle.followups import FollowupRegistry, OutcomeContext, Spec, insert_followups
from awa_fast.lifecycle.hooks import EventType, HookDispatcher
from awa_fast.maintenance.base import Service
from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.stats import MaintenanceStats
from awa_fast.types import JobRow

log = logging.getLogger("awa_fast.maintenance")

STALE = "heartbeat stale: the host running it stopped reporting"
GONE = "host gone: its connection to the database closed"
GIVEN_BACK = "host gone before it started the job: given back, its attempt not counted"
# A host found gone is looked at again after this pause, in the transaction that takes it:
# one whose connection was only cut (pg_terminate_backend, a proxy restart) has its lock
# again by then.
CONFIRM_PAUSE = 0.25
# Seconds the server and this leader's connection must have been up before a free lock
# counts: a live host reconnects within its heartbeat's retry delay (2 s at most) and
# takes its lock again first thing.
SETTLE = 5.0


class Sweep(NamedTuple):
    """A rescue by a scan: the selecting query, the state its attempts leave, the error
    each records, whether it is a backstop (a read of all of jobs_hot), and whether it
    counts a silence (which the database's own downtime may explain)."""

    select: str
    from_state: str
    reason: str
    backstop: bool
    silence: bool = False


class HostRule(NamedTuple):
    """What a dead host was: gone (its lock free, its heartbeat fresh) or stale; the error
    its rescued attempts record, the count they are added to, and what the log says."""

    gone: bool
    reason: str
    sweep: str
    said: str


_GONE = HostRule(True, GONE, "host_gone", "are gone (their connections closed)")
_STALE = HostRule(False, STALE, "host_take_dead", "stopped heartbeating")

RESCUES = (
    Sweep("job_select_callback_expired", "waiting_external", "callback timed out", False),
    Sweep("job_select_stale", "running", STALE, True, silence=True),
    Sweep("job_select_overdue", "running", "deadline exceeded", True),
)


def _no_dlq() -> dict[str, Any]:
    return {"dlq_all": False, "no_dlq": [], "dlq": []}


@dataclass(frozen=True, slots=True)
class RescuerConfig:
    """How often to rescue, and whom: attempts of hosts gone (their lock free, counted
    once the database has been up for ``settle``) or silent for ``heartbeat_staleness``,
    and attempts ``deadline_grace`` past their deadline, ``batch`` a query. The backstop
    sweeps run every ``backstop_interval`` only, since each reads all of jobs_hot.
    ``dlq`` is the DLQ policy as job_rescue_many's parameters
    (:meth:`~awa_fast.runtime.config.RunnerConfig.dlq_params`): none by default."""

    interval: float = 1.0
    backstop_interval: float = 60.0
    batch: int = 1000
    heartbeat_staleness: float = 30.0
    settle: float = SETTLE
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


class Rescuer(Service[RescuerConfig]):
    """Rescues under ``leader``'s term, counting in ``stats``; sends rescued events to
    ``hooks`` and enqueues ``followups`` on connections of its own to ``dsn``."""

    name = "rescuer"

    def __init__(
        self,
        *,
        leader: Leader,
        stats: MaintenanceStats,
        config: RescuerConfig,
        dsn: str,
        followups: FollowupRegistry,
        hooks: HookDispatcher,
    ) -> None:
        super().__init__(leader=leader, stats=stats, config=config)
        self.dsn = dsn
        self.followups = followups
        self.hooks = hooks
        self._backstop_at = 0.0  # when the next backstop sweep is due (monotonic)

    async def step(self, conn: psycopg.AsyncConnection[Any]) -> float:
        """A pass, with the backstop sweeps when their own interval has passed."""
        now = time.monotonic()
        backstop = now >= self._backstop_at
        if backstop:
            self._backstop_at = now + self.config.backstop_interval
        await self.run_once(conn, backstop=backstop)
        return self.config.interval

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
        rules = self._rules(limits)
        counts = await self._rescue_dead_hosts(conn, rules)
        for sweep in RESCUES:
            if sweep.silence and not rules["by_staleness"]:
                continue
            if backstop or not sweep.backstop:
                found = await _select(
                    conn, getattr(Q, sweep.select), limits, by_index=not sweep.backstop
                )
                if found:
                    counts[sweep.select] = await self._rescue_found(conn, found, sweep)
        for key, value in counts.items():
            self.stats.rescued[key] = self.stats.rescued.get(key, 0) + value
        return counts

    def _rules(self, limits: dict[str, Any]) -> dict[str, Any]:
        """``limits`` and which rules for dead hosts apply now: each only once this
        leader has reached the database for its whole window (the SQL holds the server's
        own uptime to the same)."""
        up = self.leader.up_for(time.monotonic())
        return {
            **limits,
            "by_staleness": up >= self.config.heartbeat_staleness,
            "by_lock": up >= self.config.settle,
            "settle_s": self.config.settle,
        }

    async def _rescue_dead_hosts(
        self, conn: psycopg.AsyncConnection[Any], params: dict[str, Any]
    ) -> dict[str, int]:
        """Remove the hosts gone or stale, with their standby claims, and settle their
        running attempts in the same transaction. A look comes first, unfenced: a leader
        whose hosts all live opens no transaction for them. A host seen gone is taken only
        if it is gone still after :data:`CONFIRM_PAUSE`."""
        cur = await conn.execute(Q.host_rescue_due, params)
        seen_gone, other = await cur.fetchone() or (False, False)
        if not (seen_gone or other):
            return {}
        if seen_gone:
            await asyncio.sleep(CONFIRM_PAUSE)
        async with self.leader.fenced(conn):
            cur = await conn.execute(Q.host_take_dead, params)
            dead: dict[int, bool] = dict(await cur.fetchall())  # id -> gone, else stale
            await conn.execute(Q.standby_drop_orphans)
            if not dead:
                return {}
            gone = [host for host, is_gone in dead.items() if is_gone]
            cur = await conn.execute(Q.job_select_of_hosts, {"hosts": list(dead), "gone": gone})
            attempts = await cur.fetchall()
            unstarted = {job: lease for job, lease, _, held in attempts if held}
            given_back = await self._give_back(conn, unstarted)
            reason_of = {job: GONE if dead[host] else STALE for job, _, host, _ in attempts}
            lost = {job: lease for job, lease, _, held in attempts if not held}
            rescued = await self._rescue(conn, lost, reason_of, "running")
        return await self._report(dead, rescued, given_back, reason_of)

    async def _give_back(self, conn: psycopg.AsyncConnection[Any], lease_of: dict[int, int]) -> int:
        """Give the attempts ``lease_of`` names back to available, uncharged; returns how
        many were (one that finished or moved on meanwhile is left alone)."""
        if not lease_of:
            return 0
        cur = await conn.execute(
            Q.job_give_back_many, {**attempts_params(lease_of), "reason": GIVEN_BACK}
        )
        return len(await cur.fetchall())

    async def _report(
        self, dead: dict[int, bool], rescued: list[int], given_back: int, reason_of: dict[int, str]
    ) -> dict[str, int]:
        """Log what became of dead hosts' attempts, send the rescued ones' events, and
        count them by what their host was (``host_gone``: its lock free and its heartbeat
        fresh; ``host_take_dead``: its heartbeat stale), the ones given back apart."""
        counts: dict[str, int] = {}
        for rule in (_GONE, _STALE):
            hosts = [host for host, gone in dead.items() if gone == rule.gone]
            if not hosts:
                continue
            ids = [job for job in rescued if reason_of[job] == rule.reason]
            held = given_back if rule.gone else 0
            log.warning(
                "hosts %s %s: %d attempts rescued, %d given back unstarted",
                hosts,
                rule.said,
                len(ids),
                held,
                extra={"hosts": hosts, "job_ids": ids, "reason": rule.reason},
            )
            await self._after_rescue(ids, rule.reason)
            counts[rule.sweep] = len(ids)
        if given_back:
            counts["host_gone_unstarted"] = given_back
        return counts

    async def _rescue_found(
        self, conn: psycopg.AsyncConnection[Any], found: Sequence[tuple[int, int]], sweep: Sweep
    ) -> int:
        lease_of = dict(found)
        reason_of = dict.fromkeys(lease_of, sweep.reason)
        async with self.leader.fenced(conn):
            rescued = await self._rescue(conn, lease_of, reason_of, sweep.from_state)
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
        lease_of: Mapping[int, int],
        reason_of: Mapping[int, str],
        from_state: str,
    ) -> list[int]:
        """Rescue the attempts ``lease_of`` names (job id -> run_lease) in ``from_state``,
        each recording its reason; returns the ids rescued (an attempt that finished or
        moved on meanwhile is left alone)."""
        if not lease_of:
            return []
        params = rescue_params(
            lease_of,
            {job: reason_of[job] for job in lease_of},
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
