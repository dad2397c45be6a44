"""Insert a job on a connection the application already holds, inside its transaction: the
Awa SDK's ``awa.bridge`` (``insert_job``, ``insert_job_sync``), for psycopg 3, asyncpg and
SQLAlchemy.

The job is the one :func:`awa_fast.insert` would write: the same validation, kind, unique
key and statements (whose trigger sends the NOTIFY that wakes workers, delivered when the
caller's transaction commits). Only how each statement reaches Postgres differs by driver:

* a psycopg connection goes through :mod:`awa_fast.producer` itself, which joins the
  caller's transaction (a savepoint inside one already open, the caller's implicit one
  otherwise) or, in autocommit mode, opens one around a unique insert;
* asyncpg and SQLAlchemy connections run the producer's statements
  (:func:`awa_fast.producer.insert_steps`) one by one inside the caller's transaction
  (SQLAlchemy opens it implicitly at the first statement; a bare asyncpg connection gets
  one here).

* Django's connection (``django.db.connection``) runs them on its cursors, inside
  ``transaction.atomic`` (a savepoint in the caller's atomic block, else a transaction of
  its own).

A job given a ``run_at`` starts scheduled, due or not, as the SDK's bridge inserts it; the
promoter makes it available when due (:func:`awa_fast.insert` makes a due one available at
once).

asyncpg, SQLAlchemy and Django are not dependencies: a connection is recognised by its
type's module, as the SDK does, and a driver's classes are imported only for its
connections.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, fields
from typing import Any, Unpack

import orjson
import psycopg
from psycopg.rows import dict_row

from awa_fast import producer, producer_sync
from awa_fast.db.queries import Q
from awa_fast.producer import InsertSteps, PreparedJob, Rows, drive_async, insert_steps
from awa_fast.producer import _transaction as transaction
from awa_fast.producer_sync import drive
from awa_fast.tracing import active
from awa_fast.types import InsertOptions, JobRow, check_insert_options

# Columns holding JSON that is always an object or an array: a driver that hands jsonb back
# as text (asyncpg, unless told otherwise) gives them as a str, decoded here.
_JSON_CONTAINERS = ("args", "errors", "metadata")


async def insert_job(
    conn: object, args: object, **options: Unpack[InsertOptions]
) -> dict[str, Any]:
    """Insert a job on ``conn`` (a psycopg ``AsyncConnection``, an asyncpg connection, or a
    SQLAlchemy ``AsyncConnection``/``AsyncSession``) inside the caller's transaction;
    returns the job's row as a dict. Options as :func:`awa_fast.insert`'s, and so are its
    traces."""
    check_insert_options("insert_job", options)
    insert = _async_inserter(conn)
    job = producer.prepare(producer.request_of(args, options))
    tracing = active()  # None without OpenTelemetry
    if tracing is None:
        return _as_dict(await insert(job))
    with tracing.sending([job]) as sent:
        return _as_dict(sent(await insert(job)))


def insert_job_sync(conn: object, args: object, **options: Unpack[InsertOptions]) -> dict[str, Any]:
    """The synchronous :func:`insert_job`, for a psycopg ``Connection`` or a SQLAlchemy
    ``Connection``/``Session``."""
    check_insert_options("insert_job_sync", options)
    insert = _sync_inserter(conn)
    job = producer.prepare(producer.request_of(args, options))
    tracing = active()
    if tracing is None:
        return _as_dict(insert(job))
    with tracing.sending([job]) as sent:
        return _as_dict(sent(insert(job)))


def _decoded(rows: Iterable[Mapping[Any, Any]]) -> Rows:
    """Rows with their JSON containers decoded where the driver handed them over as text."""
    decoded = [dict(row) for row in rows]
    for row in decoded:
        for column in _JSON_CONTAINERS:
            if isinstance(row.get(column), str):
                row[column] = orjson.loads(row[column])
    return decoded


def _as_dict(row: JobRow) -> dict[str, Any]:
    """The job's columns, its times as the datetimes a driver reads, as the SDK's bridge
    returns them."""
    return {**{f.name: getattr(row, f.name) for f in fields(JobRow)}, **asdict(row.datetimes)}


# ---- which driver ---------------------------------------------------------------------------


def _sync_inserter(conn: object) -> Callable[[PreparedJob], JobRow]:
    if isinstance(conn, psycopg.Connection):
        return functools.partial(_psycopg_insert, conn)
    if _module(conn) == "django":
        return functools.partial(_django_insert, conn)
    if _module(conn) == "sqlalchemy":
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session

        if isinstance(conn, Session):
            conn = conn.connection()
        if isinstance(conn, Connection):
            run = functools.partial(_sqlalchemy_rows, conn)
            return lambda job: drive(_steps(job), run)
    raise _refused(
        conn,
        "insert_job_sync",
        "a sync connection (a psycopg Connection, a SQLAlchemy Connection or Session, or "
        "Django's connection)",
        other="insert_job",
    )


def _async_inserter(conn: object) -> Callable[[PreparedJob], Awaitable[JobRow]]:
    if isinstance(conn, psycopg.AsyncConnection):
        return functools.partial(_psycopg_insert_async, conn)
    if _module(conn) == "asyncpg":
        return functools.partial(_asyncpg_insert, conn)
    if _module(conn) == "sqlalchemy":
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        if isinstance(conn, AsyncSession | AsyncConnection):
            return functools.partial(_sqlalchemy_insert_async, conn)
    raise _refused(
        conn,
        "insert_job",
        "an async connection (a psycopg AsyncConnection, an asyncpg connection, or a "
        "SQLAlchemy AsyncConnection or AsyncSession)",
        other="insert_job_sync",
    )


def _module(conn: object) -> str:
    return (type(conn).__module__ or "").partition(".")[0]


# The drivers whose connections the bridge takes, by their type's top-level module.
_DRIVERS = frozenset({"psycopg", "asyncpg", "sqlalchemy", "django"})


def _refused(conn: object, function: str, takes: str, *, other: str) -> TypeError:
    """``function``'s refusal of ``conn``, opening with the SDK's words: a driver's object
    of the other flavour is pointed to ``other``; anything else is of an unsupported
    type."""
    kind = type(conn)
    if _module(conn) in _DRIVERS:
        return TypeError(
            f"{function}() requires {takes}. For this one, use {other}(). "
            f"Got: {kind.__module__}.{kind.__qualname__}"
        )
    return TypeError(
        f"Unsupported connection type: {kind.__qualname__} (module={kind.__module__}). "
        f"{function}() takes {takes}."
    )


# ---- the statements ---------------------------------------------------------------------------


def _steps(job: PreparedJob) -> InsertSteps:
    """The producer's statements for ``job``; one given a run_at goes in scheduled."""
    steps = insert_steps(job)
    return steps if job.options.run_at is None else _scheduled(steps)


