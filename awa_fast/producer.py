"""Putting jobs in: validation, then one statement (or one COPY) per call.

The functions here take the caller's psycopg connection, so a job inserted inside the
caller's transaction becomes visible on its commit and vanishes on its rollback. The clients
call the same functions on their own connections.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Unpack

import orjson
import psycopg
from psycopg.rows import dict_row

from awa_fast.codec import encode_args, encode_json, kind_of
from awa_fast.db.queries import Q
from awa_fast.errors import UniqueConflict, ValidationError
from awa_fast.types import JOB_STATES, InsertOptions, InsertRequest, JobRow, UniqueOpts

MAX_NAME_LENGTH = 128
_SMALLINT_MAX = 32767
_HOT_COLUMNS = (
    "(id, kind, queue, args, priority, max_attempts, run_at, tags, metadata, deadline_seconds)"
)


@dataclass(frozen=True, slots=True)
class PreparedJob:
    """A validated job, encoded for Postgres."""

    kind: str
    queue: str
    args: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    tags: list[str]
    metadata: str
    unique_key: bytes | None
    unique_states: list[str] | None
    deadline: float | None


def _name(field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, f"must be a non-empty string, got {value!r}")
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError(field, f"must be at most {MAX_NAME_LENGTH} characters")
    if "\x00" in value:
        raise ValidationError(field, "contains a NUL character")
    return value


def _int_in(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(field, f"must be an integer from {low} to {high}, got {value!r}")
    return value


def _tags(value: Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        raise ValidationError("tags", "must be a list of strings, not a string")
    return [_name("tags", tag) for tag in value]


def _run_at(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError("run_at", f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        raise ValidationError("run_at", "must be timezone-aware (naive datetimes are ambiguous)")
    return value


def _deadline(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise ValidationError("deadline", f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _unique(value: UniqueOpts | Mapping[str, Any] | None) -> UniqueOpts | None:
    if value is None or isinstance(value, UniqueOpts):
        opts = value
    else:
        try:
            opts = UniqueOpts(**dict(value))
        except TypeError as exc:
            raise ValidationError("unique", str(exc)) from exc
    if opts is not None:
        bad = [s for s in opts.states if s not in JOB_STATES]
        if bad or not opts.states:
            raise ValidationError("unique", f"states must be job states, got {list(opts.states)}")
        if opts.by_period is not None:
            _int_in("unique.by_period", opts.by_period, 1, 10**9)
    return opts


def _unique_key(opts: UniqueOpts, kind: str, queue: str, args: str) -> bytes:
    parts: list[object] = [kind]
    if opts.by_queue:
        parts.append(queue)
    if opts.by_args:
        parts.append(orjson.loads(args))
    if opts.by_period is not None:
        parts.append(int(datetime.now().timestamp()) // opts.by_period)
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).digest()


def prepare(request: InsertRequest) -> PreparedJob:
    """Validate and encode one insert; raises :class:`ValidationError` naming the field."""
    kind = _name("kind", request.kind if request.kind is not None else _default_kind(request))
    queue = _name("queue", request.queue)
    args = encode_args(request.args).decode()
    unique = _unique(request.unique)
    return PreparedJob(
        kind=kind,
        queue=queue,
        args=args,
        priority=_int_in("priority", request.priority, 1, 4),
        max_attempts=_int_in("max_attempts", request.max_attempts, 1, _SMALLINT_MAX),
        run_at=_run_at(request.run_at),
        tags=_tags(request.tags),
        metadata=encode_json("metadata", dict(request.metadata or {})).decode(),
        unique_key=_unique_key(unique, kind, queue, args) if unique else None,
        unique_states=list(unique.states) if unique else None,
        deadline=_deadline(request.deadline),
    )


def _default_kind(request: InsertRequest) -> str:
    if isinstance(request.args, Mapping):
        raise ValidationError("kind", "is required when args is a dict")
    return kind_of(type(request.args))


def request_of(item: object, options: InsertOptions) -> InsertRequest:
    """An :class:`InsertRequest` from an args object (with ``options``) or a request."""
    if isinstance(item, InsertRequest):
        return item
    opts: dict[str, Any] = dict(options)
    if "unique_opts" in opts:
        if opts.get("unique") is not None:
            raise ValidationError("unique_opts", "give unique or unique_opts, not both")
        opts["unique"] = opts.pop("unique_opts")
    try:
        return InsertRequest(item, **opts)
    except TypeError as exc:
        raise ValidationError("options", str(exc)) from exc


def _statement_params(jobs: Sequence[PreparedJob], ids: Sequence[int | None]) -> dict[str, Any]:
    return {
        "ids": list(ids),
        "kinds": [j.kind for j in jobs],
        "queues": [j.queue for j in jobs],
        "args": [j.args for j in jobs],
        "priorities": [j.priority for j in jobs],
        "max_attempts": [j.max_attempts for j in jobs],
        "run_ats": [j.run_at for j in jobs],
        "tags": [orjson.dumps(j.tags).decode() for j in jobs],
        "metadata": [j.metadata for j in jobs],
        "unique_keys": [j.unique_key for j in jobs],
        "deadlines": [j.deadline for j in jobs],
    }


def _copy_row(job_id: int, job: PreparedJob, now: datetime) -> tuple[object, ...]:
    return (
        job_id,
        job.kind,
        job.queue,
        job.args,
        job.priority,
        job.max_attempts,
        job.run_at or now,
        job.tags,
        job.metadata,
        job.deadline,
    )


def _split_for_copy(
    jobs: Sequence[PreparedJob], ids: Sequence[int], now: datetime
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    hot: list[tuple[object, ...]] = []
    deferred: list[tuple[object, ...]] = []
    for job_id, job in zip(ids, jobs, strict=True):
        target = deferred if job.run_at is not None and job.run_at > now else hot
        target.append(_copy_row(job_id, job, now))
    return hot, deferred


_COPY_HOT = f"COPY awa_fast.jobs_hot {_HOT_COLUMNS} FROM STDIN"
_COPY_DEFERRED = f"COPY awa_fast.jobs_deferred {_HOT_COLUMNS} FROM STDIN"
_NOW_AND_IDS = (
    "SELECT now(), ARRAY(SELECT nextval('awa_fast.job_id_seq') FROM generate_series(1, %s))"
)


def insert(conn: psycopg.Connection[Any], args: object, **options: Unpack[InsertOptions]) -> JobRow:
    """Insert one job on ``conn``, inside the caller's transaction if one is open: the job
    is visible when that transaction commits and gone if it rolls back."""
    return _insert_prepared(conn, prepare(request_of(args, options)))


def _insert_prepared(conn: psycopg.Connection[Any], job: PreparedJob) -> JobRow:
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        job_id = None
        if job.unique_key is not None:
            job_id = cur.execute(Q.job_next_ids, {"count": 1}).fetchone()["nextval"]  # type: ignore[index]
            claim = cur.execute(Q.unique_claim_take, _claim_params(job, job_id)).fetchone()
            if claim is None:
                holder = cur.execute(Q.unique_claim_holder, {"key": job.unique_key}).fetchone()
                raise UniqueConflict(holder["job_id"] if holder else None)
        row = cur.execute(Q.job_insert_many, _statement_params([job], [job_id])).fetchone()
    assert row is not None
    return JobRow.from_row(row)


async def insert_async(
    conn: psycopg.AsyncConnection[Any], args: object, **options: Unpack[InsertOptions]
) -> JobRow:
    """The asyncio twin of :func:`insert`."""
    return await _insert_prepared_async(conn, prepare(request_of(args, options)))


async def _insert_prepared_async(conn: psycopg.AsyncConnection[Any], job: PreparedJob) -> JobRow:
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        job_id = None
        if job.unique_key is not None:
            await cur.execute(Q.job_next_ids, {"count": 1})
            job_id = (await cur.fetchone())["nextval"]  # type: ignore[index]
            await cur.execute(Q.unique_claim_take, _claim_params(job, job_id))
            if await cur.fetchone() is None:
                await cur.execute(Q.unique_claim_holder, {"key": job.unique_key})
                holder = await cur.fetchone()
                raise UniqueConflict(holder["job_id"] if holder else None)
        await cur.execute(Q.job_insert_many, _statement_params([job], [job_id]))
        row = await cur.fetchone()
    assert row is not None
    return JobRow.from_row(row)


def _claim_params(job: PreparedJob, job_id: int) -> dict[str, Any]:
    return {"key": job.unique_key, "job_id": job_id, "states": job.unique_states}


def prepare_many(items: Iterable[object], options: InsertOptions) -> list[PreparedJob]:
    """Validate every item before anything is written; the error names the item's index."""
    jobs = []
    for index, item in enumerate(items):
        try:
            jobs.append(prepare(request_of(item, options)))
        except ValidationError as exc:
            raise ValidationError(f"items[{index}].{exc.field}", exc.message) from exc
    return jobs


