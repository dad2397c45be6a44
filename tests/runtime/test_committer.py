"""The committer against a real database: batching, stale attempts, fallback, follow-ups,
events. Records are fed through a real Batcher; no handler runs here."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast._core import Batcher, OutcomeRing
from awa_fast.db.connections import Database, connect_hot
from awa_fast.db.queries import Q
from awa_fast.lifecycle import transitions as tr
from awa_fast.lifecycle.hooks import Event, EventType, HookDispatcher
from awa_fast.runtime.committer import Committer, CommitterConfig
from awa_fast.types import InsertRequest
from awa_fast.worker import UNKNOWN_KIND
from tests.factories import insert_job
from tests.helpers import job, states, wait_until


@dataclass
class Act:
    do: str


class Harness:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.client = awa_fast.Client(dsn)
        self.client.task(Act)(lambda job: None)
        self.events: list[Event] = []
        self.client.on_event(Act, self.events.append)
        self._committer: Committer | None = None

    @property
    def committer(self) -> Committer:
        if self._committer is None:
            handlers = self.client.handlers
            self.hooks = HookDispatcher(handlers.hooks)
            self.hooks.start()
            self._committer = Committer(
                lambda: connect_hot(Database(self.dsn)),  # as the runner's: key access only
                OutcomeRing(1024),
                registry=handlers.registry,
                followups=handlers.followups,
                hooks=self.hooks,
            )
        return self._committer

    def commit(self, records: list[tuple[int, int, tr.Transition]], *, kind: int = 0) -> None:
        """Commit ``(job id, run_lease, transition)`` records of kind index ``kind``."""
        batcher = Batcher(1000, 10.0)
        for job_id, lease, transition in records:
            code, number, payload = tr.encode(transition)
            batcher.push(job_id, lease, code, kind, number, payload)
        batch = batcher.take()
        assert batch is not None
        self.committer.commit(batch)

    def events_delivered(self) -> list[Event]:
        self.hooks.stop()
        return self.events

    def close(self) -> None:
        if self._committer is not None:
            self._committer.close()
            self.hooks.stop()
        self.client.close()


@pytest.fixture
def harness(dsn: str) -> Iterator[Harness]:
    h = Harness(dsn)
    yield h
    h.close()


def _running(conn: psycopg.Connection[Any], n: int, lease: int = 1) -> list[int]:
    return [
        insert_job(conn, kind="act", args={"do": "x"}, state="running", attempt=1, run_lease=lease)
        for _ in range(n)
    ]


def test_completions_are_batched_in_one_statement(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    ids = _running(conn, 50)
    harness.commit([(i, 1, tr.COMPLETED) for i in ids])
    assert states(harness.dsn) == {"completed": 50}
    stats = harness.committer.stats
    assert (stats.batches, stats.applied, stats.stale, stats.fallbacks) == (1, 50, 0, 0)
    completed = [e for e in harness.events_delivered() if e.type is EventType.COMPLETED]
    assert sorted(e.job.id for e in completed) == sorted(ids)
    assert all(e.args == Act("x") for e in completed)


# One of each batch statement: job_complete_many, job_transition_many, job_rescue_many.
BATCHED = {
    "completed": tr.COMPLETED,
    "retried": tr.Transition(tr.Target.RETRYABLE, delay=30, error=tr.error_entry("x", 1)),
    "lost": tr.Transition(tr.Target.LOST, reason="worker died"),
}
STATE_AFTER = {"completed": "completed", "retried": "retryable", "lost": "retryable"}


@pytest.mark.parametrize("outcome", BATCHED)
def test_a_batch_locks_its_rows_in_id_order(
    harness: Harness, conn: psycopg.Connection[Any], dsn: str, outcome: str
) -> None:
    """The race behind a deadlock with the heartbeat: with the lowest row locked elsewhere,
    a batch given in descending order must wait on that row before it locks any other
    (id order, as every multi-row statement on running attempts), or two such statements
    can each hold what the other waits for."""
    low, high = sorted(_running(conn, 2))
    # A new version of `low` lands after `high`: an unordered plan would meet `high` first.
    conn.execute("UPDATE awa_fast.jobs_hot SET metadata = '{}' WHERE id = %s", (low,))
    transition = BATCHED[outcome]
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as probe:
        holder.execute("SELECT 1 FROM awa_fast.jobs_hot WHERE id = %s FOR UPDATE", (low,))
        committing = threading.Thread(
            target=harness.commit, args=([(high, 1, transition), (low, 1, transition)],)
        )
        committing.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
        wait_until(lambda: probe.execute(waiting).fetchone() == (1,), what="batch waiting")
        # The batch waits on `low` and holds nothing else: `high` is free to lock.
        probe.execute("SELECT 1 FROM awa_fast.jobs_hot WHERE id = %s FOR UPDATE NOWAIT", (high,))
        holder.rollback()
        committing.join(30)
    assert not committing.is_alive()
    assert states(dsn) == {STATE_AFTER[outcome]: 2}


@pytest.mark.parametrize("outcome", BATCHED)
def test_two_attempts_of_one_job_in_a_batch_settle_apart(
    harness: Harness, conn: psycopg.Connection[Any], outcome: str
) -> None:
    """A batch can hold an attempt that was rescued and the job's next attempt, claimed by
    this host while the first still ran. The statements look leases up by job id, one per
    id: the newer attempt must be applied and the older found stale, never the reverse."""
    [reclaimed] = _running(conn, 1, lease=2)
    [other] = _running(conn, 1)
    transition = BATCHED[outcome]
    harness.commit([(reclaimed, 2, transition), (reclaimed, 1, transition), (other, 1, transition)])
    stats = harness.committer.stats
    assert (stats.applied, stats.stale) == (2, 1)
    assert job(harness.dsn, reclaimed)["state"] == STATE_AFTER[outcome]
    assert job(harness.dsn, reclaimed)["run_lease"] == 2
    assert job(harness.dsn, other)["state"] == STATE_AFTER[outcome]


def test_stale_attempt_is_dropped_with_no_event_and_no_followup(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    made: list[int] = []
    harness.client.on_completed_enqueue(Act, lambda args, row, ctx: made.append(row.id))
    harness.client.on_retried_enqueue(Act, lambda args, row, ctx: made.append(row.id))
    [moved_on] = _running(conn, 1, lease=2)  # rescued and re-claimed: lease 2 now
    [plain] = _running(conn, 1, lease=2)
    retry = tr.Transition(tr.Target.RETRYABLE, delay=5, error=tr.error_entry("x", 1))
    harness.commit([(moved_on, 1, tr.COMPLETED), (plain, 1, retry)])
    assert job(harness.dsn, moved_on)["state"] == "running"
    assert job(harness.dsn, plain)["state"] == "running"
    assert harness.committer.stats.stale == 2
    assert made == []
    assert harness.events_delivered() == []


def test_every_mixed_outcome_in_one_batch(harness: Harness, conn: psycopg.Connection[Any]) -> None:
    ids = _running(conn, 7)
    error = tr.error_entry("ValueError: x", 1)
    harness.commit(
        [
            (ids[0], 1, tr.Transition(tr.Target.RETRYABLE, delay=30, error=error)),
            (ids[1], 1, tr.Transition(tr.Target.SCHEDULED, delay=30)),
            (
                ids[2],
                1,
                tr.Transition(
                    tr.Target.CANCELLED, reason="r", error=tr.error_entry("cancelled: r", 1)
                ),
            ),
            (
                ids[3],
                1,
                tr.Transition(tr.Target.FAILED, error=tr.error_entry("t", 1, terminal=True)),
            ),
            (
                ids[4],
                1,
                tr.Transition(
                    tr.Target.WAITING, delay=60, callback_id="5b0c0a56-7d3e-4c1e-9f51-1b2b3c4d5e6f"
                ),
            ),
            (ids[5], 1, tr.Transition(tr.Target.RELEASED)),
            (ids[6], 1, tr.Transition(tr.Target.DEAD, error=tr.error_entry("d", 1, terminal=True))),
        ]
    )
    got = [job(harness.dsn, i) for i in ids[:6]]
    assert [j["state"] for j in got] == [
        "retryable",
        "scheduled",
        "cancelled",
        "failed",
        "waiting_external",
        "available",
    ]
    assert (got[5]["attempt"], got[5]["heartbeat_at"], got[5]["errors"]) == (0, None, [])
    dead = conn.execute(
        "SELECT dlq_reason, errors -> -1 ->> 'error' FROM awa_fast.dlq WHERE id = %s", (ids[6],)
    ).fetchone()
    assert dead == ("d", "d")
    assert got[0]["errors"] == [error] and got[0]["attempt"] == 1
    assert got[1]["attempt"] == 0
    assert str(got[4]["callback_id"]) == "5b0c0a56-7d3e-4c1e-9f51-1b2b3c4d5e6f"
    events = {e.job.id: e for e in harness.events_delivered()}
    assert events[ids[0]].type is EventType.RETRIED and events[ids[0]].error == "ValueError: x"
    assert events[ids[0]].next_run_at == got[0]["run_at"]
    assert ids[1] not in events
    assert events[ids[2]].type is EventType.CANCELLED and events[ids[2]].reason == "r"
    assert events[ids[3]].type is EventType.EXHAUSTED
    assert events[ids[4]].type is EventType.WAITING_FOR_CALLBACK


def _refuse_batches(conn: psycopg.Connection[Any]) -> None:
    """A real failure of the batch statements: any finish of more than one row raises."""
    conn.execute("""
        CREATE FUNCTION awa_fast.refuse_batches() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF (SELECT count(*) FROM changed) > 1 THEN
                RAISE EXCEPTION 'batch refused';
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER refuse_batches AFTER DELETE ON awa_fast.jobs_hot
            REFERENCING OLD TABLE AS changed
            FOR EACH STATEMENT EXECUTE FUNCTION awa_fast.refuse_batches();
    """)


def test_failed_batch_statement_falls_back_to_direct_finalize(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    _refuse_batches(conn)
    ids = _running(conn, 20)
    [stale] = _running(conn, 1, lease=7)
    harness.commit([(i, 1, tr.COMPLETED) for i in ids] + [(stale, 1, tr.COMPLETED)])
    assert states(harness.dsn) == {"completed": 20, "running": 1}
    stats = harness.committer.stats
    assert (stats.fallbacks, stats.applied, stats.stale) == (1, 20, 1)


def test_followups_commit_with_their_transition(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    seen: list[awa_fast.OutcomeContext] = []

    def next_step(args: Act, row: awa_fast.JobRow, ctx: awa_fast.OutcomeContext) -> Any:
        seen.append(ctx)
        return InsertRequest(Act(f"after {args.do}"), queue="next", priority=1)

    harness.client.on_completed_enqueue(Act, next_step)
    harness.client.on_retried_enqueue(Act, lambda args, row, ctx: (seen.append(ctx), Act("r"))[1])
    done, retried, other_kind = _running(conn, 3)
    conn.execute("UPDATE awa_fast.jobs_hot SET kind = 'other' WHERE id = %s", (other_kind,))
    error = tr.error_entry("ValueError: x", 1)
    harness.commit(
        [
            (done, 1, tr.COMPLETED),
            (retried, 1, tr.Transition(tr.Target.RETRYABLE, delay=9, error=error)),
        ]
    )
    harness.commit([(other_kind, 1, tr.COMPLETED)], kind=UNKNOWN_KIND)
    rows = conn.execute(
        "SELECT args->>'do', queue, priority FROM awa_fast.jobs WHERE queue = 'next' "
        "OR args->>'do' = 'r' ORDER BY 1"
    ).fetchall()
    assert rows == [("after x", "next", 1), ("r", "default", 2)]
    assert job(harness.dsn, done)["state"] == "completed"
    assert job(harness.dsn, other_kind)["state"] == "completed"
    completed_ctx, retried_ctx = seen
    assert completed_ctx.outcome is tr.Outcome.COMPLETED
    assert retried_ctx.error == "ValueError: x" and retried_ctx.attempt == 1
    assert retried_ctx.next_run_at == job(harness.dsn, retried)["run_at"]


def test_raising_make_rolls_the_transition_back(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    def explode(args: Act, row: awa_fast.JobRow, ctx: awa_fast.OutcomeContext) -> Any:
        raise RuntimeError("cannot make follow-up")

    harness.client.on_completed_enqueue(Act, explode)
    [job_id] = _running(conn, 1)
    harness.commit([(job_id, 1, tr.COMPLETED)])
    assert states(harness.dsn) == {"running": 1}
    assert harness.committer.stats.followup_failures == 1
    assert harness.events_delivered() == []


def test_failing_followup_insert_rolls_the_transition_back(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    harness.client.on_cancelled_enqueue(Act, lambda a, r, c: InsertRequest(Act("x"), priority=9))
    [job_id] = _running(conn, 1)
    harness.commit([(job_id, 1, tr.Transition(tr.Target.CANCELLED, reason="r"))])
    assert states(harness.dsn) == {"running": 1}


@pytest.mark.parametrize("refused", [False, True], ids=["batched", "direct"])
def test_followups_name_the_job_whose_transition_inserted_them(
    harness: Harness, conn: psycopg.Connection[Any], refused: bool
) -> None:
    """In a batch of mixed outcomes, each follow-up carries its parent's id; so it does
    when the batch's statements fail and each job is finalized directly."""
    harness.client.on_completed_enqueue(Act, lambda args, row, ctx: [Act("a"), Act("b")])
    harness.client.on_retried_enqueue(Act, lambda args, row, ctx: Act("r"))
    if refused:
        _refuse_batches(conn)
    done, retried, *cancelled = _running(conn, 4)
    retry = tr.Transition(tr.Target.RETRYABLE, delay=9, error=tr.error_entry("x", 1))
    cancel = tr.Transition(tr.Target.CANCELLED, reason="r")
    harness.commit(
        [(done, 1, tr.COMPLETED), (retried, 1, retry), *((i, 1, cancel) for i in cancelled)]
    )
    assert harness.committer.stats.fallbacks == int(refused)
    rows = conn.execute(
        "SELECT args->>'do', parent_id FROM awa_fast.jobs WHERE parent_id IS NOT NULL ORDER BY 1"
    ).fetchall()
    assert rows == [("a", done), ("b", done), ("r", retried)]
    parents = conn.execute(
        "SELECT count(*) FROM awa_fast.jobs WHERE parent_id IS NULL AND args->>'do' = 'x'"
    ).fetchone()
    assert parents == (4,)  # the triggers themselves were inserted by a user


