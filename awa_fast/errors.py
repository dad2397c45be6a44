"""Exceptions raised by awa-fast, and the ones a handler raises to steer its job."""

from __future__ import annotations

import psycopg
import psycopg.errors


class AwaError(Exception):
    """Base class of every error awa-fast raises itself."""


class ValidationError(AwaError, ValueError):
    """Producer input that cannot become a job. ``field`` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SerializationError(ValidationError):
    """Args that cannot become a job's JSON object: of a type that is not a dataclass,
    msgspec Struct, pydantic model or dict, or holding a value JSON cannot carry."""

    def __init__(self, message: str) -> None:
        super().__init__("args", message)


class SchemaNotMigrated(AwaError):
    """The database's awa-fast schema is older than this awa-fast needs (or absent)."""

    def __init__(self, current: int, needed: int) -> None:
        super().__init__(
            f"the database's awa-fast schema is at version {current}, this awa-fast needs "
            f"{needed}: run `awa-fast migrate --database-url URL` or `client.migrate()`"
        )
        self.current = current
        self.needed = needed


class UniqueConflict(AwaError):
    """A unique job with the same key is already live; ``job_id`` is the holder."""

    def __init__(self, job_id: int | None) -> None:
        super().__init__(f"a unique job with this key already exists (job id {job_id})")
        self.job_id = job_id


class QueueFull(AwaError):
    """An insert that asked for backpressure (``max_queue_depth``) was refused: its queue
    held ``depth`` available jobs, and the ``jobs`` it would add would have taken it past
    ``limit``. Nothing of the call was inserted; try again later, slower, or elsewhere."""

    def __init__(self, queue: str, *, depth: int, limit: int, jobs: int = 1) -> None:
        adding = "a job" if jobs == 1 else f"{jobs} jobs"
        super().__init__(
            f"queue {queue!r} is full: it holds {depth} available jobs, and {adding} more "
            f"would pass its max_queue_depth of {limit}"
        )
        self.queue = queue
        self.depth = depth
        self.limit = limit
        self.jobs = jobs


class TerminalError(Exception):
    """Raise from a handler to fail the job now, with no further attempts."""


class ConfigError(AwaError, ValueError):
    """Invalid runtime configuration (queues, concurrency, handlers)."""


class ConfigTypeError(ConfigError, TypeError):
    """A runner option or queue setting of the wrong type, or one ``start`` does not take:
    a TypeError too, as Python and the Awa SDK's ``start`` raise for those."""


class LeaseLost(AwaError):
    """The attempt no longer owns its job: it was cancelled, rescued or resolved by its
    callback while the handler ran (or waited for the callback). Whatever the handler does
    next is dropped. ``reason``, where known, says what became of the job."""

    def __init__(self, job_id: int, run_lease: int, reason: str | None = None) -> None:
        message = f"job {job_id}: attempt with run_lease {run_lease} no longer owns it"
        super().__init__(message if reason is None else f"{message}: {reason}")
        self.job_id = job_id
        self.run_lease = run_lease
        self.reason = reason


class JobNotFound(AwaError, LookupError):
    """No job has this id: it never existed, or retention or a purge removed it. The Awa
    SDK's ``get_job`` raises its ``AwaError`` with the same message, so a ported ``except``
    clause catches this one."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job not found: {job_id}")
        self.job_id = job_id


class CallbackNotFound(AwaError):
    """No job waits on this callback id: it is unknown, already answered, or timed out."""

    def __init__(self, callback_id: str, detail: str | None = None) -> None:
        message = f"no job waits on callback {callback_id}"
        super().__init__(message if detail is None else f"{message}: {detail}")
        self.callback_id = callback_id


class UnknownJobKind(AwaError):
    """The Awa SDK's error for a job kind no handler takes, here so that an ``except``
    clause ported from the SDK names a class (one naming a missing attribute would raise
    AttributeError itself, in the error path). No call raises it: a claimed job whose kind
    has no handler in the claiming process fails, terminal, with "unknown job kind: ..." in
    its errors, as the SDK's runtime fails it."""


class StorageNotFinalized(AwaError):
    """The Awa SDK's error for a storage transition not finished, here so that a ported
    ``except`` clause names a class. awa-fast has one storage engine and nothing to
    transition to, so no call raises it."""


class LiveRuntimesRequireExclusiveWindow(AwaError):
    """The Awa SDK's error for a migration that needs its workers stopped first, here so
    that a ported ``except`` clause names a class. No awa-fast migration needs that
    window (each runs beside live runners), so no call raises it."""


class RuntimeVersionFloorNotMet(AwaError):
    """The Awa SDK's error for a migration that live runtimes too old would not survive,
    here so that a ported ``except`` clause names a class. awa-fast's migrations set no
    version floor on live runners, so no call raises it."""


class NoRowFound(AwaError, psycopg.errors.NoDataFound):
    """A transaction's ``fetch_one`` found no row. A database error as well (SQLSTATE
    P0002): the Awa SDK raises its ``DatabaseError`` here, so a ported ``except
    awa.DatabaseError`` clause catches it, as does ``except awa.AwaError``."""


class TelemetryError(AwaError, RuntimeError):
    """``shutdown_telemetry``'s last export failed (telemetry is stopped all the same).
    A RuntimeError, as the Awa SDK's is, so a ported ``except`` clause catches it."""


class DatabaseUnreachable(AwaError, psycopg.OperationalError):
    """A client's call could not reach the database: no connection within the client's
    ``connect_timeout``, or its connection lost under the call. The server is down,
    restarting or out of reach; the message names it (host and port). A
    :data:`DatabaseError` too, as psycopg's OperationalError."""


class ServerIsStandby(DatabaseUnreachable):
    """The server a connection reached is a standby (in recovery), or read-only, so no
    write can go there: a URL that names it alone, or a write that found the server read
    only. Whatever the runtime holds on such a connection is dropped and connected again,
    to whichever server is the primary by then, as for a connection lost; a client's call
    raises it. A URL that names several hosts reaches the primary among them
    (docs/high-availability.md)."""


# The Awa SDK wraps database errors in its own DatabaseError; awa-fast lets psycopg's reach
# the caller as they are, so ``except awa_fast.DatabaseError`` (ported code's) catches them.
DatabaseError = psycopg.Error
