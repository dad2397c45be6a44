"""Insert a job on a connection the application already holds, inside its transaction: the
Awa SDK's ``awa.bridge`` (``insert_job``, ``insert_job_sync``), for psycopg 3, asyncpg and
SQLAlchemy.

The job is the one :func:`awa_fast.insert` would write: the same validation, kind, unique
key and statements (whose trigger sends the NOTIFY that wakes workers, delivered when the
caller's transaction commits). Only how each statement reaches Postgres differs by driver:

* a psycopg connection in autocommit mode goes through :mod:`awa_fast.producer` itself,
  which opens a transaction (or a savepoint inside one already open) around a unique
  insert;
* every other connection is always inside the caller's transaction (psycopg and
  SQLAlchemy open it implicitly at the first statement; a bare asyncpg connection gets
  one here), so the producer's statements run there one by one (:func:`_steps`). A
  psycopg ``conn.transaction()`` block would commit the caller's implicit transaction.

asyncpg and SQLAlchemy are not dependencies: a connection is recognised by its type's
module, as the SDK does, and SQLAlchemy's classes are imported only for its connections.
Django's connection is refused by name (untested here); the psycopg 3 connection under it
(``django.db.connection.connection``) can be passed instead.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import fields
from typing import Any, Unpack

import orjson
import psycopg
from psycopg.rows import dict_row

from awa_fast import producer
from awa_fast.db.queries import Q
from awa_fast.errors import UniqueConflict
from awa_fast.producer import PreparedJob
from awa_fast.types import InsertOptions, JobRow

Rows = Sequence[Mapping[str, Any]]
Step = tuple[str, dict[str, Any]]  # a named statement and its parameters
Steps = Generator[Step, Rows, JobRow]
Execute = Callable[[str, dict[str, Any]], Rows]
ExecuteAsync = Callable[[str, dict[str, Any]], Awaitable[Rows]]

# Columns holding JSON that is always an object or an array: a driver that hands jsonb back
# as text (asyncpg, unless told otherwise) gives them as a str, decoded here.
_JSON_CONTAINERS = ("args", "errors", "metadata")


async def insert_job(
    conn: object, args: object, **options: Unpack[InsertOptions]
) -> dict[str, Any]:
    """Insert a job on ``conn`` (a psycopg ``AsyncConnection``, an asyncpg connection, or a
    SQLAlchemy ``AsyncConnection``/``AsyncSession``) inside the caller's transaction;
    returns the job's row as a dict. Options as :func:`awa_fast.insert`'s."""
    insert = _async_inserter(conn)
    return _as_dict(await insert(producer.prepare(producer.request_of(args, options))))


def insert_job_sync(conn: object, args: object, **options: Unpack[InsertOptions]) -> dict[str, Any]:
    """The synchronous :func:`insert_job`, for a psycopg ``Connection`` or a SQLAlchemy
    ``Connection``/``Session``."""
    insert = _sync_inserter(conn)
    return _as_dict(insert(producer.prepare(producer.request_of(args, options))))


def _steps(job: PreparedJob) -> Steps:
    """The statements of one insert, as :func:`awa_fast.producer.insert` runs them, for a
    driver to send inside the caller's transaction: each yields a named statement and
    receives its rows. A unique key held by a live job raises :class:`UniqueConflict`
    without failing a statement, so the caller's transaction stays usable."""
    job_id = None
    if job.unique_key is not None:
        job_id = (yield Q.job_next_ids, {"count": 1})[0]["nextval"]
        if not (yield Q.unique_claim_take, producer._claim_params(job, job_id)):
            holder = yield Q.unique_claim_holder, {"key": job.unique_key}
            raise UniqueConflict(holder[0]["job_id"] if holder else None)
    rows = yield Q.job_insert_many, producer._statement_params(job, job_id)
    row = dict(rows[0])
    for column in _JSON_CONTAINERS:
        if isinstance(row[column], str):
            row[column] = orjson.loads(row[column])
    return JobRow.from_row(row)


def _drive(steps: Steps, execute: Execute) -> JobRow:
    step = next(steps)
    while True:
        try:
            step = steps.send(execute(*step))
        except StopIteration as done:
            row: JobRow = done.value
            return row