def _claim(conn: psycopg.Connection[Any], queue: str) -> int:
    """Claim the queue's one available job as a runner does; its lease."""
    params = {"queue": queue, "limit": 1, "host_id": 1, "deadline_s": 60.0}
    [claimed] = conn.execute(Q.job_claim_rows, params).fetchall()
    return int(claimed[1])


def _where(conn: psycopg.Connection[Any], job_id: int) -> tuple[str, int | None]:
    """The table that holds the job, and its parent_id there."""
    tables = ("jobs_hot", "jobs_deferred", "jobs_done", "dlq")
    [found] = [
        (table, row[0])
        for table in tables
        for row in conn.execute(f"SELECT parent_id FROM awa_fast.{table} WHERE id = %s", (job_id,))
    ]
    return found


def test_a_followup_keeps_its_parent_through_every_move(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    """Every statement that moves a job's row between tables (retries, rescues, schedules,
    callbacks, the dead-letter queue, admin calls, completion) carries parent_id along."""
    child = InsertRequest({"n": 1}, kind="child", queue="children", max_attempts=2)
    harness.client.on_completed_enqueue(Act, lambda args, row, ctx: child)
    [parent] = _running(conn, 1)
    harness.commit([(parent, 1, tr.COMPLETED)])
    [(job_id,)] = conn.execute("SELECT id FROM awa_fast.jobs WHERE kind = 'child'").fetchall()
    client, error = harness.client, tr.error_entry("x", 1)

    def attempt(transition: tr.Transition) -> None:
        harness.commit([(job_id, _claim(conn, "children"), transition)], kind=UNKNOWN_KIND)

    def due() -> None:
        conn.execute("UPDATE awa_fast.jobs_deferred SET run_at = now() - interval '1 second'")
        conn.execute(Q.job_promote_due, {"limit": 10})

    def park() -> str:
        """Claim the job and park it on a callback; the callback's id."""
        callback_id, lease = str(uuid.uuid4()), _claim(conn, "children")
        params = {"id": job_id, "lease": lease, "callback_id": callback_id}
        conn.execute(Q.job_register_callback, {**params, "timeout_s": 600.0, "rules": None})
        waiting = tr.Transition(tr.Target.WAITING, delay=600, callback_id=callback_id)
        harness.commit([(job_id, lease, waiting)], kind=UNKNOWN_KIND)
        return callback_id

    later = datetime.now(UTC) + timedelta(hours=1)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("jobs_hot", lambda: None),  # inserted with its parent's transition
        ("jobs_deferred", lambda: attempt(tr.Transition(tr.Target.RETRYABLE, error=error))),
        ("jobs_hot", due),
        ("jobs_done", lambda: attempt(tr.lost("gone"))),  # its last attempt: failed
        ("dlq", lambda: client.move_failed_to_dlq(job_id, "r")),
        ("jobs_deferred", lambda: client.retry_from_dlq(job_id, run_at=later)),
        ("jobs_hot", due),
        ("jobs_deferred", lambda: attempt(tr.lost("gone"))),  # rescued for a retry
        ("jobs_hot", due),
        ("jobs_done", lambda: client.drain_queue("children")),
        ("jobs_hot", lambda: client.retry(job_id)),
        ("jobs_hot", lambda: client.retry_external(park())),
        ("jobs_hot", lambda: (park(), client.retry(job_id))),
        ("jobs_done", lambda: client.fail_external(park(), "no")),
        ("jobs_hot", lambda: client.retry(job_id)),
        ("jobs_done", lambda: attempt(tr.Transition(tr.Target.CANCELLED, reason="r"))),
        ("jobs_hot", lambda: client.retry(job_id)),
        ("jobs_done", lambda: client.cancel(job_id)),
        ("jobs_hot", lambda: client.retry(job_id)),
        ("dlq", lambda: attempt(tr.Transition(tr.Target.DEAD, error=error))),
        ("jobs_hot", lambda: client.retry_from_dlq(job_id)),
        ("jobs_done", lambda: attempt(tr.COMPLETED)),
    ]
    for number, (table, step) in enumerate(steps):
        step()
        assert _where(conn, job_id) == (table, parent), f"step {number}"
    assert job(harness.dsn, job_id)["state"] == "completed"