def insert_many(
    conn: psycopg.Connection[Any], items: Iterable[object], **options: Unpack[InsertOptions]
) -> list[int]:
    """Insert many jobs over COPY in one transaction; returns their ids in order.

    Ids come back in item order. Unique jobs go through the claim path one by one; a unique
    job whose key is held by a live job is skipped (its id is absent from the result).
    """
    jobs = prepare_many(items, options)
    plain = [j for j in jobs if j.unique_key is None]
    placed: list[int | None] = [None] * len(jobs)
    with conn.transaction():
        if plain:
            row = conn.execute(_NOW_AND_IDS, (len(plain),)).fetchone()
            assert row is not None
            now, ids = row
            hot, deferred = _split_for_copy(plain, ids, now)
            with conn.cursor() as cur:
                for sql, rows in ((_COPY_HOT, hot), (_COPY_DEFERRED, deferred)):
                    if rows:
                        with cur.copy(sql) as copy:
                            for copy_row in rows:
                                copy.write_row(copy_row)
            _place(placed, jobs, ids)
        for index, job in enumerate(jobs):
            if job.unique_key is not None:
                with contextlib.suppress(UniqueConflict):
                    placed[index] = _insert_prepared(conn, job).id
    return [job_id for job_id in placed if job_id is not None]