async def _drive_async(steps: Steps, execute: ExecuteAsync) -> JobRow:
    step = next(steps)
    while True:
        try:
            step = steps.send(await execute(*step))
        except StopIteration as done:
            row: JobRow = done.value
            return row


def _as_dict(row: JobRow) -> dict[str, Any]:
    return {f.name: getattr(row, f.name) for f in fields(JobRow)}


# ---- which driver ---------------------------------------------------------------------------


def _sync_inserter(conn: object) -> Callable[[PreparedJob], JobRow]:
    if isinstance(conn, psycopg.Connection):
        if conn.autocommit:
            return functools.partial(producer._insert_prepared, conn)
        execute = functools.partial(_psycopg_rows, conn)
        return lambda job: _drive(_steps(job), execute)
    if _module(conn) == "sqlalchemy":
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session

        if isinstance(conn, Session):
            conn = conn.connection()
        if isinstance(conn, Connection):
            run = functools.partial(_sqlalchemy_rows, conn)
            return lambda job: _drive(_steps(job), run)
    raise _unsupported(
        conn,
        "insert_job_sync",
        "a psycopg Connection, or a SQLAlchemy Connection or Session "
        "(for an async one, use insert_job)",
    )


def _async_inserter(conn: object) -> Callable[[PreparedJob], Awaitable[JobRow]]:
    if isinstance(conn, psycopg.AsyncConnection):
        if conn.autocommit:
            return functools.partial(producer._insert_prepared_async, conn)
        execute = functools.partial(_psycopg_rows_async, conn)
        return lambda job: _drive_async(_steps(job), execute)
    if _module(conn) == "asyncpg":
        return functools.partial(_asyncpg_insert, conn)
    if _module(conn) == "sqlalchemy":
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        if isinstance(conn, AsyncSession | AsyncConnection):
            return functools.partial(_sqlalchemy_insert_async, conn)
    raise _unsupported(
        conn,
        "insert_job",
        "a psycopg AsyncConnection, an asyncpg connection, or a SQLAlchemy AsyncConnection "
        "or AsyncSession (for a sync one, use insert_job_sync)",
    )


def _module(conn: object) -> str:
    return (type(conn).__module__ or "").partition(".")[0]


def _unsupported(conn: object, function: str, supported: str) -> TypeError:
    name = f"{type(conn).__module__}.{type(conn).__qualname__}"
    if _module(conn) == "django":
        return TypeError(
            f"{function}() does not take a Django connection ({name}); pass the psycopg 3 "
            "connection under it instead (django.db.connection.connection)"
        )
    return TypeError(
        f"{function}() cannot insert on a connection of type {name}: it takes {supported}"
    )


# ---- each driver's way to run one statement ---------------------------------------------------


def _psycopg_rows(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> Rows:
    with psycopg.Cursor(conn, row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchall()


async def _psycopg_rows_async(
    conn: psycopg.AsyncConnection[Any], sql: str, params: dict[str, Any]
) -> Rows:
    async with psycopg.AsyncCursor(conn, row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchall()


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
        return [dict(row) for row in await conn.fetch(numbered, *args)]

    if conn.is_in_transaction():
        return await _drive_async(_steps(job), execute)
    async with conn.transaction():  # a unique insert's statements stand or fall together
        return await _drive_async(_steps(job), execute)


def _sqlalchemy_rows(conn: Any, sql: str, params: dict[str, Any]) -> Rows:
    result = conn.exec_driver_sql(*_bind(conn.dialect.paramstyle, sql, params))
    return list(result.mappings().all())


async def _sqlalchemy_insert_async(conn: Any, job: PreparedJob) -> JobRow:
    from sqlalchemy.ext.asyncio import AsyncSession

    connection = await conn.connection() if isinstance(conn, AsyncSession) else conn

    async def execute(sql: str, params: dict[str, Any]) -> Rows:
        statement = _bind(connection.dialect.paramstyle, sql, params)
        result = await connection.exec_driver_sql(*statement)
        return list(result.mappings().all())

    return await _drive_async(_steps(job), execute)
