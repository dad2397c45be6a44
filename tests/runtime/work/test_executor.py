"""The executor on its own: each way a handler can end becomes the one outcome record it
pushes into its sink. A client's run shows a wrong record only as a job in the wrong state
later, after the ring and the committer; here the record itself (target, delay, error,
reason, progress) is checked, and ``run_claimed``'s freeing of the slot and lost report."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import orjson
import psycopg
import pytest

from awa_fast import Cancel, RetryAfter, Snooze, TerminalError, WaitForCallback
from awa_fast._core import InFlight
from awa_fast.db.connections import Database
from awa_fast.lifecycle import transitions as tr
from awa_fast.lifecycle.transitions import Target
from awa_fast.runtime.claimed import JSONB_BINARY_VERSION, Claimed, Delivered
from awa_fast.runtime.work.attempt_writer import AttemptWriter
from awa_fast.runtime.work.executor import Executor, run_claimed
from awa_fast.worker import UNKNOWN_KIND, AttemptWrites, Job, Registry
from tests.factories import insert_job
from tests.helpers import job, run

BACKOFF = tr.Backoff(base=10.0, max=100.0, jitter=0.0)  # attempt n retries after 10 * 2**(n-1)


@dataclass
class Pay:
    cents: int


async def completes(job: Job[Any]) -> None:
    return None


def _raise(exc: BaseException) -> None:
    raise exc


async def raises(job: Job[Any]) -> None:
    raise ValueError("card declined")


async def reports(job: Job[Any]) -> None:
    job.set_progress(50, "half")
    job.update_metadata({"rows": 3})


async def parks(job: Job[Any]) -> WaitForCallback:
    return WaitForCallback(await job.register_callback(timeout_seconds=90))


HANDLERS: dict[str, Any] = {
    "completes": completes,
    "completes_sync": lambda job: job.update_metadata({"thread": threading.current_thread().name}),
    "raises": raises,
    "raises_terminal": lambda job: _raise(TerminalError("no such account")),
    "exits": lambda job: _raise(SystemExit(3)),
    "reports": reports,
    "reports_unstorable": lambda job: job.update_metadata({"score": float("nan")}),
    "parks": parks,
    "retries": lambda job: RetryAfter(30),
    "snoozes": lambda job: Snooze(12),
    "cancels": lambda job: Cancel("refunded"),
    "returns_odd": lambda job: 42,
    "waits_unregistered": lambda job: WaitForCallback("never-registered"),
}


def registry(blocks: Any = completes) -> Registry:
    """A registry of HANDLERS, "pay" (args of Pay) and "blocks" (``blocks``)."""
    handlers = Registry()
    for kind, func in HANDLERS.items():
        handlers.add(func, args_type=None, kind=kind, queue="default")
    handlers.add(completes, args_type=Pay, kind="pay", queue="default")
    handlers.add(blocks, args_type=None, kind="blocks", queue="default")
    return handlers


class RecordingSink:
    """An OutcomeSink that keeps every record pushed to it, in order."""

    def __init__(self) -> None:
        self.records: list[tr.Record] = []

    def push(
        self,
        job_id: int,
        run_lease: int,
        code: int,
        kind: int,
        number: float,
        payload: bytes = b"",
        timeout: float | None = None,
    ) -> None:
        self.records.append((job_id, run_lease, code, kind, number, payload))


class NoWrites:
    """The writer for handlers that write nothing; any use raises (and shows in the record)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the attempt writer was used: {name}")


class Pushed(NamedTuple):
    target: Target
    kind: int
    number: float
    outcome: dict[str, Any]  # the payload, decoded; {} for a plain completion
    started: bool  # the executor marked the slot started


def claimed(kind: str, *, attempt: int = 1, queue: str = "default", args: bytes = b"{}") -> Claimed:
    jsonb = bytes([JSONB_BINARY_VERSION]) + args
    return Claimed(7, 2, kind, queue, jsonb, attempt, 3, 2, [], None, None, None, 0, 0, None)


def executor(sink: RecordingSink, inflight: InFlight, **options: Any) -> Executor:
    writer = cast(AttemptWrites, options.pop("writer", NoWrites()))
    handlers = registry(options.pop("blocks", completes))
    return Executor(handlers, sink, inflight, BACKOFF, writer, **options)


