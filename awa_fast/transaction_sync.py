"""The synchronous twin of :mod:`awa_fast.transaction`, generated from its asyncio code by
tools/async_to_sync.py: do not edit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Literal, Unpack

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_fast import admin, producer_sync
from awa_fast.errors import AwaError
from awa_fast.transaction import (
    _ABORTED,
    _adapt,
    _ending,
    _Handle,
    _one,
    _params,
)
from awa_fast.types import InsertOptions, JobRow, check_insert_options


class SyncTransaction(_Handle):
    """A transaction on one of its client's pooled connections (:class:`~awa_fast.Client`,
    ``with client.transaction() as tx:``): commits when the block ends, rolls
    back on an exception."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        release: contextlib.ExitStack,
        *,
        traces: bool = True,
    ) -> None:
        super().__init__(conn)
        self._release = release
        self._traces = traces  # its client's option: its inserts' producer spans

    @classmethod
    def begin(
        cls, pooled: contextlib.AbstractContextManager[Any], *, traces: bool = True
    ) -> SyncTransaction:
        """Take a connection from ``pooled`` (a client's pool) and open a transaction on it."""
        with contextlib.ExitStack() as release:
            conn = release.enter_context(pooled)
            conn.execute("BEGIN")
            return cls(conn, release.pop_all(), traces=traces)

    def _cursor(self) -> psycopg.RawCursor[DictRow]:
        cur = psycopg.RawCursor(self._live(), row_factory=dict_row)
        _adapt(cur)
        return cur

    def execute(self, query: str, *args: Any) -> int:
        """Run ``query`` with ``$1, $2`` … bound to ``args``; returns the rows it affected
        (or returned)."""
        with self._cursor() as cur:
            cur.execute(query, _params(query, args))
            return cur.rowcount

    def fetch_one(self, query: str, *args: Any) -> dict[str, Any]:
        """The first row; :class:`~awa_fast.errors.NoRowFound` when there is none."""
        return _one(self.fetch_optional(query, *args))

    def fetch_optional(self, query: str, *args: Any) -> dict[str, Any] | None:
        with self._cursor() as cur:
            cur.execute(query, _params(query, args))
            return cur.fetchone()

    def fetch_all(self, query: str, *args: Any) -> list[dict[str, Any]]:
        with self._cursor() as cur:
            cur.execute(query, _params(query, args))
            return cur.fetchall()

    def insert(self, args: object, **options: Unpack[InsertOptions]) -> JobRow:
        """Insert a job in this transaction (validated as :func:`awa_fast.insert` does); a
        unique conflict raises and leaves the transaction usable."""
        check_insert_options("insert", options)
        return producer_sync.insert(self._live(), args, traces=self._traces, **options)

    def insert_many(self, jobs: Iterable[object], **options: Unpack[InsertOptions]) -> list[JobRow]:
        """Insert jobs in this transaction; returns them, in order, as the SDK's does."""
        check_insert_options("insert_many", options)
        conn = self._live()
        ids = producer_sync.insert_many(conn, jobs, traces=self._traces, **options)
        op = admin.get_jobs(ids)
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(op.sql, op.params)
            return op.shape(cur.fetchall())

    def commit(self) -> None:
        """Commit; raises if an earlier failed statement had aborted the transaction (which
        is then rolled back)."""
        conn = self._end()
        with self._release:
            ending = _ending(conn)
            conn.execute(ending)
        if ending != "COMMIT":
            raise AwaError(_ABORTED)

    def rollback(self) -> None:
        conn = self._end()
        with self._release:
            conn.execute("ROLLBACK")

    def __enter__(self) -> SyncTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if self.closed:
            return False
        if exc_type is None:
            self.commit()
            return False
        # The exception under way is the one to report: a rollback that fails too (the
        # connection broke) leaves nothing committed, and the pool discards the connection.
        with contextlib.suppress(psycopg.Error):
            self.rollback()
        return False
