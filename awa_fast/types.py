"""Plain records users see: jobs as stored, insert requests and their options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypedDict


class JobState(StrEnum):
    """A job's state. The members have the Awa SDK's names (``JobState.Completed``), so
    code written for it compares states unchanged; each is also its stored text, so
    ``row.state == "completed"`` holds and JSON shows ``"completed"``."""

    Scheduled = "scheduled"
    Available = "available"
    Running = "running"
    WaitingExternal = "waiting_external"
    Retryable = "retryable"
    Completed = "completed"
    Failed = "failed"
    Cancelled = "cancelled"


JOB_STATES = tuple(JobState)
# How long a callback waits for its answer, or for the next heartbeat, unless told: an hour, as
# in the Awa SDK.
DEFAULT_CALLBACK_TIMEOUT = 3600.0
# The Awa SDK's default: a unique job holds its key until it fails, is cancelled or is
# deleted (a completed one too, so a key by period runs once per period).
DEFAULT_UNIQUE_STATES = ("scheduled", "available", "running", "completed", "retryable")
# The Awa SDK's unique ``states`` as an int: bit i stands for the i-th of these.
UNIQUE_STATE_BITS = (
    "scheduled",
    "available",
    "running",
    "completed",
    "retryable",
    "failed",
    "cancelled",
    "waiting_external",
)


@dataclass(frozen=True, slots=True)
class UniqueOpts:
    """At most one live job per key. The key is the kind plus, as chosen, the queue, the args
    and the ``by_period`` time bucket (seconds); "live" means in one of ``states``: state
    names, or the Awa SDK's bitmask (an int; :data:`UNIQUE_STATE_BITS`)."""

    by_args: bool = True
    by_queue: bool = False
    by_period: int | None = None
    states: tuple[str, ...] = DEFAULT_UNIQUE_STATES


class InsertOptions(TypedDict, total=False):
    """Keyword options of every insert call. ``unique_opts`` is the Awa SDK's name for
    ``unique``; ``ordering_key``, the SDK's shard key, is checked and has no effect: one
    queue here is one claim order, as the SDK's is at its default of one shard.
    ``max_queue_depth`` asks for backpressure (awa_fast.backpressure)."""

    kind: str | None
    queue: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    tags: Sequence[str] | None
    metadata: Mapping[str, Any] | None
    unique: UniqueOpts | Mapping[str, Any] | None
    unique_opts: UniqueOpts | Mapping[str, Any] | None
    deadline: float | None
    ordering_key: bytes | str | None
    max_queue_depth: int | None


def check_insert_options(function: str, options: Mapping[str, object]) -> None:
    """Refuse a keyword no insert takes with the TypeError Python raises for a function's
    own signature (``insert(args, queu="x")``), as the Awa SDK's inserts raise it."""
    unknown = sorted(options.keys() - InsertOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")


@dataclass(slots=True)
class InsertRequest:
    """Args plus insert options: what ``insert_many`` items and follow-up ``make`` may return."""

    args: object
    kind: str | None = None
    queue: str = "default"
    priority: int = 2
    max_attempts: int = 25
    run_at: datetime | None = None
    tags: Sequence[str] | None = None
    metadata: Mapping[str, Any] | None = None
    unique: UniqueOpts | Mapping[str, Any] | None = None
    deadline: float | None = None  # seconds per attempt; None: the queue's deadline
    # Refuse the insert (QueueFull) if the queue's available jobs would pass this
    # (awa_fast.backpressure); None: no check, and no statement for one.
    max_queue_depth: int | None = None


def iso(at: datetime) -> str:
    """``at`` as the Awa SDK gives a job's times: ISO 8601 in UTC, with as many decimals
    of the second as it needs, in threes (none, milliseconds or microseconds)."""
    micros = at.microsecond
    spec = "seconds" if not micros else "milliseconds" if not micros % 1000 else "microseconds"
    return at.astimezone(UTC).isoformat(timespec=spec)


def _instant(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


@dataclass(frozen=True, slots=True)
class JobTimes:
    """A job's times as timezone-aware datetimes in UTC: :attr:`JobRow.datetimes`."""

    run_at: datetime
    created_at: datetime
    attempted_at: datetime | None
    finalized_at: datetime | None
    heartbeat_at: datetime | None
    deadline_at: datetime | None
    callback_timeout_at: datetime | None

    @property
    def deadline(self) -> datetime | None:
        return self.deadline_at


# JobRow's times, which it holds as the Awa SDK's text and JobTimes as datetimes.
_TIMES = tuple(f.name for f in fields(JobTimes))


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job as stored. ``args`` is the decoded JSON object (a dict). Its times are ISO
    8601 text in UTC, as the Awa SDK gives them (``datetime.fromisoformat(row.run_at)``);
    :attr:`datetimes` has them as datetimes. ``parent_id`` is, for a follow-up, the job
    whose transition inserted it; None for a job inserted any other way."""

    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    state: JobState
    priority: int
    attempt: int
    max_attempts: int
    run_at: str
    created_at: str
    attempted_at: str | None = None
    finalized_at: str | None = None
    heartbeat_at: str | None = None
    deadline_at: str | None = None
    run_lease: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    progress: Any = None
    callback_id: str | None = None
    callback_timeout_at: str | None = None
    callback_result: Any = None
    parent_id: int | None = None

    @property
    def deadline(self) -> str | None:
        """``deadline_at`` by the Awa SDK's name for it (its ``Job.deadline``)."""
        return self.deadline_at

    @property
    def datetimes(self) -> JobTimes:
        """The times as timezone-aware datetimes in UTC, for awa-fast's own code:
        ``row.datetimes.created_at``."""
        run_at, created_at, *rest = (_instant(getattr(self, name)) for name in _TIMES)
        assert run_at is not None and created_at is not None
        return JobTimes(run_at, created_at, *rest)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobRow:
        """Build from a dict row of any ``awa_fast.jobs*`` table (extra columns ignored)."""
        values = {f.name: row[f.name] for f in _ROW_FIELDS if f.name in row}
        if values.get("callback_id") is not None:
            values["callback_id"] = str(values["callback_id"])
        for name in _TIMES:
            if values.get(name) is not None:
                values[name] = iso(values[name])
        values["state"] = JobState(values["state"])
        return cls(**values)


_ROW_FIELDS = fields(JobRow)