def occupied(inflight: InFlight, row: Claimed) -> int:
    """A slot held by ``row``, with the capacity unit a claim would have taken for it."""
    assert inflight.reserve(0, 1) == 1
    return inflight.acquire_slot(row.id, row.run_lease, 0, 0)


def run_one(row: Claimed, **options: Any) -> Pushed:
    """Run ``row`` in an executor of ``registry()``; the one record it pushed."""
    sink, inflight = RecordingSink(), InFlight([4], 4)
    slot = occupied(inflight, row)
    run(executor(sink, inflight, **options).run(row, slot))
    [(job_id, lease, code, kind, number, payload)] = sink.records
    assert (job_id, lease) == (row.id, row.run_lease)
    [(_, _, _, started)] = inflight.attempts()
    return Pushed(Target(code), kind, number, orjson.loads(payload) if payload else {}, started)


def test_a_handler_returning_none_pushes_a_plain_completion() -> None:
    pushed = run_one(claimed("completes"))
    assert pushed == Pushed(Target.COMPLETED, registry().index_of("completes"), 0.0, {}, True)


@pytest.mark.parametrize("pool", [True, False], ids=["thread-pool", "inline"])
def test_a_sync_handler_runs_on_the_thread_pool_when_given_one(pool: bool) -> None:
    with ThreadPoolExecutor(1, thread_name_prefix="executor-test") as threads:
        pushed = run_one(claimed("completes_sync"), threads=threads if pool else None)
    assert pushed.target is Target.COMPLETED
    thread = pushed.outcome["metadata"]["thread"]
    assert thread.startswith("executor-test") if pool else thread == "MainThread"


@pytest.mark.parametrize(
    ("kind", "attempt", "queue", "target", "delay"),
    [
        ("raises", 2, "default", Target.RETRYABLE, 20.0),
        ("raises", 3, "default", Target.FAILED, 0.0),
        ("raises_terminal", 1, "default", Target.FAILED, 0.0),
        ("raises", 1, "payments", Target.RETRYABLE, 10.0),
        ("raises", 3, "payments", Target.DEAD, 0.0),
        ("raises_terminal", 1, "payments", Target.DEAD, 0.0),
    ],
)
def test_a_raise_is_retried_after_its_backoff_or_fails_or_goes_dead_in_a_dlq_queue(
    kind: str, attempt: int, queue: str, target: Target, delay: float
) -> None:
    """Backoff of 10 * 2**(attempt-1) seconds; the last attempt or a TerminalError fails,
    into the dead-letter queue where the queue has one."""
    pushed = run_one(claimed(kind, attempt=attempt, queue=queue), dlq_queues={"payments"})
    assert (pushed.target, pushed.number, pushed.outcome["delay"]) == (target, delay, delay)
    assert pushed.outcome["dead"] is (target is Target.DEAD)
    terminal = kind == "raises_terminal"
    message = "TerminalError: no such account" if terminal else "ValueError: card declined"
    error = pushed.outcome["error"]
    assert message in error.pop("traceback") and error.pop("at")
    marked = {"terminal": True} if terminal else {}
    assert error == {"error": message, "attempt": attempt, **marked}


@pytest.mark.parametrize(
    ("kind", "target", "delay", "said"),
    [
        ("retries", Target.RETRYABLE, 30.0, None),
        ("snoozes", Target.SCHEDULED, 12.0, None),
        ("cancels", Target.CANCELLED, 0.0, "cancelled: refunded"),
        ("returns_odd", Target.FAILED, 0.0, "handler returned int; expected None, RetryAfter"),
        ("waits_unregistered", Target.FAILED, 0.0, "WaitForCallback returned without calling"),
    ],
)
def test_a_returned_value_becomes_its_transition(
    kind: str, target: Target, delay: float, said: str | None
) -> None:
    """What the handler returns, or for a value of no use, a terminal failure saying why."""
    pushed = run_one(claimed(kind))
    assert (pushed.target, pushed.number, pushed.outcome["delay"]) == (target, delay, delay)
    assert pushed.outcome["state"] == tr.RULES[target].state
    assert pushed.outcome.get("reason") == ("refunded" if kind == "cancels" else None)
    error = pushed.outcome.get("error", {})
    assert error["error"].startswith(said) if said else error == {}
    assert error.get("terminal", False) is (target is Target.FAILED)