def test_raising_hook_is_ignored_and_others_still_run(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("hook bug")

    harness.client.on_event(Act, broken)
    ids = _running(conn, 3)
    harness.commit([(i, 1, tr.COMPLETED) for i in ids])
    assert len(harness.events_delivered()) == 3
    assert states(harness.dsn) == {"completed": 3}


def test_lost_connection_keeps_outcomes_and_retries(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    first = _running(conn, 3)
    harness.commit([(i, 1, tr.COMPLETED) for i in first])
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    second = _running(conn, 3)
    harness.commit([(i, 1, tr.COMPLETED) for i in second])
    assert states(harness.dsn) == {"completed": 6}
    assert harness.committer.stats.reconnects >= 1


def test_committer_thread_drains_the_ring(harness: Harness, conn: psycopg.Connection[Any]) -> None:
    ids = _running(conn, 500)
    committer = harness.committer
    stop = threading.Event()
    thread = threading.Thread(target=committer.run, args=(stop,))
    thread.start()
    for i in ids:
        committer.ring.push(i, 1, int(tr.Target.COMPLETED), 0, 0.0, b"")
    assert committer.wait_committed(500, timeout=30)
    stop.set()
    thread.join()
    assert states(harness.dsn) == {"completed": 500}


def test_each_waiter_returns_once_its_own_count_is_committed(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    """A batch wakes the waiters only once the lowest count waited for is reached; each
    waiter then returns at its own count."""
    ids = _running(conn, 6)
    committer = harness.committer
    with ThreadPoolExecutor(2) as pool:
        three = pool.submit(committer.wait_committed, 3, 30)
        six = pool.submit(committer.wait_committed, 6, 30)
        wait_until(lambda: sorted(committer._awaited) == [3, 6], timeout=10, what="2 waiters")
        harness.commit([(i, 1, tr.COMPLETED) for i in ids[:2]])
        harness.commit([(i, 1, tr.COMPLETED) for i in ids[2:3]])
        assert three.result(timeout=30)
        assert not six.done() and committer._awaited == [6]
        harness.commit([(i, 1, tr.COMPLETED) for i in ids[3:]])
        assert six.result(timeout=30)
    assert committer._awaited == []


def test_a_backlog_commits_in_batches_as_large_as_the_limit(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    """Outcomes already waiting when a batch falls due join it, up to the limit: a committer
    behind its workers commits fewer, larger batches rather than let the backlog grow."""
    ids = _running(conn, 12)
    handlers = harness.client.handlers
    committer = Committer(
        lambda: connect_hot(Database(harness.dsn)),
        OutcomeRing(1024),
        registry=handlers.registry,
        followups=handlers.followups,
        hooks=HookDispatcher(handlers.hooks),
        config=CommitterConfig(batch=4, batch_max=10),
    )
    for i in ids:
        committer.ring.push(i, 1, int(tr.Target.COMPLETED), 0, 0.0, b"")
    stop = threading.Event()
    stop.set()  # commit what the ring holds, then return
    committer.run(stop)
    assert states(harness.dsn) == {"completed": 12}
    assert (committer.stats.batches, committer.stats.applied) == (2, 12)  # 10, then 2


def test_committer_thread_survives_a_batch_it_cannot_commit(
    harness: Harness, conn: psycopg.Connection[Any]
) -> None:
    [bad, good] = _running(conn, 2)
    committer = harness.committer
    stop = threading.Event()
    thread = threading.Thread(target=committer.run, args=(stop,))
    thread.start()
    committer.ring.push(bad, 1, 99, 0, 0.0, b"")  # an outcome code no table row knows
    wait_until(lambda: committer.stats.failed_batches == 1, timeout=10, what="the bad batch")
    committer.ring.push(good, 1, int(tr.Target.COMPLETED), 0, 0.0, b"")
    assert committer.wait_committed(1, timeout=30)
    stop.set()
    thread.join()
    assert job(harness.dsn, good)["state"] == "completed"
    assert job(harness.dsn, bad)["state"] == "running"  # left for rescue
