"""Putting jobs in: validation, then one statement (or one COPY) per call.

The functions here take the caller's psycopg connection, so a job inserted inside the
caller's transaction becomes visible on its commit and vanishes on its rollback. The clients
call the same functions on their own connections. The synchronous insert functions are
generated from their asyncio twins by tools/async_to_sync.py, in
:mod:`awa_fast.producer_sync`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Unpack, cast, overload

import orjson
import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from awa_fast import backpressure, validation
from awa_fast.codec import (
    ENCODE_ERRORS,
    check_storable,
    encode_args,
    encode_json,
    kind_of,
    object_encoder,
)
from awa_fast.db.queries import Q
from awa_fast.errors import UniqueConflict, ValidationError
from awa_fast.tracing import active
from awa_fast.types import (
    InsertOptions,
    InsertRequest,
    JobRow,
    UniqueOpts,
)
from awa_fast.unique import job_key, unique_options

_SMALLINT_MAX = 32767


@dataclass(frozen=True, slots=True)
class Options:
    """Validated insert options: built once per ``insert_many`` call and shared by its items,
    so a batch of plain args objects pays for validation once, not per job."""

    kind: str | None
    queue: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    tags: tuple[str, ...]
    metadata: str
    unique: UniqueOpts | None
    deadline: float | None
    max_queue_depth: int | None  # backpressure asked (awa_fast.backpressure), or None

    def kind_for(self, args_type: type) -> str | None:
        """The kind of jobs of ``args_type`` under these options: the one given, else the
        type's own (None for a mapping, which has no type name to give)."""
        return self.kind if self.kind is not None else _default_kind_of_type(args_type)

    def job(self, args: object) -> PreparedJob:
        """These options applied to ``args``: the args encoded, the kind and unique key
        derived."""
        kind = self.kind_for(type(args))
        if kind is None:
            raise ValidationError("kind", "is required when args is a dict")
        encoded = encode_args(args).decode()
        unique_key = job_key(self.unique, kind, self.queue, encoded) if self.unique else None
        return PreparedJob(self, kind, encoded, unique_key)


@dataclass(slots=True)
class PreparedJob:
    """A validated job, encoded for Postgres (not frozen: a producer makes one per job, and
    a frozen dataclass pays a setattr call per field)."""

    options: Options
    kind: str
    args: str
    unique_key: bytes | None


