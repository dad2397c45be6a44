"""Argument checks shared by every entry point (inserts, admin, batch operations,
descriptors, partitioned queues): each returns the value as it is sent to Postgres, or
raises :class:`ValidationError` naming the argument, before anything is written.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from awa_fast.errors import ConfigError, ConfigTypeError, ValidationError

MAX_NAME_LENGTH = 128

# Postgres' text and jsonb hold no NUL: the Awa SDK's words for refusing one.
NULL_BYTES = "must not contain null bytes (\\u0000), which Postgres cannot store"


def name(field: str, value: object) -> str:
    """A name (a queue, kind, tag or schedule): non-empty text that Postgres can store."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, f"must be a non-empty string, got {value!r}")
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError(field, f"must be at most {MAX_NAME_LENGTH} characters")
    return _utf8(field, storable_text(field, value))


def storable_text(field: str, value: str) -> str:
    """``value``, if it holds no NUL, which no text column can hold."""
    if "\x00" in value:
        raise ValidationError(field, NULL_BYTES)
    return value


def _utf8(field: str, value: str) -> str:
    """``value``, if UTF-8 can carry it: a lone surrogate (what ``surrogateescape`` makes of
    undecodable bytes) would fail only as psycopg sends it, or as orjson encodes it."""
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValidationError(field, f"holds a lone surrogate: {value!r}") from None
    return value


def int_in(field: str, value: object, low: int, high: int) -> int:
    """An integer from ``low`` to ``high``; a bool is refused, though Python counts it."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(field, f"must be an integer from {low} to {high}, got {value!r}")
    return value


MAX_JOB_ID = 2**63 - 1


def job_id(value: object, field: str = "job_id") -> int:
    """A job's id as a lookup takes it: any integer Postgres' bigint holds (one below 1
    finds no job, as in the Awa SDK), a bool refused."""
    return int_in(field, value, -MAX_JOB_ID - 1, MAX_JOB_ID)


# The longest duration anything takes in seconds: about 31 years, which keeps
# ``now() + it`` inside Postgres' timestamps and readable back into Python.
MAX_SECONDS = 1e9


def positive_seconds(field: str, value: object) -> float:
    """A duration given in seconds: a number above 0 and below :data:`MAX_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < MAX_SECONDS:
        raise ValidationError(field, f"must be a positive number of seconds, got {value!r}")
    return float(value)


# A session's TimeZone moves the fields of an instant it reads by less than a day, and
# psycopg reads only years 1 to 9999: a due time a day inside those reads back anywhere.
_EARLIEST_DUE = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
_LATEST_DUE = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)


def instant(field: str, value: object, *, naive_utc: bool = False, text: bool = False) -> datetime:
    """``value`` as an aware datetime in UTC: a datetime, or with ``text`` an ISO 8601
    text of one; a naive one is UTC with ``naive_utc``, else refused. One that leaves
    Python's years 1 to 9999 on the way to UTC is refused here, as Postgres would take it
    and psycopg could not read it back."""
    if text and isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(field, f"is not an ISO 8601 date and time: {value!r}") from None
    if not isinstance(value, datetime):
        wanted = "a datetime or an ISO 8601 text" if text else "a datetime"
        raise ValidationError(field, f"must be {wanted}, got {type(value).__name__}")
    if value.utcoffset() is None:
        if not naive_utc:
            raise ValidationError(field, f"must be an aware datetime, got {value!r}")
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        message = f"{value.isoformat()} is out of range: in UTC it leaves the years 1 to 9999"
        raise ValidationError(field, message) from None


def run_at(value: datetime | str | None) -> datetime | None:
    """A job's due time, in UTC: a datetime, or an ISO 8601 text of one. A naive one is
    taken as UTC, as the Awa SDK takes it (``datetime.utcnow()`` is common in code ported
    from it). It is stored, so it must read back in any session's time zone."""
    if value is None:
        return None
    due = instant("run_at", value, naive_utc=True, text=True)
    if not _EARLIEST_DUE <= due <= _LATEST_DUE:
        raise ValidationError(
            "run_at",
            f"{due.isoformat()} is out of range: a due time must fall from "
            f"{_EARLIEST_DUE.isoformat()} to {_LATEST_DUE.isoformat()}",
        )
    return due


def check_rate_limit(queue: str, limit: object) -> tuple[float, int]:
    """``(max_rate, burst)`` checked: a positive finite rate in jobs a second and a whole
    burst of at least 1. What is not such a pair of numbers is a TypeError, a rate not
    above 0 a ConfigError (an AwaError), each in the Awa SDK's words and naming the
    queue."""
    rate: object = None
    burst: object = None
    if isinstance(limit, tuple | list) and len(limit) == 2:
        rate, burst = limit
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or isinstance(burst, bool)
        or not isinstance(burst, int)
    ):
        raise ConfigTypeError(
            "rate_limit must be a (max_rate: float, burst: int) tuple or None, "
            f"got {limit!r} for queue {queue!r}"
        )
    if not 0 < rate < math.inf:
        raise ConfigError(f"rate_limit max_rate must be > 0.0, got {rate!r} for queue {queue!r}")
    if burst < 1:
        raise ConfigError(
            f"rate_limit burst must be an integer >= 1, got {burst!r} for queue {queue!r}"
        )
    return float(rate), burst