def test_progress_and_metadata_ride_with_the_outcome() -> None:
    pushed = run_one(claimed("reports"))
    assert pushed.target is Target.COMPLETED
    progress = {"percent": 50, "message": "half", "metadata": {"rows": 3}}
    assert (pushed.outcome["progress"], pushed.outcome["metadata"]) == (progress, {"rows": 3})


def test_unstorable_metadata_fails_the_attempt_in_one_record() -> None:
    pushed = run_one(claimed("reports_unstorable"))
    assert pushed.target is Target.RETRYABLE and "metadata" not in pushed.outcome
    error = pushed.outcome["error"]["error"]
    assert error.startswith("UnstorableOutcome: progress or metadata not storable")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (claimed("nobody"), "unknown job kind: 'nobody'"),
        (claimed("pay", args=b'{"cents": "x"}'), "undecodable args for kind 'pay': Validation"),
    ],
)
def test_a_job_that_cannot_start_fails_without_starting(row: Claimed, message: str) -> None:
    pushed = run_one(row)
    assert (pushed.target, pushed.started) == (Target.FAILED, False)
    assert pushed.outcome["error"]["error"].startswith(message)
    assert pushed.kind == (UNKNOWN_KIND if row.kind == "nobody" else registry().index_of("pay"))


def test_a_process_exit_is_reported_as_a_failed_attempt_then_raised() -> None:
    sink, inflight, row = RecordingSink(), InFlight([4], 4), claimed("exits")
    with pytest.raises(SystemExit):
        run(executor(sink, inflight).run(row, occupied(inflight, row)))
    [(_, _, code, _, _, payload)] = sink.records
    error = orjson.loads(payload)["error"]["error"]
    assert (Target(code), error) == (Target.RETRYABLE, "SystemExit: 3")


def test_a_registered_callback_parks_the_job_on_its_id(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    job_id = insert_job(conn, kind="parks", state="running", attempt=1, run_lease=2)
    writer = AttemptWriter(Database(dsn))
    try:
        pushed = run_one(claimed("parks")._replace(id=job_id), writer=writer)
    finally:
        run(writer.close())
    assert (pushed.target, pushed.number) == (Target.WAITING, 90.0)
    assert pushed.outcome["callback_id"] == str(job(dsn, job_id)["callback_id"])


def test_run_claimed_frees_the_slot_and_its_unit_when_the_handler_returns() -> None:
    sink, inflight, row = RecordingSink(), InFlight([4], 4), claimed("raises")
    slot = occupied(inflight, row)
    run(run_claimed(executor(sink, inflight), inflight, Delivered(row, slot, 0)))
    assert (inflight.slot_info(slot), inflight.in_flight(0)) == (None, 0)
    assert [Target(record[2]) for record in sink.records] == [Target.RETRYABLE]


@pytest.mark.parametrize(
    ("cut_short", "reason"),
    [(None, "shut down before the handler finished"), ({(7, 2): "evicted"}, "evicted")],
)
def test_an_attempt_cut_short_is_reported_lost(
    cut_short: dict[tuple[int, int], str] | None, reason: str
) -> None:
    sink, inflight, row = RecordingSink(), InFlight([4], 4), claimed("blocks")

    async def main() -> None:
        started = asyncio.Event()

        async def blocks(job: Job[Any]) -> None:
            started.set()
            await asyncio.Event().wait()

        work = executor(sink, inflight, blocks=blocks)
        delivered = Delivered(row, occupied(inflight, row), 0)
        task = asyncio.create_task(run_claimed(work, inflight, delivered, cut_short=cut_short))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    [(job_id, lease, code, kind, _, payload)] = sink.records
    assert (job_id, lease, Target(code)) == (7, 2, Target.LOST)
    assert (kind, orjson.loads(payload)["reason"]) == (registry().index_of("blocks"), reason)
    assert inflight.running() == ([], []) and inflight.in_flight(0) == 0
