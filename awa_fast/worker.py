"""The handler side: what a handler is given (:class:`Job`) and how handlers are registered.

Registration is data (:class:`Handler` in a :class:`Registry`) built before any worker
process forks, so every process agrees on the kind → handler mapping and on each kind's
small integer index that travels in ring records.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import psycopg

from awa_fast import callback_rules, validation
from awa_fast.codec import Decoder, decoder_for, kind_of
from awa_fast.errors import ConfigError, ConfigTypeError, ValidationError
from awa_fast.outcomes import CallbackToken
from awa_fast.tracing import KEY as TRACEPARENT_KEY
from awa_fast.types import DEFAULT_CALLBACK_TIMEOUT, iso

T = TypeVar("T")
UNKNOWN_KIND = 0xFFFF_FFFF

HandlerFunc = Callable[["Job[Any]"], Awaitable[object] | object]


class AttemptWrites(Protocol):
    """What a :class:`Job` writes to its own row while it runs: the runtime's attempt writer
    (:mod:`awa_fast.runtime.work.attempt_writer`), guarded by the attempt's run lease."""

    async def register_callback(
        self, job_id: int, run_lease: int, timeout_seconds: float, *, rules: dict[str, str] | None
    ) -> str: ...

    async def save_progress(
        self, job_id: int, run_lease: int, progress: object, metadata: dict[str, Any]
    ) -> None: ...

    def save_progress_sync(
        self, job_id: int, run_lease: int, progress: object, metadata: dict[str, Any]
    ) -> None: ...

    async def wait_for_callback(
        self, job_id: int, run_lease: int, callback_id: str, cancelled: Callable[[], bool]
    ) -> tuple[Any, datetime | None]: ...

    async def close(self) -> None:
        """Its connections, closed by the worker that made it, when the worker ends."""


class CompletesInTransaction(Protocol):
    """How a :class:`Job` completes its attempt in its handler's own transaction
    (:mod:`awa_fast.runtime.work.completion`)."""

    async def complete(self, job: Job[Any], conn: psycopg.AsyncConnection[Any]) -> None: ...

    def complete_sync(self, job: Job[Any], conn: psycopg.Connection[Any]) -> None: ...


POSTGRES_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def instant(micros: int) -> datetime:
    """A timestamptz as Postgres sends it in binary, microseconds since 2000-01-01 UTC, as
    a datetime in UTC. Claim connections load a claimed row's instants as integers, which
    cost the supervisor next to nothing to load (benches/RESULTS.md, "Design
    measurements"); a Job makes datetimes only of those its handler reads."""
    return POSTGRES_EPOCH + timedelta(microseconds=micros)


