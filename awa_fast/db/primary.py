"""Writes go to the primary alone: a connection that reached a standby is dropped.

A URL that names several hosts asks libpq for a read-write session
(:func:`awa_fast.db.dsn.for_writes`), and libpq passes over a standby. A URL that names one
server can still reach one: the address of a server that was demoted, or a DNS name or
virtual IP that points at a standby for a moment during a failover. So a connection that
writes is checked as it opens (:func:`check_primary`), and a write that finds the server
read-only (SQLSTATE 25006, read_only_sql_transaction) raises
:class:`~awa_fast.errors.ServerIsStandby` from the runtime's cursors
(:class:`PrimaryCursor`), saying so. That is an OperationalError, and each of the
runtime's loops drops a connection that raises one and connects again, as it does for a
connection lost; nothing is taken for a job's failure.

Postgres 14 and later report ``in_hot_standby`` and ``default_transaction_read_only`` as a
connection opens and again whenever they change, so the check reads what the server sent.
A server that does not report them (an older one, or a pooler that does not pass them on)
is asked, one statement per connection opened.
"""

from __future__ import annotations

from typing import Any, NoReturn, Self

import psycopg
from psycopg.errors import ReadOnlySqlTransaction
from psycopg.rows import Row

from awa_fast.errors import ServerIsStandby

_ASK = "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only') = 'on'"
IN_RECOVERY = "a standby (in recovery)"
READ_ONLY = "read-only (default_transaction_read_only is on)"


def reported(conn: psycopg.BaseConnection[Any]) -> tuple[bool, bool] | None:
    """(in recovery, read-only by default) as the server last reported them on ``conn``;
    None if it does not report them."""
    status = conn.pgconn.parameter_status
    standby = status(b"in_hot_standby")
    if standby is None:
        return None
    return standby == b"on", status(b"default_transaction_read_only") == b"on"


def why_not_writable(in_recovery: bool, read_only: bool) -> str | None:
    """What keeps a server from taking writes, in words; None if nothing does."""
    if in_recovery:
        return IN_RECOVERY
    return READ_ONLY if read_only else None


def standby_error(where: str, why: str, detail: str = "") -> ServerIsStandby:
    """The error that says the server at ``where`` (``host:port``) takes no writes."""
    message = f"the server at {where} is {why} and takes no writes; awa-fast writes to the primary"
    return ServerIsStandby(f"{message}: {detail}" if detail else message)


def where(conn: psycopg.BaseConnection[Any]) -> str:
    """``host:port`` of ``conn``'s server (its socket directory for a Unix socket)."""
    return f"{conn.info.host}:{conn.info.port}"


def usable(conn: psycopg.BaseConnection[Any]) -> bool:
    """Whether a connection held open may be used again: open, and not on a server that
    has reported itself a standby or read-only since (a statement refused there raised
    :class:`~awa_fast.errors.ServerIsStandby`)."""
    state = reported(conn)
    return not conn.closed and (state is None or why_not_writable(*state) is None)


def check_primary(conn: psycopg.Connection[Any]) -> None:
    """Raise :class:`~awa_fast.errors.ServerIsStandby`, closing ``conn``, unless its
    server takes writes (an autocommit connection, as it opens)."""
    state = reported(conn)
    if state is None:
        state = _state(conn.execute(_ASK).fetchone())
    why = why_not_writable(*state)
    if why is not None:
        at = where(conn)
        conn.close()
        raise standby_error(at, why)


async def check_primary_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`check_primary` for an asyncio connection."""
    state = reported(conn)
    if state is None:
        state = _state(await (await conn.execute(_ASK)).fetchone())
    why = why_not_writable(*state)
    if why is not None:
        at = where(conn)
        await conn.close()
        raise standby_error(at, why)


def _state(row: Any) -> tuple[bool, bool]:
    return bool(row and row[0]), bool(row and row[1])


def read_only_error(
    conn: psycopg.BaseConnection[Any], exc: ReadOnlySqlTransaction
) -> psycopg.Error:
    """What a write that failed with SQLSTATE 25006 raises: ServerIsStandby when the server
    is a standby or read-only (or does not say, which the runtime's connections, never
    read-only by their own doing, take for one); else ``exc`` itself, a transaction made
    read-only by its own code."""
    state = reported(conn)
    why = IN_RECOVERY + " or read-only" if state is None else why_not_writable(*state)
    if why is None:
        return exc
    return standby_error(where(conn), why, str(exc).strip())


def _raise(conn: psycopg.BaseConnection[Any], exc: ReadOnlySqlTransaction) -> NoReturn:
    error = read_only_error(conn, exc)
    if error is exc:
        raise exc
    raise error from exc


class PrimaryCursor(psycopg.Cursor[Row]):
    """The runtime's cursor: a write that finds the server read-only raises
    :class:`~awa_fast.errors.ServerIsStandby`, a lost connection, not an error of the
    statement's."""

    def execute(self, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().execute(*args, **kwargs)
        except ReadOnlySqlTransaction as exc:
            _raise(self.connection, exc)

    def executemany(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().executemany(*args, **kwargs)
        except ReadOnlySqlTransaction as exc:
            _raise(self.connection, exc)


class AsyncPrimaryCursor(psycopg.AsyncCursor[Row]):
    """:class:`PrimaryCursor` for asyncio connections."""

    async def execute(self, *args: Any, **kwargs: Any) -> Self:
        try:
            return await super().execute(*args, **kwargs)
        except ReadOnlySqlTransaction as exc:
            _raise(self.connection, exc)

    async def executemany(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().executemany(*args, **kwargs)
        except ReadOnlySqlTransaction as exc:
            _raise(self.connection, exc)
