"""A client's pool of connections: opened at first use, each connection checked as it is
handed out, and what a call raises when it gets none or loses it.

A client holds one pool for everything it writes and reads, to the primary, and, given a
read URL, one more for the reads that may lag behind it (``queue_stats``,
docs/high-availability.md). After a restart or a failover each idle connection of a pool is
to a server that closed it. So each is checked as the pool hands it out: one with anything
to read while idle (the server's last words, then the end of the stream) is asked, and, if
gone, replaced by a new one, to whichever server is the primary now. A call after a
failover gets a working connection rather than a stale one's error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from psycopg import AsyncConnection, OperationalError
from psycopg.errors import ReadOnlySqlTransaction
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from awa_fast.db.connections import (
    closed_meanwhile,
    connect_timeout_params,
    keepalives,
    refused,
    unreachable,
)
from awa_fast.db.primary import check_primary_async, read_only_error

_SESSION = {"autocommit": True, "application_name": "awa-fast client"}


# ---- asyncio source: its synchronous twin is generated from it ----


class AsyncClientPool:
    """A pool of ``dsn``'s connections, at most ``max_connections``, each made within
    ``connect_timeout`` seconds and told ``prepare_threshold()`` as it opens (None: it
    prepares nothing, behind a transaction pooler). For ``writes``, none is kept that
    reached a standby."""

    def __init__(
        self,
        dsn: str,
        *,
        max_connections: int,
        connect_timeout: float,
        prepare_threshold: Callable[[], int | None],
        writes: bool,
    ) -> None:
        self.dsn = dsn
        self._threshold = prepare_threshold
        self._writes = writes
        self._params = {
            **_SESSION,
            **keepalives(dsn),
            **connect_timeout_params(dsn, connect_timeout),
        }
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=0,
            max_size=max_connections,
            open=False,
            kwargs=self._params,
            configure=self._configure,
            check=self._check,
            timeout=connect_timeout,
        )
        self._opened = False

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        """Read as the pool opens each connection (``serve --pgbouncer`` tells a client
        made at import afterwards); a connection for writes that reached a standby is
        refused, and the pool tries again."""
        conn.prepare_threshold = self._threshold()
        if self._writes:
            await check_primary_async(conn)

    async def _check(self, conn: AsyncConnection[Any]) -> None:
        """Raise for a connection its server closed while it sat idle: the pool drops it
        and hands out another."""
        if closed_meanwhile(conn):
            await conn.execute("")

    async def reach(self) -> AbstractAsyncContextManager[AsyncConnection[Any]]:
        """A connection for one call (``async with await pool.reach() as conn``)."""
        if not self._opened:
            # One connection first, so that a database out of reach raises at once: the
            # pool would retry in the background, logging each failure, until its timeout.
            await self._probe()
            await self._pool.open()
            self._opened = True
        return self._reached()

    async def _probe(self) -> None:
        """Open a connection and close it again: raises what keeps the pool from opening
        its own (DatabaseUnreachable; ServerIsStandby, for writes), or a refusal (a role,
        a password) as libpq gave it."""
        try:
            conn = await AsyncConnection.connect(self.dsn, **self._params)
        except OperationalError as exc:
            if refused(exc):
                raise
            raise unreachable(self.dsn, str(exc)) from exc
        try:
            if self._writes:
                await check_primary_async(conn)
        finally:
            await conn.close()

    @asynccontextmanager
    async def _reached(self) -> AsyncIterator[AsyncConnection[Any]]:
        """An outage raises DatabaseUnreachable naming the server: no connection within the
        pool's timeout while the pool cannot open one (with every connection merely busy,
        the pool's own PoolTimeout), or the connection lost under the call. A write a
        standby refused raises ServerIsStandby, and its connection is dropped."""
        try:
            async with self._pool.connection() as conn:
                try:
                    yield conn
                except ReadOnlySqlTransaction as exc:
                    error = read_only_error(conn, exc)
                    if error is exc:  # a transaction the caller made read-only
                        raise
                    await conn.close()  # the pool opens another in its place
                    raise error from exc
                except OperationalError as exc:
                    if conn.broken:
                        raise unreachable(self.dsn, f"the connection was lost ({exc})") from exc
                    raise
        except PoolTimeout as exc:
            if self._pool.get_stats().get("pool_size", 0) >= (self._pool.max_size or 0):
                raise
            await self._probe()  # what the database says, if it says anything
            raise unreachable(self.dsn, f"no connection within {self._pool.timeout:g} s") from exc

    async def close(self) -> None:
        if self._opened:
            await self._pool.close()
            self._opened = False