def _scheduled(steps: InsertSteps) -> InsertSteps:
    """``steps`` with the job's insert made job_insert_scheduled's."""
    step = next(steps)
    while True:
        sql, params = step
        try:
            rows = yield (Q.job_insert_scheduled if sql == Q.job_insert_many else sql), params
            step = steps.send(rows)
        except StopIteration as done:
            row: JobRow = done.value
            return row


# ---- each driver's way to run one statement ---------------------------------------------------


def _psycopg_insert(conn: psycopg.Connection[Any], job: PreparedJob) -> JobRow:
    if job.options.run_at is None:
        return producer_sync.insert_prepared(conn, job)
    with transaction(conn, one_statement=False), conn.cursor(row_factory=dict_row) as cur:

        def execute(sql: str, params: dict[str, Any]) -> Rows:
            cur.execute(sql, params)
            return cur.fetchall()

        return drive(_steps(job), execute)


async def _psycopg_insert_async(conn: psycopg.AsyncConnection[Any], job: PreparedJob) -> JobRow:
    if job.options.run_at is None:
        return await producer.insert_prepared_async(conn, job)
    async with (
        transaction(conn, one_statement=False),
        conn.cursor(row_factory=dict_row) as cur,
    ):

        async def execute(sql: str, params: dict[str, Any]) -> Rows:
            await cur.execute(sql, params)
            return await cur.fetchall()

        return await drive_async(_steps(job), execute)


def _django_insert(conn: Any, job: PreparedJob) -> JobRow:
    atomic = importlib.import_module("django.db.transaction").atomic  # untyped: no stubs

    def execute(sql: str, params: dict[str, Any]) -> Rows:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            columns = [column[0] for column in cur.description]
            return _decoded(dict(zip(columns, row, strict=True)) for row in cur.fetchall())

    with atomic(using=conn.alias):
        return drive(_steps(job), execute)


_NAMED = re.compile(r"%\((\w+)\)s")


@functools.cache
def _numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with its ``%(name)s`` parameters as ``$1, $2`` …, and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return _NAMED.sub(number, sql), tuple(names)


def _bind(paramstyle: str, sql: str, params: dict[str, Any]) -> tuple[str, Any]:
    """The statement and parameters in a DB-API driver's own style."""
    if paramstyle == "pyformat":  # psycopg, psycopg2
        return sql, params
    if paramstyle == "numeric_dollar":  # asyncpg
        numbered, names = _numbered(sql)
        return numbered, tuple(params[name] for name in names)
    raise TypeError(f"awa_fast.bridge cannot bind parameters in the {paramstyle!r} style")


async def _asyncpg_insert(conn: Any, job: PreparedJob) -> JobRow:
    async def execute(sql: str, params: dict[str, Any]) -> Rows:
        numbered, args = _bind("numeric_dollar", sql, params)
        return _decoded(await conn.fetch(numbered, *args))

    if conn.is_in_transaction():
        return await drive_async(_steps(job), execute)
    async with conn.transaction():  # a unique insert's statements stand or fall together
        return await drive_async(_steps(job), execute)


def _sqlalchemy_rows(conn: Any, sql: str, params: dict[str, Any]) -> Rows:
    result = conn.exec_driver_sql(*_bind(conn.dialect.paramstyle, sql, params))
    return _decoded(result.mappings().all())


async def _sqlalchemy_insert_async(conn: Any, job: PreparedJob) -> JobRow:
    from sqlalchemy.ext.asyncio import AsyncSession

    connection = await conn.connection() if isinstance(conn, AsyncSession) else conn

    async def execute(sql: str, params: dict[str, Any]) -> Rows:
        statement = _bind(connection.dialect.paramstyle, sql, params)
        result = await connection.exec_driver_sql(*statement)
        return _decoded(result.mappings().all())

    return await drive_async(_steps(job), execute)
