"""Values a handler returns to say what happens to its job (docs/architecture.md, "The
outcome table").

Returning ``None`` completes the job. Raising :class:`~awa_fast.TerminalError` fails it;
raising anything else retries it with backoff.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from awa_fast.errors import ValidationError
from awa_fast.types import DEFAULT_CALLBACK_TIMEOUT
from awa_fast.validation import MAX_SECONDS


def _seconds(field: str, value: float) -> float:
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 <= seconds < MAX_SECONDS:
        raise ValidationError(
            field, f"must be a number of seconds from 0 to below {MAX_SECONDS:g}, got {value!r}"
        )
    return seconds


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """This attempt failed; run again after ``seconds`` (the attempt counts)."""

    seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _seconds("RetryAfter.seconds", self.seconds))


@dataclass(frozen=True, slots=True)
class Snooze:
    """Not time yet; run again after ``seconds`` without using up an attempt."""

    seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _seconds("Snooze.seconds", self.seconds))


@dataclass(frozen=True, slots=True)
class Cancel:
    """Give up on the job: it ends cancelled with ``reason`` recorded (the Awa SDK's
    "cancelled by handler" when none is given)."""

    reason: str = "cancelled by handler"

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str):
            raise ValidationError("Cancel.reason", f"must be a string, got {self.reason!r}")


@dataclass(frozen=True, slots=True)
class CallbackToken:
    """Returned by :meth:`awa_fast.worker.Job.register_callback`; hand ``id`` to the
    external system and return ``WaitForCallback(token)`` from the handler."""

    id: str
    timeout_seconds: float = DEFAULT_CALLBACK_TIMEOUT

    @property
    def callback_id(self) -> str:
        return self.id


@dataclass(frozen=True, slots=True)
class WaitForCallback:
    """Park the job until an external system resolves the callback ``token``.

    The token comes from ``job.register_callback()`` (the token or its ``id``); returning
    any other token fails the job.
    """

    token: CallbackToken | str


HandlerResult = RetryAfter | Snooze | Cancel | WaitForCallback | None
