"""What every admin concern builds on: :class:`Op` and :class:`Locked`, and the row shapers,
revive rules and JSON output that several concerns share, so each is written once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from awa_fast.errors import UniqueConflict
from awa_fast.types import DEFAULT_UNIQUE_STATES

T = TypeVar("T")
Rows = Sequence[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """A statement, its parameters and what its rows become. ``first``, when given, runs
    before it with the same parameters, as a statement of its own: it unpacks the packs
    holding the jobs ``sql`` acts on (migration 0016), so that ``sql``, which gets a
    snapshot of its own, finds them as rows."""

    sql: str
    params: dict[str, Any]
    shape: Callable[[Rows], T]
    first: str | None = None


@dataclass(frozen=True, slots=True)
class Locked(Generic[T]):
    """An operation decided under a row lock: ``lock`` reads and locks rows, and its shape
    returns the result, or the Op that acts on what it read. Both clients run the two in one
    transaction, so nothing changes the rows between the reading and the acting."""

    lock: Op[T | Op[T]]


def any_rows(rows: Rows) -> bool:
    return bool(rows)


def row_count(rows: Rows) -> int:
    return len(rows)


# A revived job's unique key whose claim is gone is taken with the default live states.
UNCLAIMED_KEY_STATES = list(DEFAULT_UNIQUE_STATES)


def revived_one(rows: Rows) -> int | None:
    """The revived job's id; None if there was no such entry. An entry held off by a live
    job with its unique key raises UniqueConflict naming that job, and stays."""
    for row in rows:
        if row["holder"] is not None:
            raise UniqueConflict(row["holder"])
    return rows[0]["id"] if rows else None


def pretty(value: object) -> str:
    """Indented JSON, times in UTC with a Z, bytes (a unique key) as hex."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z, default=_hex).decode()


def _hex(value: object) -> str:
    """orjson's fallback: bytes (a unique key) as hex."""
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot encode {type(value).__name__}")
