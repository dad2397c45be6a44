"""Transactions the Awa SDK's way: ``tx = await client.transaction()``, then the
application's own statements and job inserts on one connection, visible together on commit.

A transaction holds one of its client's pooled connections from ``BEGIN`` until it ends, and
gives it back idle whatever happens: leaving the ``with`` block commits (as the SDK does),
an exception in it (a cancelled task included) rolls back, and ``commit()`` or
``rollback()`` end it early. Statements take Postgres' own ``$1, $2`` placeholders, as the
SDK's do; a dict or list argument is sent as ``jsonb``, as the SDK sends it. Jobs go in
through :mod:`awa_fast.producer`'s insert paths, whose statements fire the trigger that
wakes workers: Postgres delivers that NOTIFY at commit, and never after a rollback.

:class:`~awa_fast.transaction_sync.SyncTransaction` is generated from
:class:`Transaction` by tools/async_to_sync.py, in :mod:`awa_fast.transaction_sync`; what they
share (the closed check, the placeholder count, the cursor's adapters, the ending
chosen on exit) is in this module's functions, so the twins are I/O only.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Literal, Unpack

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import JsonbDumper

from awa_fast import admin, producer
from awa_fast.errors import AwaError, NoRowFound, ValidationError
from awa_fast.types import InsertOptions, JobRow, check_insert_options

_CLOSED = "the transaction was already committed or rolled back"
_ABORTED = (
    "the transaction was aborted by an earlier failed statement and has been rolled back; "
    "nothing in it was committed"
)

# What a query's text holds besides placeholders: quoted strings and identifiers, comments
# and dollar-quoted bodies are skipped whole, so a "$1" inside them is not counted.
_LEXEME = re.compile(
    r"""[Ee]'(?:[^'\\]|\\.|'')*'"""
    r"""|'(?:[^']|'')*'"""
    r'''|"(?:[^"]|"")*"'''
    r"""|--[^\n]*"""
    r"""|/\*.*?\*/"""
    r"""|(\$(?:[A-Za-z_]\w*)?\$).*?\1"""
    r"""|\$(\d+)""",
    re.DOTALL,
)


@functools.lru_cache(maxsize=512)
def placeholder_count(query: str) -> int:
    """The highest ``$N`` in ``query`` outside its literals and comments."""
    numbers = (int(m.group(2)) for m in _LEXEME.finditer(query) if m.group(2))
    return max(numbers, default=0)


def _params(query: str, args: Sequence[Any]) -> Sequence[Any] | None:
    """``args`` for ``query``, checked against its placeholders: Postgres refuses too few
    (and the transaction is then aborted) but ignores extra ones, which would drop a value
    the caller meant to store without a word."""
    expected = placeholder_count(query)
    if len(args) != expected:
        raise ValidationError(
            "args", f"the query has {expected} placeholder(s) ($1..), got {len(args)} argument(s)"
        )
    return args or None  # none: the simple protocol, which also runs several statements


def _adapt(cur: psycopg.RawCursor[DictRow] | psycopg.AsyncRawCursor[DictRow]) -> None:
    """Dicts and lists go to Postgres as jsonb, as the Awa SDK sends them (psycopg's own
    default for a list is an array); set on this cursor only, not the pooled connection."""
    cur.adapters.register_dumper(dict, JsonbDumper)
    cur.adapters.register_dumper(list, JsonbDumper)