async def insert_many_async(
    conn: psycopg.AsyncConnection[Any], items: Iterable[object], **options: Unpack[InsertOptions]
) -> list[int]:
    """The asyncio twin of :func:`insert_many`."""
    jobs = prepare_many(items, options)
    plain = [j for j in jobs if j.unique_key is None]
    placed: list[int | None] = [None] * len(jobs)
    async with conn.transaction():
        if plain:
            cur = await conn.execute(_NOW_AND_IDS, (len(plain),))
            row = await cur.fetchone()
            assert row is not None
            now, ids = row
            hot, deferred = _split_for_copy(plain, ids, now)
            async with conn.cursor() as copy_cur:
                for sql, rows in ((_COPY_HOT, hot), (_COPY_DEFERRED, deferred)):
                    if rows:
                        async with copy_cur.copy(sql) as copy:
                            for copy_row in rows:
                                await copy.write_row(copy_row)
            _place(placed, jobs, ids)
        for index, job in enumerate(jobs):
            if job.unique_key is not None:
                with contextlib.suppress(UniqueConflict):
                    placed[index] = (await _insert_prepared_async(conn, job)).id
    return [job_id for job_id in placed if job_id is not None]


def _place(placed: list[int | None], jobs: Sequence[PreparedJob], ids: Sequence[int]) -> None:
    """Put the plain jobs' ids at their items' positions."""
    plain_positions = (i for i, job in enumerate(jobs) if job.unique_key is None)
    for position, job_id in zip(plain_positions, ids, strict=True):
        placed[position] = job_id
