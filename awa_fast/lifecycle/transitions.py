"""The outcome table (docs/architecture.md, "The outcome table"), as data.

A handler's result becomes a :class:`Transition`: a target state plus the few numbers and
strings the SQL needs. The worker computes it (it knows the attempt and max_attempts), encodes
it as one ring record (:func:`record`), and the committer applies whole batches of them
with ``job_complete_many`` / ``job_transition_many``. Nothing else decides what an outcome
does: jobs given back unstarted and attempts lost with their worker are records too.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum, StrEnum
from typing import Any

import orjson

from awa_fast.errors import TerminalError
from awa_fast.outcomes import Cancel, RetryAfter, Snooze, WaitForCallback
from awa_fast.types import DEFAULT_CALLBACK_TIMEOUT


class Target(IntEnum):
    """The record code carried through the ring: where the attempt goes."""

    COMPLETED = 0
    RETRYABLE = 1
    SCHEDULED = 2
    CANCELLED = 3
    WAITING = 4
    FAILED = 5
    RELEASED = 6  # claimed but never started: back to available, attempt given back
    LOST = 7  # the process running it died: retried (attempt counts) or failed, in SQL
    DEAD = 8  # failed, into the dead-letter queue (queues that enable it)


class Outcome(StrEnum):
    """What follow-ups and lifecycle events are keyed by."""

    COMPLETED = "completed"
    RETRIED = "retried"
    EXHAUSTED = "exhausted"
    CANCELLED = "cancelled"
    WAITING_FOR_CALLBACK = "waiting_for_callback"
    RESCUED = "rescued"


@dataclass(frozen=True, slots=True)
class Rule:
    state: str
    outcome: Outcome | None


RULES: dict[Target, Rule] = {
    Target.COMPLETED: Rule("completed", Outcome.COMPLETED),
    Target.RETRYABLE: Rule("retryable", Outcome.RETRIED),
    Target.SCHEDULED: Rule("scheduled", None),
    Target.CANCELLED: Rule("cancelled", Outcome.CANCELLED),
    Target.WAITING: Rule("waiting_external", Outcome.WAITING_FOR_CALLBACK),
    Target.FAILED: Rule("failed", Outcome.EXHAUSTED),
    Target.RELEASED: Rule("available", None),
    Target.LOST: Rule("retryable", None),
    Target.DEAD: Rule("failed", Outcome.EXHAUSTED),
}
OUTCOME_OF_CODE: dict[int, Outcome | None] = {int(t): r.outcome for t, r in RULES.items()}
STATE_OF_CODE: dict[int, str] = {int(t): r.state for t, r in RULES.items()}


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: ``min(base * 2**(attempt-1), max) * (1 + U(0, jitter))``."""

    base: float = 1.0
    max: float = 3600.0
    jitter: float = 0.25

    def delay(self, attempt: int) -> float:
        raw = min(self.base * 2.0 ** max(attempt - 1, 0), self.max)
        return raw * (1.0 + random.uniform(0.0, self.jitter))


@dataclass(frozen=True, slots=True)
class Transition:
    """One attempt's outcome. ``delay`` is seconds until the next run (retry, snooze) or
    until the callback times out (waiting)."""

    target: Target
    delay: float = 0.0
    error: dict[str, Any] | None = None
    callback_id: str | None = None
    reason: str | None = None


@dataclass(slots=True)
class Attempt:
    """What the table needs to know about the attempt being finished (not frozen: every
    job makes one, and a frozen dataclass pays a setattr call per field)."""

    attempt: int
    max_attempts: int
    callback_id: str | None = None


COMPLETED = Transition(Target.COMPLETED)
# The longest text of a handler's (an error, a reason, a traceback's end) kept on its job.
MAX_TEXT_CHARS = 4000
_PLAIN_COMPLETION = (int(Target.COMPLETED), 0.0, b"")
# One ring record: (job id, run lease, code, kind index, number, payload).
Record = tuple[int, int, int, int, float, bytes]


def error_entry(
    message: str, attempt: int, *, terminal: bool = False, trace: str | None = None
) -> dict[str, Any]:
    """The shape appended to a job's ``errors``: ``{error, attempt, at[, terminal]}``."""
    entry: dict[str, Any] = {
        "error": storable_text(message),
        "attempt": attempt,
        "at": datetime.now(UTC).isoformat(),
    }
    if terminal:
        entry["terminal"] = True
    if trace:
        entry["traceback"] = storable_text(trace)
    return entry


