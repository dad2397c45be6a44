"""The one committer of a host: outcome records in, guarded transitions out (docs/architecture.md).

It drains the outcome ring into a batcher and, per batch:

* plain completions go out in one ``job_complete_many``;
* every other outcome of kinds without follow-ups goes out in one ``job_transition_many``;
* an outcome whose (outcome, kind) has follow-up specs gets its own transaction: lock the
  attempt's row, transition it, insert the follow-ups, commit;
* when a batch statement fails, each of its jobs is finalized directly, one statement each;
* when the connection is lost, the outcomes are kept and retried after reconnecting (the
  run_lease guard makes a retry unable to finish a newer attempt);
* stale attempts (zero rows matched) are dropped with no event and no follow-up.

Lifecycle events are handed to the hook dispatcher after the transition commits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from psycopg.rows import dict_row

from awa_fast._core import Batch, Batcher, InFlight, OutcomeRing
from awa_fast.db.connections import IdMap, attempts_params, rescue_params
from awa_fast.db.queries import Q
from awa_fast.lifecycle import transitions as tr
from awa_fast.lifecycle.followups import FollowupRegistry, OutcomeContext, insert_followups
from awa_fast.lifecycle.hooks import EventType, HookDispatcher
from awa_fast.types import JobRow
from awa_fast.worker import Registry

log = logging.getLogger("awa_fast.committer")

EVENT_OF_OUTCOME = {
    tr.Outcome.COMPLETED: EventType.COMPLETED,
    tr.Outcome.RETRIED: EventType.RETRIED,
    tr.Outcome.EXHAUSTED: EventType.EXHAUSTED,
    tr.Outcome.CANCELLED: EventType.CANCELLED,
    tr.Outcome.WAITING_FOR_CALLBACK: EventType.WAITING_FOR_CALLBACK,
}
_COMPLETED = int(tr.Target.COMPLETED)
_LOST = int(tr.Target.LOST)
# Longest a stopping committer keeps flushing: room for the ring to take back a dead
# producer's slots (its stall timeout per slot) and for the last batches to commit.
FLUSH_TIMEOUT = 30.0
# How long one drain waits while outcomes flow, and while the ring is idle. Between drains
# the committer tells claiming that handlers returned (on_drain): a worker's held jobs may
# last less than a batch's delay (commit_delay).
REPORT_EVERY = 0.01
IDLE_WAIT = 0.05


@dataclass(slots=True)
class CommitStats:
    batches: int = 0
    applied: int = 0
    stale: int = 0
    fallbacks: int = 0
    reconnects: int = 0
    followup_failures: int = 0
    failed_batches: int = 0


@dataclass(slots=True)
class Records:
    """One batch's columns as Python lists (built once per batch by the Rust batcher)."""

    ids: list[int]
    leases: list[int]
    codes: list[int]
    kinds: list[int]
    numbers: list[float]
    payloads: list[bytes | None]
    extras: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, batch: Batch) -> Records:
        return cls(batch.ids, batch.leases, batch.codes, batch.kinds, batch.numbers, batch.payloads)

    def extra(self, i: int) -> dict[str, Any]:
        """The decoded variable part of record ``i`` (error, progress, callback id, …). One
        that does not decode is logged and read as empty: its transition still settles the
        attempt, and the rest of the batch is not held back with it."""
        found = self.extras.get(i)
        if found is None:
            payload = self.payloads[i]
            try:
                found = orjson.loads(payload) if payload else {}
            except orjson.JSONDecodeError:
                log.error(
                    "job %s: outcome payload does not decode; committed without it",
                    self.ids[i],
                    extra={"job_id": self.ids[i], "run_lease": self.leases[i]},
                )
                found = {}
            self.extras[i] = found
        return found


