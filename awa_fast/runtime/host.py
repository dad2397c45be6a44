"""This host's row in awa_fast.hosts: claims stamp their rows with its id, and the leader
rescues them if the row's heartbeat goes stale."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Any

import psycopg

from awa_fast.db.queries import Q


class Host:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.id: int | None = None  # once registered
        self.last_beat = 0.0  # time.monotonic() of the last heartbeat that landed

    async def register(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A new row, before the first claim (and again if this one was taken for dead)."""
        name = f"{socket.gethostname()}:{os.getpid()}"
        cur = await conn.execute(Q.host_register, {"name": name})
        row = await cur.fetchone()
        assert row is not None
        self.id = int(row[0])
        self.last_beat = time.monotonic()

    async def beat(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Renew the row's heartbeat; False when the row is gone."""
        cur = await conn.execute(Q.host_heartbeat, {"id": self.id})
        if await cur.fetchone() is None:
            return False
        self.last_beat = time.monotonic()
        return True

    def age(self, now: float) -> float | None:
        """Seconds since the last heartbeat landed; None before registering."""
        return None if self.id is None else now - self.last_beat

    async def forget(self) -> None:
        """Remove the row (best effort: a row left behind goes stale and is rescued)."""
        if self.id is None:
            return
        with contextlib.suppress(psycopg.Error):
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                await conn.execute(Q.host_forget, {"id": self.id})
