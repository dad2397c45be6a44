"""The synchronous twin of :mod:`awa_fast.client_pool`, generated from its asyncio code by
tools/async_to_sync.py: do not edit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from psycopg import Connection, OperationalError
from psycopg.errors import ReadOnlySqlTransaction
from psycopg_pool import ConnectionPool, PoolTimeout

from awa_fast.client_pool import _SESSION
from awa_fast.db.connections import (
    closed_meanwhile,
    connect_timeout_params,
    keepalives,
    refused,
    unreachable,
)
from awa_fast.db.primary import check_primary, read_only_error


class ClientPool:
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
        self._pool = ConnectionPool(
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

    def _configure(self, conn: Connection[Any]) -> None:
        """Read as the pool opens each connection (``serve --pgbouncer`` tells a client
        made at import afterwards); a connection for writes that reached a standby is
        refused, and the pool tries again."""
        conn.prepare_threshold = self._threshold()
        if self._writes:
            check_primary(conn)

    def _check(self, conn: Connection[Any]) -> None:
        """Raise for a connection its server closed while it sat idle: the pool drops it
        and hands out another."""
        if closed_meanwhile(conn):
            conn.execute("")

    def reach(self) -> AbstractContextManager[Connection[Any]]:
        """A connection for one call (``with pool.reach() as conn``)."""
        if not self._opened:
            # One connection first, so that a database out of reach raises at once: the
            # pool would retry in the background, logging each failure, until its timeout.
            self._probe()
            self._pool.open()
            self._opened = True
        return self._reached()

    def _probe(self) -> None:
        """Open a connection and close it again: raises what keeps the pool from opening
        its own (DatabaseUnreachable; ServerIsStandby, for writes), or a refusal (a role,
        a password) as libpq gave it."""
        try:
            conn = Connection.connect(self.dsn, **self._params)
        except OperationalError as exc:
            if refused(exc):
                raise
            raise unreachable(self.dsn, str(exc)) from exc
        try:
            if self._writes:
                check_primary(conn)
        finally:
            conn.close()

    @contextmanager
    def _reached(self) -> Iterator[Connection[Any]]:
        """An outage raises DatabaseUnreachable naming the server: no connection within the
        pool's timeout while the pool cannot open one (with every connection merely busy,
        the pool's own PoolTimeout), or the connection lost under the call. A write a
        standby refused raises ServerIsStandby, and its connection is dropped."""
        try:
            with self._pool.connection() as conn:
                try:
                    yield conn
                except ReadOnlySqlTransaction as exc:
                    error = read_only_error(conn, exc)
                    if error is exc:  # a transaction the caller made read-only
                        raise
                    conn.close()  # the pool opens another in its place
                    raise error from exc
                except OperationalError as exc:
                    if conn.broken:
                        raise unreachable(self.dsn, f"the connection was lost ({exc})") from exc
                    raise
        except PoolTimeout as exc:
            if self._pool.get_stats().get("pool_size", 0) >= (self._pool.max_size or 0):
                raise
            self._probe()  # what the database says, if it says anything
            raise unreachable(self.dsn, f"no connection within {self._pool.timeout:g} s") from exc

    def close(self) -> None:
        if self._opened:
            self._pool.close()
            self._opened = False
