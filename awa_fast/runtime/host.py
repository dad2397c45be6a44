"""This host's row in awa_fast.hosts: claims stamp their rows with its id, and the leader
rescues them if the row's heartbeat goes stale. The row also says how this host serves its
queues, for the dashboard."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Mapping
from typing import Any, TypedDict

import psycopg
from psycopg.types.json import Jsonb

from awa_fast.db.queries import Q


class QueueSettings(TypedDict):
    """How this host serves one queue, as its row records it (migration 0021)."""

    concurrency: int
    rate_limit: tuple[float, int] | None  # (rate, burst)
    prefetch: int | None  # per worker; None: each worker's by its pace


class Host:
    def __init__(self, dsn: str, *, queues: Mapping[str, QueueSettings] | None = None) -> None:
        self.dsn = dsn
        self.queues = dict(queues or {})
        self.id: int | None = None  # once registered
        self.last_beat = 0.0  # time.monotonic() of the last heartbeat that landed

    async def register(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A new row, before the first claim (and again if this one was taken for dead)."""
        name = f"{socket.gethostname()}:{os.getpid()}"
        cur = await conn.execute(Q.host_register, {"name": name, "queues": Jsonb(self.queues)})
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
            async with await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, application_name="awa-fast runner"
            ) as conn:
                await conn.execute(Q.host_forget, {"id": self.id})
