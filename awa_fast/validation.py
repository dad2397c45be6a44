"""Argument checks shared by every entry point (inserts, admin, batch operations,
descriptors, partitioned queues): each returns the value as it is sent to Postgres, or
raises :class:`ValidationError` naming the argument, before anything is written.
"""

from __future__ import annotations

from datetime import UTC, datetime

from awa_fast.errors import ValidationError

MAX_NAME_LENGTH = 128


def name(field: str, value: object) -> str:
    """A queue, kind or tag: non-empty text that Postgres can store."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, f"must be a non-empty string, got {value!r}")
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError(field, f"must be at most {MAX_NAME_LENGTH} characters")
    if "\x00" in value:
        raise ValidationError(field, "contains a NUL character")
    return value


def int_in(field: str, value: object, low: int, high: int) -> int:
    """An integer from ``low`` to ``high``; a bool is refused, though Python counts it."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(field, f"must be an integer from {low} to {high}, got {value!r}")
    return value


def positive_seconds(field: str, value: object) -> float:
    """A duration given in seconds: a number above 0 and below 1e9 (about 31 years, which
    keeps ``now() + value`` inside Postgres' timestamps)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise ValidationError(field, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def run_at(value: datetime | str | None) -> datetime | None:
    """A job's due time: a datetime, or an ISO 8601 text of one. A naive one is taken as
    UTC, as the Awa SDK takes it (``datetime.utcnow()`` is common in code ported from it)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            message = f"is not an ISO 8601 date and time: {value!r}"
            raise ValidationError("run_at", message) from None
    if not isinstance(value, datetime):
        raise ValidationError(
            "run_at", f"must be a datetime or an ISO 8601 text, got {type(value).__name__}"
        )
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
