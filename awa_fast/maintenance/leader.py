"""Leadership by Postgres advisory lock, held on a connection of its own.

The lock lives exactly as long as that session: when the leader's process or connection
dies, Postgres releases it and another host takes it at its next attempt (every
``election_interval`` seconds), so re-election takes seconds and needs nothing but Postgres.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from awa_fast.db.queries import Q

log = logging.getLogger("awa_fast.leader")

LEADER_LOCK_KEY = 0x617761_6661_7374 + 1  # one leader per database


class Leader:
    def __init__(self, dsn: str, *, key: int = LEADER_LOCK_KEY) -> None:
        self.dsn = dsn
        self.key = key
        self.is_leader = False
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def check(self) -> bool:
        """Take the lock if free, or confirm the session holding it is alive."""
        try:
            if self._conn is None or self._conn.closed:
                self.is_leader = False
                self._conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, application_name="awa-fast leader"
                )
            if self.is_leader:
                await self._conn.execute("SELECT 1")
            else:
                cur = await self._conn.execute(Q.leader_try_acquire, {"key": self.key})
                row = await cur.fetchone()
                self.is_leader = bool(row and row[0])
                if self.is_leader:
                    log.info("this host is now the maintenance leader")
        except psycopg.OperationalError as exc:
            if self.is_leader:
                log.warning("lost the leader connection (%s); leadership released", exc)
            self.is_leader = False
            await self.close()
        return self.is_leader

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
