"""This host's row in awa_fast.hosts, and the connection that keeps it alive.

Claims stamp their rows with the row's id. The leader takes a host for dead in one of two
ways (awa_fast.maintenance.rescuer): its lock is free, or its heartbeat is stale. The lock
is a session advisory lock that the host takes on its own connection in the statement
that inserts its row (migration 0026): Postgres lets it go the moment that session ends,
so a host killed outright is seen at once. A host frozen or cut off keeps its session,
and is seen by its heartbeat going stale. The row also says how this host serves its
queues, for the dashboard.

The connection is the heartbeat's: every beat goes over it, so while it stays up the host
holds its lock. One lost is opened again, and the lock taken again in the first statement
on it, the same one that beats (host_relock). Behind a transaction pooler the connection
needs a session of its own, so it goes to the direct URL; without one, the host takes no
lock and is found by its heartbeat alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any, TypedDict

import psycopg
from psycopg.types.json import Jsonb

from awa_fast.db.connections import Database, connect_hot_async, held_open
from awa_fast.db.primary import usable
from awa_fast.db.queries import Q

log = logging.getLogger("awa_fast.heartbeat")


class QueueSettings(TypedDict):
    """How this host serves one queue, as its row records it (migration 0021)."""

    concurrency: int
    rate_limit: tuple[float, int] | None  # (rate, burst)
    prefetch: int | None  # per worker; None: each worker's by its pace


class Host:
    """The row, on a connection to ``database``; with ``session`` (where a connection keeps
    its session: ``database`` itself, or the direct URL behind a pooler), the lock too."""

    def __init__(
        self,
        database: Database,
        *,
        session: Database | None = None,
        queues: Mapping[str, QueueSettings] | None = None,
    ) -> None:
        self.database = database
        self.session = session
        self.queues = dict(queues or {})
        self.id: int | None = None  # once registered
        self.last_beat = 0.0  # time.monotonic() of the last heartbeat that landed
        self.holds_lock = False  # the connection's session holds the row's lock
        self._lock_refused = False  # the last try to take it again found it held
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def connection(self) -> psycopg.AsyncConnection[Any]:
        """The host's connection, opened again if it was lost (its lock went with it)."""
        conn = self._conn
        if conn is not None and usable(conn):
            return conn
        await self.close()
        self._conn = await connect_hot_async(
            self.session or self.database, application_name="awa-fast heartbeat"
        )
        return self._conn

    def connected(self) -> bool:
        """Whether the host's connection is open, to a server that takes writes."""
        return self._conn is not None and usable(self._conn)

    async def register(self) -> None:
        """A new row, before the first claim, with its lock where there is a session."""
        await self._register(await self.connection())

    async def _register(self, conn: psycopg.AsyncConnection[Any]) -> None:
        locking = self.session is not None
        params = {"name": f"{socket.gethostname()}:{os.getpid()}", "queues": Jsonb(self.queues)}
        cur = await conn.execute(Q.host_register_holding if locking else Q.host_register, params)
        row = await cur.fetchone()
        assert row is not None
        self.id = int(row[0])
        self.holds_lock = locking
        self.last_beat = time.monotonic()

    async def beat(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Renew the row's heartbeat on ``conn`` (:meth:`connection`), taking the lock
        again first where this session does not hold it; False when the row was gone (the
        leader took this host for dead): a new one is registered."""
        relock = self.session is not None and not self.holds_lock
        cur = await conn.execute(Q.host_relock if relock else Q.host_heartbeat, {"id": self.id})
        row = await cur.fetchone()
        if row is None:
            if self.holds_lock:  # the old row's, which nobody will try again
                await conn.execute(Q.host_unlock, {"id": self.id})
            await self._register(conn)
            return False
        if relock:
            self._relocked(bool(row[0]))
        self.last_beat = time.monotonic()
        return True

    def _relocked(self, taken: bool) -> None:
        """Note whether the lock was taken again; say so once when it was not."""
        if not taken and not self._lock_refused:
            log.warning(
                "host %s could not take its lock again: an earlier session of its own "
                "still holds it; until that ends, it is known live by its heartbeat",
                self.id,
            )
        self.holds_lock = taken
        self._lock_refused = not taken

    async def wait(self, seconds: float) -> None:
        """Wait ``seconds`` on the host's connection; raise psycopg.OperationalError at
        once if it is lost meanwhile, so that the lock is taken again without waiting out
        the rest (a leader looking finds the lock free for that long)."""
        conn = self._conn
        if conn is None or conn.closed:
            await asyncio.sleep(seconds)
            return
        async for _ in conn.notifies(timeout=seconds):
            pass  # the connection LISTENs to nothing: only its end comes through

    def age(self, now: float) -> float | None:
        """Seconds since the last heartbeat landed; None before registering."""
        return None if self.id is None else now - self.last_beat

    async def close(self) -> None:
        """Close the connection: the lock goes, and the leader takes the row for dead."""
        conn, self._conn = self._conn, None
        self.holds_lock = False
        if conn is not None:
            await conn.close()

    async def forget(self) -> None:
        """Remove the row, then close the connection (best effort: a row left behind is
        taken for dead)."""
        try:
            if self.id is not None:
                with contextlib.suppress(psycopg.Error):
                    async with await psycopg.AsyncConnection.connect(
                        self.database.dsn,
                        autocommit=True,
                        application_name="awa-fast runner",
                        **held_open(self.database.dsn),
                    ) as conn:
                        await conn.execute(Q.host_forget, {"id": self.id})
        finally:
            await self.close()