@dataclass(frozen=True, slots=True)
class CommitterConfig:
    """A batch of outcomes commits when it holds ``batch`` records, when its oldest has
    waited ``delay``, or at once when nothing else is in flight to join it; outcomes already
    waiting when it commits join it, up to ``batch_max`` (one committer commits one batch at
    a time, so a backlog should grow the batch, not itself). A failed batch's jobs retry
    with ``retry_backoff`` and go to the dead-letter queue by ``dlq`` (job_rescue_many's
    parameters); a lost connection is retried with ``reconnect_backoff``. A stopping
    committer flushes for ``flush_timeout`` seconds at most."""

    batch: int = 256
    batch_max: int = 2048
    delay: float = 0.05
    retry_backoff: tr.Backoff = field(default_factory=tr.Backoff)
    reconnect_backoff: tr.Backoff = field(default_factory=lambda: tr.Backoff(base=0.05, max=2.0))
    dlq: Mapping[str, Any] = field(
        default_factory=lambda: {"dlq_all": False, "no_dlq": [], "dlq": []}
    )
    flush_timeout: float = FLUSH_TIMEOUT


Connect = Callable[[], psycopg.Connection[Any]]


class Committer:
    """Drains ``ring`` and commits outcomes on its own connection (run it in a thread)."""

    def __init__(
        self,
        connect: Connect,
        ring: OutcomeRing,
        *,
        registry: Registry,
        followups: FollowupRegistry,
        hooks: HookDispatcher,
        config: CommitterConfig = CommitterConfig(),
        on_drain: Callable[[], None] | None = None,
        inflight: InFlight | None = None,
    ) -> None:
        self._connect = connect
        self._conn: psycopg.Connection[Any] | None = None
        self.ring = ring
        self.registry = registry
        self.followups = followups
        self.hooks = hooks
        self.config = config
        self.batcher = Batcher(config.batch, config.delay, limit=config.batch_max)
        self.stats = CommitStats()
        self._on_drain = on_drain
        # Batches wait up to config.delay for company, but not once nothing is in flight.
        self._inflight = inflight
        self._progress = threading.Condition()
        self._awaited: list[int] = []  # the counts wait_committed callers wait for
        self.committed = 0  # records settled (applied or stale): a milestone for tests
        # The same records by their code (a tr.Target), for awa_fast_outcomes_committed_total:
        # a list another thread may read while this one adds to it.
        self.committed_by_code = [0] * len(tr.Target)

    # -- loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Commit until ``stop`` is set and the ring is empty, or for at most
        ``flush_timeout`` seconds after ``stop``: a record held up behind a producer that
        never publishes is left to rescue rather than holding the shutdown forever."""
        give_up: float | None = None
        flowing = False  # the last drain found outcomes
        try:
            while True:
                if give_up is None and stop.is_set():
                    give_up = time.monotonic() + self.config.flush_timeout
                stopping = give_up is not None
                # While stopping, wait only for records already reserved (a dead producer's
                # slot is taken back inside the wait); an empty ring ends the loop at once.
                # While outcomes flow, come back often enough to tell claiming in time: a
                # claim waiting for capacity hears of returned handlers only between drains.
                wait = REPORT_EVERY if flowing else IDLE_WAIT
                wait = 0.0 if stopping and not len(self.ring) else wait
                ready = self.ring.drain_into(self.batcher, wait, self._inflight)
                flowing = len(self.batcher) > 0
                if self._on_drain is not None and len(self.batcher):
                    self._on_drain()  # handlers returned: their capacity is free again
                if ready or (stopping and len(self.batcher)):
                    batch = self.batcher.take()
                    if batch is not None:
                        self._commit_or_log(batch)
                elif give_up is not None and (not len(self.ring) or self._gave_up(give_up)):
                    return
        finally:
            self.close()

    def _gave_up(self, give_up: float) -> bool:
        if time.monotonic() < give_up:
            return False
        log.error(
            "committer stopped with %d ring slots unflushed after %g s; their jobs stay "
            "running until rescued",
            len(self.ring),
            self.config.flush_timeout,
            extra={"jobs": len(self.ring)},
        )
        return True

    def _commit_or_log(self, batch: Batch) -> None:
        """The committer thread must outlive any one batch: a batch that fails for a reason
        other than a lost connection is logged, and its attempts (still running in the
        database) are left to rescue."""
        try:
            self.commit(batch)
        except Exception:
            self.stats.failed_batches += 1
            log.exception(
                "a batch of %d outcomes could not be committed; its jobs stay "
                "running until rescued",
                len(batch),
                extra={"jobs": len(batch)},
            )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def wait_committed(self, count: int, timeout: float) -> bool:
        """Block until at least ``count`` records were settled (test milestone)."""
        with self._progress:
            # Woken once the count is reached, not by every batch: a benchmark waits here.
            self._awaited.append(count)
            try:
                return self._progress.wait_for(lambda: self.committed >= count, timeout)
            finally:
                self._awaited.remove(count)

    # -- one batch ----------------------------------------------------------------------

    def commit(self, batch: Batch) -> None:
        records = Records.of(batch)
        plain, mixed, lost, followed = self._partition(records)
        # Lost attempts last: a worker killed between pushing its outcome and freeing its
        # slot is reported lost too, and its real outcome must settle the attempt first.
        pending: list[tuple[Callable[[Records, list[int]], None], list[int]]] = [
            (self._apply_group, plain),
            (self._apply_group, mixed),
            (self._apply_followups, followed),
            (self._apply_group, lost),
        ]
        attempt = 0
        while pending:
            step, indices = pending[0]
            if not indices:
                pending.pop(0)
                continue
            try:
                step(records, indices)
                pending.pop(0)
            except psycopg.Error as exc:
                if not self._connection_lost(exc):
                    raise
                attempt += 1
                log.warning(
                    "committer lost its connection (%s); retrying %d outcomes",
                    exc,
                    waiting := sum(len(i) for _, i in pending),
                    extra={"jobs": waiting},
                )
                self.stats.reconnects += 1
                time.sleep(self.config.reconnect_backoff.delay(attempt))
        self.stats.batches += 1
        self._count(records, plain, lost, mixed + followed)
        with self._progress:
            self.committed += len(records.ids)
            if self._awaited and self.committed >= min(self._awaited):
                self._progress.notify_all()

    def _count(self, r: Records, plain: list[int], lost: list[int], others: list[int]) -> None:
        """Add a committed batch to ``committed_by_code``: its groups of plain completions
        and lost attempts by their length, so a batch of those costs no loop over it."""
        counts = self.committed_by_code
        counts[_COMPLETED] += len(plain)
        counts[_LOST] += len(lost)
        for i in others:
            counts[r.codes[i]] += 1

    def _partition(self, r: Records) -> tuple[list[int], list[int], list[int], list[int]]:
        """Split a batch into plain completions, other outcomes, lost attempts, and outcomes
        with follow-ups (each of those gets its own transaction)."""
        plain: list[int] = []
        mixed: list[int] = []
        lost: list[int] = []
        followed: list[int] = []
        has_followups = bool(self.followups)  # the common case skips the per-record lookup
        for i, code in enumerate(r.codes):
            if has_followups and self.followups.for_(
                tr.OUTCOME_OF_CODE[code], self.registry.kind_at(r.kinds[i])
            ):
                followed.append(i)
            elif code == _COMPLETED and r.payloads[i] is None:
                plain.append(i)
            elif code == _LOST:
                lost.append(i)
            else:
                mixed.append(i)
        return plain, mixed, lost, followed

    def _apply_group(self, r: Records, indices: list[int]) -> None:
        """One statement for the group; on a statement error, one statement per job."""
        conn = self._connection()
        try:
            applied = self._execute(conn, r, indices)
        except psycopg.Error as exc:
            if self._connection_lost(exc):
                raise
            log.warning(
                "batch of %d outcomes failed (%s); finalizing each directly",
                len(indices),
                exc,
                extra={"jobs": len(indices)},
            )
            self.stats.fallbacks += 1
            applied = {}
            for i in indices:
                try:
                    applied.update(self._execute(conn, r, [i]))
                except psycopg.Error as one_exc:
                    if self._connection_lost(one_exc):
                        raise
                    log.error(
                        "job %s: direct finalize failed (%s); left running for rescue",
                        r.ids[i],
                        one_exc,
                        extra={"job_id": r.ids[i], "run_lease": r.leases[i]},
                    )
        self._settled(r, indices, applied)

    def _execute(
        self, conn: psycopg.Connection[Any], r: Records, indices: list[int]
    ) -> dict[int, tuple[Any, ...]]:
        """Run the group's statement; returns applied id → (id, state, attempt, run_at).

        The statements look each row's lease up by job id, so a group holding two attempts
        of one job (an attempt rescued and claimed again while its first run still ends)
        runs one statement for each."""
        lease_of = {r.ids[i]: r.leases[i] for i in indices}
        if len(lease_of) < len(indices):
            return {k: v for i in indices for k, v in self._execute(conn, r, [i]).items()}
        attempts = attempts_params(lease_of)
        if all(r.codes[i] == _COMPLETED and r.payloads[i] is None for i in indices):
            rows = conn.execute(Q.job_complete_many, attempts).fetchall()
            return {row[0]: (row[0], "completed", None, None) for row in rows}
        if r.codes[indices[0]] == _LOST:
            params = rescue_params(
                lease_of,
                {r.ids[i]: r.extra(i).get("reason", "attempt lost") for i in indices},
                from_state="running",
                backoff=self.config.retry_backoff,
                dlq=self.config.dlq,
            )
            rows = conn.execute(Q.job_rescue_many, params).fetchall()
            return {row[0]: tuple(row) for row in rows}
        outcomes = {r.ids[i]: _outcome_object(r, i) for i in indices}
        params = {**attempts, "outcomes": IdMap(outcomes)}
        rows = conn.execute(Q.job_transition_many, params).fetchall()
        return {row[0]: tuple(row) for row in rows}

    def _apply_followups(self, r: Records, indices: list[int]) -> None:
        conn = self._connection()
        for i in indices:
            kind = self.registry.kind_at(r.kinds[i])
            outcome = tr.OUTCOME_OF_CODE[r.codes[i]]
            specs = self.followups.for_(outcome, kind)
            try:
                with conn.transaction():
                    cur = conn.cursor(row_factory=dict_row)
                    locked = cur.execute(
                        Q.job_lock_running, {"id": r.ids[i], "lease": r.leases[i]}
                    ).fetchone()
                    applied = self._execute(conn, r, [i]) if locked is not None else {}
                    if applied:
                        after = cur.execute(Q.job_get, {"id": r.ids[i]}).fetchone()
                        assert after is not None and outcome is not None
                        row = JobRow.from_row(after)
                        ctx = self._context(outcome, r, i, applied[r.ids[i]])
                        insert_followups(conn, specs, row, orjson.dumps(row.args), ctx)
            except psycopg.Error as exc:
                if self._connection_lost(exc):
                    raise
                self._followup_failed(r, i)
                continue
            except Exception:
                self._followup_failed(r, i)
                continue
            self._settled(r, [i], applied)

    def _followup_failed(self, r: Records, i: int) -> None:
        self.stats.followup_failures += 1
        log.exception(
            "job %s: follow-up failed; transition rolled back, job left running",
            r.ids[i],
            extra={"job_id": r.ids[i], "run_lease": r.leases[i]},
        )

    def _context(
        self, outcome: tr.Outcome, r: Records, i: int, result: tuple[Any, ...]
    ) -> OutcomeContext:
        extra = r.extra(i)
        entry = extra.get("error")
        if entry:
            error: str | None = entry["error"]
        elif r.codes[i] == _LOST:
            error = extra.get("reason")
        else:  # RetryAfter carries no error (as in the Awa SDK); other outcomes have none
            error = "" if outcome is tr.Outcome.RETRIED else None
        return OutcomeContext(
            outcome=outcome,
            attempt=result[2] if result[2] is not None else 0,
            error=error,
            next_run_at=result[3] if outcome is tr.Outcome.RETRIED else None,
            reason=extra.get("reason"),
        )

    # -- bookkeeping --------------------------------------------------------------------

    def _settled(
        self, r: Records, indices: Sequence[int], applied: dict[int, tuple[Any, ...]]
    ) -> None:
        self.stats.applied += len(applied)
        self.stats.stale += len(indices) - len(applied)
        if not applied or not self.hooks.registry.hooks:
            return
        wanted: list[tuple[int, tr.Outcome]] = []
        for i in indices:
            result = applied.get(r.ids[i])
            outcome = _outcome(r.codes[i], result) if result is not None else None
            if outcome is not None and self._may_want(r.kinds[i]):
                wanted.append((i, outcome))
        if not wanted:
            return
        try:
            cur = self._connection().cursor(row_factory=dict_row)
            ids = {"ids": [r.ids[i] for i, _ in wanted]}
            rows = cur.execute(Q.job_get_many, ids).fetchall()
            if len(rows) < len(wanted):  # dead-lettered jobs live in the DLQ table
                rows += cur.execute(Q.dlq_get_many, ids).fetchall()
        except psycopg.Error as exc:
            self._connection_lost(exc)
            log.error(
                "could not read %d jobs for their lifecycle events (%s); events dropped",
                len(wanted),
                exc,
                extra={"jobs": len(wanted)},
            )
            return
        by_id = {row["id"]: JobRow.from_row(row) for row in rows}
        for i, outcome in wanted:
            job = by_id.get(r.ids[i])
            if job is None or not self.hooks.registry.wants(job.kind):
                continue
            ctx = self._context(outcome, r, i, applied[r.ids[i]])
            self.hooks.submit(
                EVENT_OF_OUTCOME[outcome],
                job,
                error=ctx.error,
                attempt=ctx.attempt or None,
                next_run_at=ctx.next_run_at,
                reason=ctx.reason,
            )

    def _may_want(self, kind_index: int) -> bool:
        """Whether a record's kind has hooks; a record of unknown kind (an attempt lost
        with its worker, reported by the supervisor, which never knew its kind) may, and
        is decided on the row read back."""
        kind = self.registry.kind_at(kind_index)
        return kind is None or self.hooks.registry.wants(kind)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return self._conn

    def _connection_lost(self, exc: psycopg.Error) -> bool:
        """Whether ``exc`` means: reconnect and retry (the outcomes are kept). An operational
        error (the server shut the session down, a deadlock, a cancelled statement) may
        leave the connection looking healthy for a moment; it is retried all the same."""
        lost = (
            isinstance(exc, psycopg.OperationalError)
            or self._conn is None
            or self._conn.closed
            or self._conn.broken
        )
        if lost and self._conn is not None:
            self._conn.close()
            self._conn = None
        return lost


def _outcome(code: int, result: tuple[Any, ...]) -> tr.Outcome | None:
    """The outcome a settled record had; a lost attempt's depends on what SQL decided."""
    if code == _LOST:
        return tr.Outcome.EXHAUSTED if result[1] == "failed" else tr.Outcome.RETRIED
    return tr.OUTCOME_OF_CODE[code]


def _outcome_object(r: Records, i: int) -> orjson.Fragment:
    """Record ``i``'s payload, the outcome object job_transition_many reads, passed on as
    the worker encoded it (awa_fast.lifecycle.transitions.encode)."""
    payload = r.payloads[i]
    assert payload is not None  # only a plain completion has none, and it goes elsewhere
    return orjson.Fragment(payload)