def _one(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        raise NoRowFound("fetch_one: the query returned no row (fetch_optional returns None)")
    return row


def _ending(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> str:
    """The statement that ends the transaction on ``commit()``. Postgres answers COMMIT on an
    aborted transaction by rolling it back without an error; that is said here instead."""
    if conn.info.transaction_status == TransactionStatus.INERROR:
        return "ROLLBACK"
    return "COMMIT"


class _Handle:
    """The state both twins share: the connection until the transaction ends."""

    def __init__(self, conn: Any) -> None:
        self._connection: Any = conn

    def _live(self) -> Any:
        if self._connection is None:
            raise AwaError(_CLOSED)
        return self._connection

    def _end(self) -> Any:
        """The connection, now no longer this transaction's (a second end raises)."""
        conn = self._live()
        self._connection = None
        return conn

    @property
    def closed(self) -> bool:
        """True once committed or rolled back."""
        return self._connection is None


# ---- asyncio source: its synchronous twin is generated from it ----


class Transaction(_Handle):
    """A transaction on one of its client's pooled connections (:class:`~awa_fast.AsyncClient`,
    ``async with await client.transaction() as tx:``): commits when the block ends, rolls
    back on an exception."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        release: contextlib.AsyncExitStack,
        *,
        traces: bool = True,
    ) -> None:
        super().__init__(conn)
        self._release = release
        self._traces = traces  # its client's option: its inserts' producer spans

    @classmethod
    async def begin(
        cls, pooled: contextlib.AbstractAsyncContextManager[Any], *, traces: bool = True
    ) -> Transaction:
        """Take a connection from ``pooled`` (a client's pool) and open a transaction on it."""
        async with contextlib.AsyncExitStack() as release:
            conn = await release.enter_async_context(pooled)
            await conn.execute("BEGIN")
            return cls(conn, release.pop_all(), traces=traces)

    def _cursor(self) -> psycopg.AsyncRawCursor[DictRow]:
        cur = psycopg.AsyncRawCursor(self._live(), row_factory=dict_row)
        _adapt(cur)
        return cur

    async def execute(self, query: str, *args: Any) -> int:
        """Run ``query`` with ``$1, $2`` … bound to ``args``; returns the rows it affected
        (or returned)."""
        async with self._cursor() as cur:
            await cur.execute(query, _params(query, args))
            return cur.rowcount

    async def fetch_one(self, query: str, *args: Any) -> dict[str, Any]:
        """The first row; :class:`~awa_fast.errors.NoRowFound` when there is none."""
        return _one(await self.fetch_optional(query, *args))

    async def fetch_optional(self, query: str, *args: Any) -> dict[str, Any] | None:
        async with self._cursor() as cur:
            await cur.execute(query, _params(query, args))
            return await cur.fetchone()

    async def fetch_all(self, query: str, *args: Any) -> list[dict[str, Any]]:
        async with self._cursor() as cur:
            await cur.execute(query, _params(query, args))
            return await cur.fetchall()

    async def insert(self, args: object, **options: Unpack[InsertOptions]) -> JobRow:
        """Insert a job in this transaction (validated as :func:`awa_fast.insert` does); a
        unique conflict raises and leaves the transaction usable."""
        check_insert_options("insert", options)
        return await producer.insert_async(self._live(), args, traces=self._traces, **options)

    async def insert_many(
        self, jobs: Iterable[object], **options: Unpack[InsertOptions]
    ) -> list[JobRow]:
        """Insert jobs in this transaction; returns them, in order, as the SDK's does."""
        check_insert_options("insert_many", options)
        conn = self._live()
        ids = await producer.insert_many_async(conn, jobs, traces=self._traces, **options)
        op = admin.get_jobs(ids)
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(op.sql, op.params)
            return op.shape(await cur.fetchall())

    async def commit(self) -> None:
        """Commit; raises if an earlier failed statement had aborted the transaction (which
        is then rolled back)."""
        conn = self._end()
        async with self._release:
            ending = _ending(conn)
            await conn.execute(ending)
        if ending != "COMMIT":
            raise AwaError(_ABORTED)

    async def rollback(self) -> None:
        conn = self._end()
        async with self._release:
            await conn.execute("ROLLBACK")

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if self.closed:
            return False
        if exc_type is None:
            await self.commit()
            return False
        # The exception under way is the one to report: a rollback that fails too (the
        # connection broke) leaves nothing committed, and the pool discards the connection.
        with contextlib.suppress(psycopg.Error):
            await self.rollback()
        return False
