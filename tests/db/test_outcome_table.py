"""The outcome table, without a database: each way a handler can end, on a middle and on
the final attempt, and the target, state and lifecycle outcome it leads to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from awa_fast import Cancel, RetryAfter, Snooze, TerminalError, WaitForCallback
from awa_fast.lifecycle import transitions as tr
from awa_fast.lifecycle.transitions import Outcome, Target


@dataclass(frozen=True)
class Token:
    id: str
    timeout_seconds: float = 90.0


@dataclass(frozen=True)
class Row:
    """One line of the table: how the handler ended, and what that does."""

    ending: str
    result: Any
    raised: BaseException | None
    middle: Target  # on attempt 2 of 5
    final: Target  # on attempt 5 of 5
    error: str | None  # the start of the recorded error, if any
    terminal: bool = False


TOKEN = Token("cb-1")
TABLE = [
    Row("returns None", None, None, Target.COMPLETED, Target.COMPLETED, None),
    Row("RetryAfter(7)", RetryAfter(7), None, Target.RETRYABLE, Target.FAILED, None),
    Row("Snooze(3)", Snooze(3), None, Target.SCHEDULED, Target.SCHEDULED, None),
    Row("Cancel('no')", Cancel("no"), None, Target.CANCELLED, Target.CANCELLED, "cancelled: no"),
    Row("WaitForCallback", WaitForCallback(TOKEN), None, Target.WAITING, Target.WAITING, None),
    Row(
        "WaitForCallback, no registered token",
        WaitForCallback(Token("other")),
        None,
        Target.FAILED,
        Target.FAILED,
        "WaitForCallback returned without",
        terminal=True,
    ),
    Row(
        "returns 42",
        42,
        None,
        Target.FAILED,
        Target.FAILED,
        "handler returned int",
        terminal=True,
    ),
    Row("raises ValueError", None, ValueError("x"), Target.RETRYABLE, Target.FAILED, "ValueError"),
    Row("raises SystemExit", None, SystemExit(3), Target.RETRYABLE, Target.FAILED, "SystemExit"),
    Row(
        "raises TerminalError",
        None,
        TerminalError("bad"),
        Target.FAILED,
        Target.FAILED,
        "TerminalError: bad",
        terminal=True,
    ),
]
BACKOFF = tr.Backoff(base=1.0, max=60.0, jitter=0.0)


def _transition(row: Row, attempt: int) -> tr.Transition:
    at = tr.Attempt(attempt, 5, callback_id=TOKEN.id)
    if row.raised is not None:
        return tr.from_exception(row.raised, at, BACKOFF)
    return tr.from_result(row.result, at)


@pytest.mark.parametrize("row", TABLE, ids=[row.ending for row in TABLE])
@pytest.mark.parametrize("attempt", [2, 5], ids=["middle", "final"])
def test_each_ending_leads_where_the_table_says(row: Row, attempt: int) -> None:
    transition = _transition(row, attempt)
    assert transition.target is (row.middle if attempt == 2 else row.final)
    if row.error is None and transition.target is not Target.FAILED:
        assert transition.error is None
    else:
        assert transition.error is not None
        assert transition.error["attempt"] == attempt
        if row.error is not None:
            assert transition.error["error"].startswith(row.error), transition.error
        assert transition.error.get("terminal", False) is row.terminal


def test_delays_are_the_backoff_the_handler_or_the_callback_timeout() -> None:
    middle = tr.Attempt(2, 5, callback_id=TOKEN.id)
    assert tr.from_exception(ValueError("x"), middle, BACKOFF).delay == 2.0  # 1 * 2**(2-1)
    assert tr.from_result(RetryAfter(7), middle).delay == 7.0
    assert tr.from_result(Snooze(3), middle).delay == 3.0
    waiting = tr.from_result(WaitForCallback(TOKEN), middle)
    assert (waiting.delay, waiting.callback_id) == (90.0, TOKEN.id)


@pytest.mark.parametrize(
    ("target", "state", "outcome"),
    [
        (Target.COMPLETED, "completed", Outcome.COMPLETED),
        (Target.RETRYABLE, "retryable", Outcome.RETRIED),
        (Target.SCHEDULED, "scheduled", None),
        (Target.CANCELLED, "cancelled", Outcome.CANCELLED),
        (Target.WAITING, "waiting_external", Outcome.WAITING_FOR_CALLBACK),
        (Target.FAILED, "failed", Outcome.EXHAUSTED),
        (Target.RELEASED, "available", None),
        (Target.LOST, "retryable", None),
        (Target.DEAD, "failed", Outcome.EXHAUSTED),
    ],
)
def test_each_target_has_one_state_and_outcome(
    target: Target, state: str, outcome: Outcome | None
) -> None:
    assert tr.STATE_OF_CODE[int(target)] == state
    assert tr.OUTCOME_OF_CODE[int(target)] is outcome


def test_every_target_is_in_the_table() -> None:
    assert set(tr.RULES) == set(Target)


def test_a_failure_in_a_dead_letter_queue_goes_there_instead() -> None:
    failed = tr.from_exception(TerminalError("bad"), tr.Attempt(1, 5), BACKOFF)
    assert tr.to_dlq(failed).target is Target.DEAD
    assert tr.to_dlq(tr.COMPLETED) is tr.COMPLETED


def test_a_plain_completion_is_encoded_without_a_payload() -> None:
    assert tr.encode(tr.COMPLETED) == (int(Target.COMPLETED), 0.0, b"")
    code, _, payload = tr.encode(tr.COMPLETED, progress={"percent": 50})
    assert code == int(Target.COMPLETED)
    assert orjson.loads(payload) == {
        "state": "completed",
        "dead": False,
        "delay": 0.0,
        "progress": {"percent": 50},
    }


@pytest.mark.parametrize("target", [t for t in Target if t is not Target.COMPLETED])
def test_a_record_carries_the_whole_outcome_object(target: Target) -> None:
    """The committer passes a record's payload to job_transition_many as it is: the state,
    the dlq flag and the delay are in it, from the table."""
    transition = tr.Transition(target, delay=7.5, reason="why")
    record = tr.record(41, 3, 2, transition, metadata={"k": 1})
    job_id, lease, code, kind, number, payload = record
    assert (job_id, lease, code, kind, number) == (41, 3, int(target), 2, 7.5)
    assert orjson.loads(payload) == {
        "state": tr.RULES[target].state,
        "dead": target is Target.DEAD,
        "delay": 7.5,
        "reason": "why",
        "metadata": {"k": 1},
    }


def test_given_back_and_lost_are_records_of_their_own_targets() -> None:
    assert tr.released("r") == tr.Transition(Target.RELEASED, reason="r")
    assert tr.lost("l") == tr.Transition(Target.LOST, reason="l")