def micros_of(at: datetime) -> int:
    """:func:`instant`'s inverse: ``at`` as microseconds since 2000-01-01 UTC."""
    return (at - POSTGRES_EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class AttemptTimes:
    """An attempt's times as timezone-aware datetimes in UTC: :attr:`Job.datetimes`."""

    run_at: datetime
    created_at: datetime
    deadline: datetime | None  # None: no deadline (its queue has none, nor the job)


class Job(Generic[T]):
    """One attempt of a job, as a handler sees it. ``run_at``, ``created_at`` and
    ``deadline`` are ISO 8601 text in UTC, as the Awa SDK gives them; :attr:`datetimes`
    has them as datetimes."""

    __slots__ = (
        "_cancelled",
        "_completion",
        "_created_at_us",
        "_deadline_at_us",
        "_metadata_updates",
        "_run_at_us",
        "_writer",
        "args",
        "attempt",
        "callback",
        "completed_in_transaction",
        "errors",
        "id",
        "kind",
        "max_attempts",
        "metadata",
        "priority",
        "progress",
        "progress_changed",
        "queue",
        "run_lease",
        "tags",
    )

    def __init__(
        self,
        *,
        id: int,
        run_lease: int,
        kind: str,
        queue: str,
        args: T,
        attempt: int,
        max_attempts: int,
        priority: int,
        tags: list[str],
        metadata: dict[str, Any],
        errors: list[dict[str, Any]],
        progress: Any,
        run_at_us: int,
        created_at_us: int,
        deadline_at_us: int | None,
        cancelled: Callable[[], bool],
        writer: AttemptWrites,
        completion: CompletesInTransaction | None = None,
    ) -> None:
        self.id = id
        self.run_lease = run_lease
        self.kind = kind
        self.queue = queue
        self.args = args
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.priority = priority
        self.tags = tags
        self.metadata = metadata
        self.errors = errors
        self.progress = progress
        self._run_at_us = run_at_us
        self._created_at_us = created_at_us
        self._deadline_at_us = deadline_at_us
        self.callback: CallbackToken | None = None
        self.progress_changed = False
        self._cancelled = cancelled
        self._writer = writer
        self._completion = completion
        self._metadata_updates: dict[str, Any] = {}
        # Set once complete_in wrote the completion: the runtime then writes no outcome.
        self.completed_in_transaction = False

    @property
    def run_at(self) -> str:
        return iso(instant(self._run_at_us))

    @property
    def created_at(self) -> str:
        return iso(instant(self._created_at_us))

    @property
    def finalized_at(self) -> None:
        """None: a job whose handler runs has not finished (the Awa SDK's field)."""
        return None

    @property
    def datetimes(self) -> AttemptTimes:
        """``run_at``, ``created_at`` and ``deadline`` as datetimes, for awa-fast's own
        code: ``job.datetimes.deadline``."""
        deadline = self._deadline_at_us
        return AttemptTimes(
            instant(self._run_at_us),
            instant(self._created_at_us),
            None if deadline is None else instant(deadline),
        )

    @property
    def deadline(self) -> str | None:
        """When this attempt's deadline passes: the time of its claim plus the job's own
        ``deadline`` seconds, else its queue's; None in a queue with no deadline (the
        Awa SDK's ``deadline_duration_ms=0``) for a job with none of its own. Past it the
        attempt is cancelled (``is_cancelled()`` turns true within a heartbeat) and a
        handler still running ``deadline_grace`` later is stopped (its task cancelled, or
        its worker process killed): a handler with long work can check this before each
        step rather than be cut off in one. A wait in :meth:`wait_for_callback` does not
        count, and moves it later."""
        deadline = self._deadline_at_us
        return None if deadline is None else iso(instant(deadline))

    @property
    def traceparent(self) -> str | None:
        """The W3C traceparent of the span that inserted this job (the Awa SDK's field):
        the context its handler's span continues, None when it was inserted without one
        (docs/observability.md, "Traces")."""
        value = self.metadata.get(TRACEPARENT_KEY)
        return value if isinstance(value, str) else None

    def is_cancelled(self) -> bool:
        """True once the job was cancelled (admin cancel, deadline, shutdown): stop soon."""
        return self._cancelled()

    def set_progress(self, percent: int, message: str | None = None) -> None:
        """Record progress, ``percent`` held to 0..100 as in the Awa SDK. It is saved with
        the attempt's outcome or a flush, kept for a retry to resume from, and cleared
        when the job completes."""
        if (
            isinstance(percent, bool)
            or not isinstance(percent, int | float)
            or not math.isfinite(percent)
        ):
            raise ValidationError("percent", f"must be a finite number, got {percent!r}")
        if message is not None and not isinstance(message, str):
            raise ValidationError("message", f"must be a string or None, got {message!r}")
        progress = self._progress_object()
        progress["percent"] = min(max(percent, 0), 100)
        if message is not None:
            progress["message"] = message
        self.progress = progress
        self.progress_changed = True

    def _progress_object(self) -> dict[str, Any]:
        """A copy of the progress to change (an object, whatever was stored before)."""
        return dict(self.progress) if isinstance(self.progress, dict) else {}

    async def complete_in(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Complete this attempt in ``conn``'s transaction, which the handler owns and
        commits: the rows it wrote there and the completion commit together, or neither.
        The follow-ups declared for completion are inserted in it too. Raises
        :class:`~awa_fast.errors.LeaseLost` when the attempt no longer owns the job
        (rescued or cancelled first): let it propagate so the transaction rolls back. Once
        called, the runtime writes no outcome for the attempt; should the transaction
        roll back, the attempt is rescued and retried (docs/handlers.md)."""
        await self._completer().complete(self, conn)
        self.completed_in_transaction = True

    def complete_in_sync(self, conn: psycopg.Connection[Any]) -> None:
        """:meth:`complete_in` for a plain ``def`` handler, on a sync connection."""
        self._completer().complete_sync(self, conn)
        self.completed_in_transaction = True

    def _completer(self) -> CompletesInTransaction:
        if self._completion is None:  # a Job built outside a runtime (a test's own)
            raise RuntimeError(f"job {self.id}: this job was not given to a handler to run")
        return self._completion

    async def flush_progress(self) -> None:
        """Write the progress and metadata updates recorded so far to the job now, not
        only with the outcome: for a long job whose progress others watch, or whose
        successor, should this attempt be lost, should find it. Raises
        :class:`~awa_fast.errors.LeaseLost` if this attempt no longer owns the job."""
        await self._writer.save_progress(
            self.id, self.run_lease, self.progress, self._metadata_updates
        )

    def flush_progress_sync(self) -> None:
        """:meth:`flush_progress` for a plain ``def`` handler (it blocks until written)."""
        self._writer.save_progress_sync(
            self.id, self.run_lease, self.progress, self._metadata_updates
        )

    def update_metadata(self, updates: dict[str, Any]) -> None:
        """Merge ``updates`` into ``progress["metadata"]``, where the Awa SDK keeps them (so
        they are saved, kept and cleared as progress is), and into the job's metadata,
        when the attempt's outcome is saved or its progress flushed."""
        if not isinstance(updates, Mapping):
            raise ValidationError("updates", f"must be a dict, got {type(updates).__name__}")
        progress = self._progress_object()
        saved = progress.get("metadata")
        progress["metadata"] = {**(saved if isinstance(saved, dict) else {}), **updates}
        self.progress = progress
        self.progress_changed = True
        self.metadata.update(updates)
        self._metadata_updates.update(updates)

    @property
    def metadata_updates(self) -> dict[str, Any]:
        return self._metadata_updates

    async def register_callback(
        self,
        timeout_seconds: float = DEFAULT_CALLBACK_TIMEOUT,
        filter: str | None = None,
        on_complete: str | None = None,
        on_fail: str | None = None,
        transform: str | None = None,
    ) -> CallbackToken:
        """A callback id for an external system: park with ``WaitForCallback(token)``, or
        wait here with :meth:`wait_for_callback`.

        The id is written onto the job before it is returned, so the external system may
        answer at once, even before this handler returns: the callback then decides the
        job and the handler's own result is dropped. Raises
        :class:`~awa_fast.errors.LeaseLost` if this attempt no longer owns the job
        (cancelled, rescued or resolved meanwhile).

        ``filter``, ``on_complete``, ``on_fail`` and ``transform`` are the Awa SDK's CEL
        expressions over ``payload``, for ``client.resolve_callback`` to decide the job by
        (awa_fast/callback_rules.py has the rules). One that does not parse, or uses a
        variable other than ``payload``, raises a ValidationError naming it."""
        rules = callback_rules.checked(
            {
                "filter": filter,
                "on_complete": on_complete,
                "on_fail": on_fail,
                "transform": transform,
            }
        )
        callback_id = await self._writer.register_callback(
            self.id, self.run_lease, timeout_seconds, rules=rules
        )
        self.callback = CallbackToken(callback_id, float(timeout_seconds))
        return self.callback

    async def wait_for_callback(self, token: CallbackToken | str) -> Any:
        """Wait, the handler still running, until ``client.resume_external(token.id,
        payload)`` answers the callback this attempt registered last; return its payload.

        Meanwhile the job is in ``waiting_external``; the callback's timeout bounds the
        wait and the attempt's deadline does not run (on return, :attr:`deadline` is
        later by the time waited). Then register another callback and wait again, or return
        an outcome as usual. Raises :class:`~awa_fast.errors.LeaseLost` (saying what became
        of the job) if the job is decided without this handler instead: completed, failed or
        retried by the callback, timed out, or cancelled; the handler's outcome is then
        dropped. Cut short (shutdown), the job stays parked on the callback as if
        the handler had returned ``WaitForCallback(token)``."""
        callback_id = token.id if isinstance(token, CallbackToken) else token
        if self.callback is None or self.callback.id != callback_id:
            raise ValidationError(
                "token",
                f"{callback_id!r} is not the callback this attempt registered last and has "
                "not waited on yet: call register_callback() first",
            )
        payload, deadline = await self._writer.wait_for_callback(
            self.id, self.run_lease, callback_id, self._cancelled
        )
        self._deadline_at_us = None if deadline is None else micros_of(deadline)
        self.callback = None  # answered: this id resolves nothing any more
        return payload

    def __repr__(self) -> str:
        return f"Job(id={self.id}, kind={self.kind!r}, attempt={self.attempt})"


class Worker:
    """Class form of a handler: set ``kind`` (and optionally ``queue``, ``args_type``) and
    define ``perform(self, job)`` (async or plain), then ``client.register(MyWorker)``."""

    kind: ClassVar[str | None] = None
    queue: ClassVar[str] = "default"
    args_type: ClassVar[type | None] = None
    # perform() completes each job itself, with job.complete_in(conn) (docs/handlers.md)
    completes_in_transaction: ClassVar[bool] = False

    def perform(self, job: Job[Any]) -> Awaitable[object] | object:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Handler:
    kind: str
    queue: str
    args_type: type | None
    func: HandlerFunc
    is_async: bool
    decode: Decoder
    index: int
    completes_in_transaction: bool = False  # returning without complete_in is an error


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigTypeError(f"{name} must be True or False, got {value!r}")
    return value


def _check_takes_a_job(kind: str, func: object) -> None:
    """``func`` must be callable with the job as its one argument."""
    if not callable(func):
        raise ConfigTypeError(f"the handler of kind {kind!r} must be callable, got {func!r}")
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin or extension callable: nothing to read
        return
    try:
        signature.bind(None)
    except TypeError as exc:
        raise ConfigTypeError(
            f"the handler of kind {kind!r} must take the job as its one argument: {exc}"
        ) from None


@dataclass(slots=True)
class Registry:
    """Kinds → handlers, with each kind's stable index (its position of registration)."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)

    def add(
        self,
        func: HandlerFunc,
        *,
        args_type: type | None,
        kind: str | None,
        queue: str,
        completes_in_transaction: bool = False,
    ) -> Handler:
        """Register ``func`` for ``kind`` (else ``args_type``'s), checked now rather than at
        its first job: a handler that cannot run would fail every attempt of its kind."""
        if args_type is not None and not isinstance(args_type, type):
            raise ConfigTypeError(f"args_type must be a class, got {args_type!r}")
        if kind is None:
            if args_type is None or args_type is dict:
                raise ConfigError("a handler for dict args needs an explicit kind=")
            kind = kind_of(args_type)
        kind, queue = validation.name("kind", kind), validation.name("queue", queue)
        if kind in self.handlers:
            raise ConfigError(f"kind {kind!r} already has a handler")
        decode = decoder_for(args_type)
        _check_takes_a_job(kind, func)
        handler = Handler(
            kind=kind,
            queue=queue,
            args_type=args_type,
            func=func,
            is_async=inspect.iscoroutinefunction(func),
            decode=decode,
            index=len(self.kinds),
            completes_in_transaction=_flag("completes_in_transaction", completes_in_transaction),
        )
        self.handlers[kind] = handler
        self.kinds.append(kind)
        return handler

    def add_worker(self, worker: type[Worker] | Worker) -> Handler:
        instance = worker() if isinstance(worker, type) else worker
        kind = instance.kind
        if kind is None and instance.args_type is None:
            raise ConfigError(f"{type(instance).__name__} must set kind or args_type")
        return self.add(
            instance.perform,
            args_type=instance.args_type,
            kind=kind,
            queue=instance.queue,
            completes_in_transaction=instance.completes_in_transaction,
        )

    def get(self, kind: str) -> Handler | None:
        return self.handlers.get(kind)

    def index_of(self, kind: str) -> int:
        handler = self.handlers.get(kind)
        return handler.index if handler else UNKNOWN_KIND

    def kind_at(self, index: int) -> str | None:
        return self.kinds[index] if index < len(self.kinds) else None