def _tags(value: Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        raise ValidationError("tags", "must be a list of strings, not a string")
    return tuple(validation.name("tags", tag) for tag in value)


def _metadata(value: Mapping[str, Any] | None) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", f"must be a dict, got {type(value).__name__}")
    return dict(value)


def _deadline(value: float | None) -> float | None:
    return None if value is None else validation.positive_seconds("deadline", value)


def options_of(request: InsertRequest) -> Options:
    """Validate everything of ``request`` but its args; raises :class:`ValidationError`
    naming the field."""
    unique = unique_options(request.unique)
    return Options(
        kind=None if request.kind is None else validation.name("kind", request.kind),
        queue=validation.name("queue", request.queue),
        priority=validation.int_in("priority", request.priority, 1, 4),
        max_attempts=validation.int_in("max_attempts", request.max_attempts, 1, _SMALLINT_MAX),
        run_at=validation.run_at(request.run_at),
        tags=_tags(request.tags),
        metadata=encode_json("metadata", _metadata(request.metadata)).decode(),
        unique=unique,
        deadline=_deadline(request.deadline),
        max_queue_depth=backpressure.limit_of(request.max_queue_depth),
    )


def prepare(request: InsertRequest) -> PreparedJob:
    """Validate and encode one insert; raises :class:`ValidationError` naming the field."""
    return options_of(request).job(request.args)


@functools.cache
def _default_kind_of_type(args_type: type) -> str | None:
    """The kind of args of this type (None for a mapping, which has no type name to give);
    asked once per job, derived once per type."""
    return None if issubclass(args_type, Mapping) else kind_of(args_type)


def request_of(item: object, options: InsertOptions) -> InsertRequest:
    """An :class:`InsertRequest` from an args object (with ``options``) or a request."""
    if isinstance(item, InsertRequest):
        return item
    opts: dict[str, Any] = dict(options)
    if "unique_opts" in opts:
        if opts.get("unique") is not None:
            raise ValidationError("unique_opts", "give unique or unique_opts, not both")
        opts["unique"] = opts.pop("unique_opts")
    ordering_key = opts.pop("ordering_key", None)
    if not isinstance(ordering_key, bytes | str | None):
        raise ValidationError(
            "ordering_key", f"must be bytes or str, got {type(ordering_key).__name__}"
        )
    try:
        return InsertRequest(item, **opts)
    except TypeError as exc:
        raise ValidationError("options", str(exc)) from exc


# What the Awa SDK's ``insert_many_copy(..., opts=[...])`` sets for one job of a batch.
ITEM_OPTIONS = ("queue", "ordering_key")


def with_item_options(
    items: Iterable[object],
    options: InsertOptions,
    opts: Sequence[Mapping[str, Any] | None] | None,
) -> list[object]:
    """``items`` with the SDK's per-job ``opts`` laid over the batch's ``options``: an
    entry (a queue, an ordering key) makes its item an InsertRequest; None keeps it."""
    items = list(items)
    if opts is None:
        return items
    if len(opts) != len(items):
        raise ValidationError("opts", f"needs one entry per job ({len(items)}), got {len(opts)}")
    laid = []
    for index, (item, extra) in enumerate(zip(items, opts, strict=True)):
        unknown = sorted(set(extra or ()) - set(ITEM_OPTIONS))
        if unknown:
            raise ValidationError(f"opts[{index}]", f"takes queue and ordering_key, got {unknown}")
        laid.append(request_of(item, cast(InsertOptions, {**options, **extra})) if extra else item)
    return laid


def _statement_params(
    job: PreparedJob, job_id: int | None, parent_id: int | None
) -> dict[str, Any]:
    options = job.options
    return {
        "ids": [job_id],
        "kinds": [job.kind],
        "queues": [options.queue],
        "args": [job.args],
        "priorities": [options.priority],
        "max_attempts": [options.max_attempts],
        "run_ats": [options.run_at],
        "tags": [orjson.dumps(options.tags).decode()],
        "metadata": [options.metadata],
        "unique_keys": [job.unique_key],
        "deadlines": [options.deadline],
        "parents": [parent_id],
    }


# COPY's text format: a backslash, tab, newline or carriage return inside a field is
# written as an escape. Encoded JSON never holds a raw control character, so JSON fields
# only need their backslashes doubled.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_COPY_CHUNK_ROWS = 2000


def _copy_json(encoded: str) -> str:
    return encoded.replace("\\", "\\\\") if "\\" in encoded else encoded


def _copy_array(values: tuple[str, ...]) -> str:
    quoted = ('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values)
    return ("{" + ",".join(quoted) + "}").translate(_COPY_ESCAPES)


# What the table fills in for a column a COPY row leaves out. A job's options are sent only
# where they differ from these (or, for run_at, where one was given: the default now() is
# the insert's transaction time, which a job with no run_at gets): a plain job's row then
# costs the server less, for text it no longer parses.
_COPY_DEFAULTS = {"priority": "2", "max_attempts": "25", "tags": "{}", "metadata": "{}"}


def _copy_tail(options: Options) -> tuple[str, str]:
    """The columns after ``args`` in the COPY rows of jobs sharing ``options``, and their
    text: the queue, then only the options the table would not fill in the same."""
    given = {
        "priority": str(options.priority),
        "max_attempts": str(options.max_attempts),
        "run_at": None if options.run_at is None else options.run_at.isoformat(),
        "tags": _copy_array(options.tags),
        "metadata": _copy_json(options.metadata),
        "deadline_seconds": None if options.deadline is None else repr(options.deadline),
    }
    fields = {"queue": options.queue.translate(_COPY_ESCAPES)}
    fields |= {c: v for c, v in given.items() if v is not None and v != _COPY_DEFAULTS.get(c)}
    return ", ".join(fields), "\t".join(fields.values()) + "\n"


def _copy_lines(
    jobs: Sequence[PreparedJob], ids: Sequence[int], now: datetime
) -> dict[str, list[str]]:
    """COPY text lines for ``jobs``, grouped by their COPY statement: due now (jobs_hot) or
    later (jobs_deferred), and which columns they send. Rendering rows as text here, with
    the columns shared by a batch rendered once, is most of what keeps a bulk insert cheap
    for the producer."""
    copies: dict[str, list[str]] = {}
    by_options: dict[int, tuple[list[str], list[str], str]] = {}  # hot, deferred, tail
    kinds: dict[str, str] = {}
    for job_id, job in zip(ids, jobs, strict=True):
        options = job.options
        shared = by_options.get(id(options))
        if shared is None:
            columns, tail = _copy_tail(options)
            hot = copies.setdefault(
                f"COPY awa_fast.jobs_hot (id, kind, args, {columns}) FROM STDIN", []
            )
            deferred = copies.setdefault(
                f"COPY awa_fast.jobs_deferred (id, kind, args, {columns}) FROM STDIN", []
            )
            shared = by_options[id(options)] = (hot, deferred, tail)
        hot, deferred, tail = shared
        kind = kinds.get(job.kind)
        if kind is None:
            kind = kinds[job.kind] = job.kind.translate(_COPY_ESCAPES)
        target = deferred if options.run_at is not None and options.run_at > now else hot
        target.append(f"{job_id}\t{kind}\t{_copy_json(job.args)}\t{tail}")
    return {sql: lines for sql, lines in copies.items() if lines}


def _copy_chunks(lines: Sequence[str]) -> Iterator[str]:
    for start in range(0, len(lines), _COPY_CHUNK_ROWS):
        yield "".join(lines[start : start + _COPY_CHUNK_ROWS])


_NOW_AND_IDS = (
    "SELECT now(), ARRAY(SELECT nextval('awa_fast.job_id_seq') FROM generate_series(1, %s))"
)


@overload
def _transaction(
    conn: psycopg.Connection[Any], *, one_statement: bool
) -> contextlib.AbstractContextManager[Any]: ...
@overload
def _transaction(
    conn: psycopg.AsyncConnection[Any], *, one_statement: bool
) -> contextlib.AbstractAsyncContextManager[Any]: ...
def _transaction(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], *, one_statement: bool
) -> Any:
    """A transaction around an insert, unless its one statement is a transaction by itself
    (an autocommit connection with no transaction open): atomic either way, and without
    BEGIN and COMMIT a one-statement insert costs one round trip instead of three. The
    clients' own connections are autocommit. Inside the caller's transaction it is a
    savepoint; on a connection that is not autocommit and has no transaction open yet,
    nothing: psycopg opens the caller's transaction at the first statement, and the caller
    commits or rolls it back (a ``transaction()`` block there would commit it on exit)."""
    idle = conn.info.transaction_status == TransactionStatus.IDLE
    if idle and (not conn.autocommit or one_statement):
        return contextlib.nullcontext()
    return conn.transaction()


def _one_copy(jobs: Sequence[PreparedJob]) -> bool:
    """True when ``jobs`` go out as one COPY and nothing else: one set of options, no
    schedule (the whole batch is due now, all into jobs_hot), no unique key."""
    if not jobs:
        return False
    options = jobs[0].options
    return (
        options.run_at is None
        and options.unique is None
        and all(job.options is options for job in jobs)
    )


Rows = Sequence[Mapping[str, Any]]
Step = tuple[str, dict[str, Any]]  # a named statement and its parameters
FOLLOWUPS_UNREFUSED = (
    "a follow-up commits with the transition that makes it and is never refused; "
    "drop the option, or insert the job from the handler"
)
InsertSteps = Generator[Step, Rows, JobRow]


def insert_steps(job: PreparedJob, *, parent_id: int | None = None) -> InsertSteps:
    """The statements of one insert, in order, for a driver to run (:func:`drive_async`,
    or its twin): each step yields a named statement with its parameters and is sent the
    statement's rows back. A unique key a live job holds raises :class:`UniqueConflict`
    between statements, none failing, so the caller's transaction stays usable; so does
    a full queue's :class:`~awa_fast.errors.QueueFull`, when the job asks for
    backpressure (its depth is read first). ``parent_id`` is set for a follow-up only:
    the job whose transition inserts it, which commits with it and is never refused."""
    limit = job.options.max_queue_depth
    if limit is not None:
        if parent_id is not None:
            raise ValidationError("max_queue_depth", FOLLOWUPS_UNREFUSED)
        asked = backpressure.wanted([(job.options.queue, 1, limit)])
        backpressure.admit(asked, (yield Q.queue_backlog, backpressure.params(asked)))
    job_id = None
    if job.unique_key is not None:
        job_id = (yield Q.job_next_ids, {"count": 1})[0]["nextval"]
        holder = (yield Q.unique_claim_take, _claim_params(job, job_id))[0]["holder"]
        if holder != job_id:
            raise UniqueConflict(holder)
    rows = yield Q.job_insert_many, _statement_params(job, job_id, parent_id)
    return JobRow.from_row(rows[0])


def _claim_params(job: PreparedJob, job_id: int) -> dict[str, Any]:
    assert job.options.unique is not None
    states = list(job.options.unique.states)
    return {"key": job.unique_key, "job_id": job_id, "states": states}


_RECORD_SEPARATOR = b"\x1e"  # between a uniform batch's args; JSON text never holds it raw
# A uniform batch is one statement and one parameter, and the server sorts its rows back
# into item order: past this many jobs, COPY, which streams, is the better way in.
_UNIFORM_MAX_JOBS = 100_000


def _uniform_params(items: list[object], options: InsertOptions) -> dict[str, Any] | None:
    """Parameters of ``Q.job_insert_uniform`` for ``items``, or None to have
    :func:`prepare_many` take them item by item.

    A uniform batch is args of one type whose encoding is always a JSON object (a
    dataclass, a dict, a msgspec Struct not encoded as an array) under one set of options,
    due now, none unique: one statement, with no PreparedJob per item. Only a batch the
    item-by-item path would accept, and store the same, comes here: the same options,
    validated; the same kind and encoder; args that path would refuse (a NUL, a NaN, or
    args that cannot be encoded) send the whole batch back, to be refused there with the item
    named. It costs the producer a fraction of the item-by-item path's CPU a job
    (benches/RESULTS.md, "Design measurements")."""
    if not 0 < len(items) <= _UNIFORM_MAX_JOBS:
        return None
    args_type: type = type(items[0])
    encode = None if issubclass(args_type, InsertRequest) else object_encoder(args_type)
    if encode is None or not all(type(item) is args_type for item in items):
        return None
    try:
        shared = options_of(request_of(items[0], options))
        args = _RECORD_SEPARATOR.join([encode(item) for item in items])
        check_storable("args", args, items)
    except ENCODE_ERRORS:  # ValidationError among them
        return None
    kind = shared.kind_for(args_type)
    if kind is None or shared.run_at is not None or shared.unique is not None:
        return None
    return {
        "kind": kind,
        "queue": shared.queue,
        "args": args.decode(),
        "priority": shared.priority,
        "max_attempts": shared.max_attempts,
        "tags": list(shared.tags),
        "metadata": shared.metadata,
        "deadline": shared.deadline,
        "count": len(items),
        "max_queue_depth": shared.max_queue_depth,  # for the check before, not the statement
    }


# From this many jobs a uniform batch is stored as packs (migration 0016): a row per up to
# PACK_MAX_JOBS jobs instead of one per job, which costs the producer's backend a fraction
# as much a job (benches/RESULTS.md, "Design measurements"). Below it, the rows of
# job_insert_uniform: a claim covers its packs by reading limit / PACK_MIN_JOBS + 2 of them.
PACK_MIN_JOBS = 64
PACK_MAX_JOBS = 512  # job_insert_packed's split


def _uniform_statement(items: Sequence[object]) -> str:
    """One row a job, one pack with the args text as sent, or packs split in the server."""
    if len(items) < PACK_MIN_JOBS:
        return Q.job_insert_uniform
    return Q.job_insert_pack if len(items) <= PACK_MAX_JOBS else Q.job_insert_packed


def _uniform_ids(rows: Sequence[tuple[Any, ...]]) -> list[int]:
    """The ids of a uniform insert, in item order: one a row (job_insert_uniform) or a
    list a pack (job_insert_packed, packs of ascending ids in any order)."""
    if rows and isinstance(rows[0][0], list):
        return [job_id for (ids,) in sorted(rows) for job_id in ids]
    return [row[0] for row in rows]


def prepare_many(items: Iterable[object], options: InsertOptions) -> list[PreparedJob]:
    """Validate every item before anything is written; the error names the item's index.

    The call's options are validated once, at the first item that uses them (an
    :class:`InsertRequest` item carries its own)."""
    jobs = []
    shared: Options | None = None
    for index, item in enumerate(items):
        try:
            if isinstance(item, InsertRequest):
                jobs.append(prepare(item))
                continue
            if shared is None:
                shared = options_of(request_of(item, options))
            jobs.append(shared.job(item))
        except ValidationError as exc:
            raise ValidationError(f"items[{index}].{exc.field}", exc.message) from exc
    return jobs


def _place(placed: list[int | None], jobs: Sequence[PreparedJob], ids: Sequence[int]) -> None:
    """Put the plain jobs' ids at their items' positions."""
    plain_positions = (i for i, job in enumerate(jobs) if job.unique_key is None)
    for position, job_id in zip(plain_positions, ids, strict=True):
        placed[position] = job_id


# ---- asyncio source: its synchronous twin is generated from it ----


async def insert_async(
    conn: psycopg.AsyncConnection[Any],
    args: object,
    *,
    traces: bool = True,
    **options: Unpack[InsertOptions],
) -> JobRow:
    """Insert one job on ``conn``, inside the caller's transaction if one is open: the job
    is visible when that transaction commits and gone if it rolls back. With OpenTelemetry
    set up, and ``traces``, in a producer span whose context the job carries."""
    job = prepare(request_of(args, options))
    tracing = active(traces)  # None without OpenTelemetry: nothing more to do
    if tracing is None:
        return await insert_prepared_async(conn, job)
    with tracing.sending([job]) as sent:
        return sent(await insert_prepared_async(conn, job))


async def insert_prepared_async(
    conn: psycopg.AsyncConnection[Any], job: PreparedJob, *, parent_id: int | None = None
) -> JobRow:
    """Insert ``job``, validated already (:func:`prepare`), as :func:`insert_async` does;
    ``parent_id`` as for :func:`insert_steps`."""
    async with (
        _transaction(conn, one_statement=job.unique_key is None),
        conn.cursor(row_factory=dict_row) as cur,
    ):

        async def execute(sql: str, params: dict[str, Any]) -> Rows:
            await cur.execute(sql, params)
            return await cur.fetchall()

        return await drive_async(insert_steps(job, parent_id=parent_id), execute)


async def drive_async(
    steps: InsertSteps, execute: Callable[[str, dict[str, Any]], Awaitable[Rows]]
) -> JobRow:
    """Run ``steps`` with ``execute`` (a statement and its parameters -> its rows)."""
    step = next(steps)
    while True:
        try:
            step = steps.send(await execute(*step))
        except StopIteration as done:
            row: JobRow = done.value
            return row


async def insert_many_async(
    conn: psycopg.AsyncConnection[Any],
    items: Iterable[object],
    *,
    traces: bool = True,
    **options: Unpack[InsertOptions],
) -> list[int]:
    """Insert many jobs in one transaction; returns their ids in order.

    A uniform batch (see :func:`_uniform_params`) is one INSERT; any other goes over COPY.
    Ids come back in item order. Unique jobs go through the claim path one by one; a unique
    job whose key is held by a live job is skipped (its id is absent from the result).
    ``traces`` as for :func:`insert_async`: one producer span for the batch.
    Backpressure (``max_queue_depth``) is all or nothing: every queue asked of is checked
    with all the jobs the call adds there before anything is written, and one that would
    pass its limit refuses the whole call (:class:`~awa_fast.errors.QueueFull`).
    """
    items = list(items)
    uniform = _uniform_params(items, options)
    jobs = prepare_many(items, options) if uniform is None else []
    tracing = active(traces)
    if tracing is None:
        return await _insert_many_async(conn, items, uniform, jobs)
    with tracing.sending(jobs, uniform) as sent:
        return sent(await _insert_many_async(conn, items, uniform, jobs))


async def _insert_many_async(
    conn: psycopg.AsyncConnection[Any],
    items: list[object],
    uniform: dict[str, Any] | None,
    jobs: list[PreparedJob],
) -> list[int]:
    """:func:`insert_many_async`'s statements, for ``items`` validated: ``uniform``'s
    parameters, or else ``jobs``."""
    if uniform is not None:
        limit = uniform.pop("max_queue_depth")
        if limit is not None:
            await _admit_async(conn, [(uniform["queue"], uniform["count"], limit)])
        async with _transaction(conn, one_statement=True):
            cur = await conn.execute(_uniform_statement(items), uniform)
            return _uniform_ids(await cur.fetchall())
    if any(job.options.max_queue_depth is not None for job in jobs):
        await _admit_async(conn, [(j.options.queue, 1, j.options.max_queue_depth) for j in jobs])
    plain = [j for j in jobs if j.unique_key is None]
    placed: list[int | None] = [None] * len(jobs)
    # Ids come from a sequence, outside any transaction's reach: with one COPY to send,
    # that COPY alone decides whether the batch is written.
    async with _transaction(conn, one_statement=_one_copy(jobs)):
        if plain:
            cur = await conn.execute(_NOW_AND_IDS, (len(plain),))
            row = await cur.fetchone()
            assert row is not None
            now, ids = row
            async with conn.cursor() as copy_cur:
                for sql, lines in _copy_lines(plain, ids, now).items():
                    async with copy_cur.copy(sql) as copy:
                        for chunk in _copy_chunks(lines):
                            await copy.write(chunk)
            _place(placed, jobs, ids)
        for index, job in enumerate(jobs):
            if job.unique_key is not None:
                with contextlib.suppress(UniqueConflict):
                    inserted = await insert_prepared_async(conn, job)
                    placed[index] = inserted.id
    return [job_id for job_id in placed if job_id is not None]


async def _admit_async(
    conn: psycopg.AsyncConnection[Any], groups: Iterable[tuple[str, int, int | None]]
) -> None:
    """Refuse (:class:`~awa_fast.errors.QueueFull`) the jobs, in groups of (queue, how
    many, limit asked), that would take a queue past its limit; one read of the depths."""
    asked = backpressure.wanted(groups)
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(Q.queue_backlog, backpressure.params(asked))
        backpressure.admit(asked, await cur.fetchall())
