"""Leadership as a term that expires, kept in the one row of ``awa_fast.leader``
(migration 0020), with every maintenance transaction fenced by the term.

The leader renews its term every ``interval`` seconds; each renewal pushes the term's end
:data:`TERM_INTERVALS` intervals ahead by the database's clock. A leader that stops
renewing (its process paused or cut off, its connection dead) loses the term within that
time and another host begins the next; a leader that stops cleanly releases its term, so
the next begins at another host's next attempt. Nothing ties the term to a session, so a
leader that lost its connection for a moment renews its term on a new one.

A term that ended must not act: a leader paused mid-step and woken later would otherwise
promote and rescue alongside the next. So each maintenance transaction begins by taking
the fence lock, shared, and checking that the term is still its own and unexpired
(:meth:`Leader.fenced`); otherwise it does nothing (:class:`Deposed`). Beginning a term
takes the fence lock exclusively, so no new term begins while a transaction of the last
still runs. A paused leader's open transaction cannot hold the next term off for long:
its connection ends the session once idle in a transaction for a term's length.

Nothing here needs a session of its own, so behind a transaction pooler the leader's
connections go through it: the locks are the transaction's, and the idle limit is set
in each fenced transaction instead of once for the session (which the pooler lends on).

A host that could not reach the database could not beat either. So the leader also keeps
how long its own statements have reached the database without a failure
(:meth:`Leader.up_for`): rescue counts a host's silence only once that is long enough
(awa_fast.maintenance.rescuer). Every host runs elections, so a host that becomes leader
after another died has been counting all along.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from awa_fast.db.connections import Database, connect_or_close, held_open
from awa_fast.db.primary import check_primary_async
from awa_fast.db.queries import Q

log = logging.getLogger("awa_fast.leader")

TERM_INTERVALS = 3  # a term outlives a renewal or two late, not a leader gone
FENCE_KEY = 0x617761_6661_7374 + 2  # the advisory lock key of the fence, one per database


async def has_work(
    conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any] | None = None
) -> bool:
    """The unfenced look a frequent step takes before it fences: whether ``query``, one
    boolean, says there is work. A leader with none opens no transaction for it."""
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    return bool(row and row[0])


class Deposed(Exception):
    """This leader's term is over (or it has none): what it was about to do is undone."""


class Leader:
    """One process's claim to lead: ``check()`` every ``interval`` seconds renews it or
    begins a new term; ``is_leader`` says whether a term is held; statements that must
    act only under that term run in :meth:`fenced`."""

    def __init__(self, database: Database, *, interval: float) -> None:
        self.database = database
        self.term_s = TERM_INTERVALS * interval
        self.holder = f"{socket.gethostname()} pid {os.getpid()} {uuid.uuid4().hex[:12]}"
        self.term: int | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._up_since: float | None = None  # time.monotonic() of the first success since a failure

    @property
    def is_leader(self) -> bool:
        return self.term is not None

    def up_for(self, now: float) -> float:
        """Seconds (to ``now``, by time.monotonic()) that this leader's statements have
        reached the database without a connection failing: 0 while they fail."""
        return 0.0 if self._up_since is None else now - self._up_since

    def reached(self) -> None:
        """A statement reached the database: the count of time up starts, unless it runs."""
        if self._up_since is None:
            self._up_since = time.monotonic()

    def unreachable(self) -> None:
        """A connection failed: the database was out of reach, for as long as anyone knows."""
        self._up_since = None

    async def connect(self, *, application_name: str) -> psycopg.AsyncConnection[Any]:
        """A connection to the primary for this leader's statements, kept alive (TCP
        keepalives), which
        the server ends once it has been idle in a transaction for a term's length: a
        paused leader's open fence holds off the next term no longer than its own term
        would have lasted. Closed, not dropped, if the caller is cancelled meanwhile."""
        return await connect_or_close(self._open(application_name))

    async def _open(self, application_name: str) -> psycopg.AsyncConnection[Any]:
        database = self.database
        conn = await psycopg.AsyncConnection.connect(
            database.dsn,
            autocommit=True,
            application_name=application_name,
            **held_open(database.dsn),
            prepare_threshold=database.prepare_threshold(),
        )
        try:
            await check_primary_async(conn)  # a standby's leader row is the primary's past
            if not database.pooled:  # else fenced() limits each transaction instead
                await self._limit_idle(conn, local=False)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _limit_idle(self, conn: psycopg.AsyncConnection[Any], *, local: bool) -> None:
        """End ``conn``'s session once idle in a transaction for a term's length: for the
        session, or (``local``) for the current transaction."""
        await conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, %s)",
            (f"{self.term_s * 1000:.0f}", local),
        )

    async def check(self) -> bool:
        """Renew this leader's term, or begin the next if the current one has ended;
        returns whether this leader holds a term now."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await self.connect(application_name="awa-fast leader")
            params = {"holder": self.holder, "ttl_s": self.term_s, "key": FENCE_KEY}
            cur = await self._conn.execute(Q.leader_elect, params)
            row = await cur.fetchone()
        except psycopg.OperationalError as exc:
            self.unreachable()
            self._lose(f"lost the leader connection ({exc})")
            await self._close()
            return False
        self.reached()
        if row is None:
            self._lose("the term is another's, or its last transactions still run")
        elif row[0] != self.term:
            # A term of ours that expired unrenewed is over, whoever held the ones between.
            self._lose(f"term {self.term} is over")
            self.term = row[0]
            log.info("this host is now the maintenance leader (term %d)", self.term)
        return self.is_leader

    @asynccontextmanager
    async def fenced(self, conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
        """A transaction on ``conn`` that acts under this leader's term or not at all:
        raises :class:`Deposed` (changing nothing) unless the term is still current."""
        term = self.term
        if term is None:
            raise Deposed("not the leader")
        async with conn.transaction():
            if self.database.pooled:  # before the lock, which the limit must cover
                await self._limit_idle(conn, local=True)
            await conn.execute(Q.leader_fence_lock, {"key": FENCE_KEY})
            cur = await conn.execute(Q.leader_fence, {"term": term})
            if await cur.fetchone() is None:
                if self.term == term:  # not renewed into a new term meanwhile
                    self._lose(f"term {term} is over")
                raise Deposed(f"term {term} is over")
            yield

    async def close(self) -> None:
        """Stop leading: release the term, so the next host need not wait for it to
        expire, and close the connection."""
        try:
            if self.term is not None and self._conn is not None and not self._conn.closed:
                await self._conn.execute(Q.leader_release, {"holder": self.holder})
                # a restarted maintenance loop releases its term too: say where it went
                log.info("released the maintenance leader's term %d", self.term)
        except psycopg.Error as exc:
            log.warning("could not release the leader's term (%s); it expires", exc)
        finally:  # closed even when a cancel interrupts the release
            self.term = None
            await self._close()

    def _lose(self, why: str) -> None:
        if self.term is not None:
            log.warning("no longer the maintenance leader: %s", why)
        self.term = None

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