def storable_text(text: str) -> str:
    """``text`` as jsonb can hold it: a handler's message is data we keep, not refuse, so
    a NUL or a lone surrogate in it is written as its escape instead, and a message
    longer than :data:`MAX_TEXT_CHARS` keeps its start (every attempt's error is kept on
    the job, and an outcome must fit in the ring)."""
    if len(text) > MAX_TEXT_CHARS:
        text = f"{text[:MAX_TEXT_CHARS]}... ({len(text) - MAX_TEXT_CHARS} more characters)"
    if text.isascii() and "\x00" not in text:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, even one whose ``__str__`` raises."""
    try:
        text = str(exc)
    except Exception:
        text = "<exception str() failed>"
    return f"{type(exc).__name__}: {text}"


def failed_terminal(message: str, attempt: Attempt) -> Transition:
    return Transition(Target.FAILED, error=error_entry(message, attempt.attempt, terminal=True))


def from_result(result: object, attempt: Attempt) -> Transition:
    """The transition for a handler that returned ``result``."""
    match result:
        case None:
            return COMPLETED
        case RetryAfter(seconds=seconds):
            if attempt.attempt >= attempt.max_attempts:
                return Transition(
                    Target.FAILED,
                    error=error_entry(
                        f"RetryAfter({seconds}) returned on the final attempt", attempt.attempt
                    ),
                )
            return Transition(Target.RETRYABLE, delay=seconds)
        case Snooze(seconds=seconds):
            return Transition(Target.SCHEDULED, delay=seconds)
        case Cancel(reason=reason):
            return Transition(
                Target.CANCELLED,
                reason=storable_text(reason),
                error=error_entry(f"cancelled: {reason}", attempt.attempt),
            )
        case WaitForCallback(token=token):
            token_id = getattr(token, "id", token)
            if attempt.callback_id is None or token_id != attempt.callback_id:
                return failed_terminal(
                    "WaitForCallback returned without calling register_callback", attempt
                )
            return Transition(Target.WAITING, delay=attempt_timeout(token), callback_id=token_id)
        case _:
            return failed_terminal(
                f"handler returned {type(result).__name__}; expected None, RetryAfter, Snooze, "
                "Cancel or WaitForCallback",
                attempt,
            )


def attempt_timeout(token: object) -> float:
    return float(getattr(token, "timeout_seconds", DEFAULT_CALLBACK_TIMEOUT))


def from_exception(exc: BaseException, attempt: Attempt, backoff: Backoff) -> Transition:
    """The transition for a handler that raised ``exc``."""
    message = describe(exc)
    trace = "".join(traceback.format_exception(exc, limit=-5))[-MAX_TEXT_CHARS:]
    if isinstance(exc, TerminalError):
        return Transition(
            Target.FAILED, error=error_entry(message, attempt.attempt, terminal=True, trace=trace)
        )
    entry = error_entry(message, attempt.attempt, trace=trace)
    if attempt.attempt >= attempt.max_attempts:
        return Transition(Target.FAILED, error=entry)
    return Transition(Target.RETRYABLE, delay=backoff.delay(attempt.attempt), error=entry)


def to_dlq(transition: Transition) -> Transition:
    """A failure in a queue with a dead-letter queue goes there instead."""
    if transition.target is Target.FAILED:
        return Transition(Target.DEAD, transition.delay, transition.error)
    return transition


def record(
    job_id: int,
    run_lease: int,
    kind: int,
    transition: Transition,
    *,
    progress: object = None,
    metadata: dict[str, Any] | None = None,
) -> Record:
    """The ring record of one attempt's outcome: every record is made here."""
    code, number, payload = encode(transition, progress=progress, metadata=metadata)
    return job_id, run_lease, code, kind, number, payload


def released(reason: str) -> Transition:
    """A claimed job whose handler never started: back to available, attempt unspent."""
    return Transition(Target.RELEASED, reason=reason)


def lost(reason: str) -> Transition:
    """An attempt whose process died or was cut short: retried or failed, in SQL."""
    return Transition(Target.LOST, reason=reason)


def encode(
    transition: Transition, *, progress: object = None, metadata: dict[str, Any] | None = None
) -> tuple[int, float, bytes]:
    """(code, number, payload) for one ring record. The payload is empty for a plain
    completion; otherwise it is the outcome object job_transition_many reads, whole:
    target state, whether it goes to the dlq, its delay, and the error, reason, callback
    id, progress and metadata it carries (keys absent when unset)."""
    if transition is COMPLETED and progress is None and not metadata:
        return _PLAIN_COMPLETION  # most records: built once
    target = transition.target
    outcome: dict[str, Any] = {
        "state": RULES[target].state,
        "dead": target is Target.DEAD,
        "delay": transition.delay,
    }
    if transition.error is not None:
        outcome["error"] = transition.error
    if transition.callback_id is not None:
        outcome["callback_id"] = transition.callback_id
    if transition.reason is not None:
        outcome["reason"] = transition.reason
    if progress is not None:
        outcome["progress"] = progress
    if metadata:
        outcome["metadata"] = metadata
    return int(target), transition.delay, orjson.dumps(outcome)
