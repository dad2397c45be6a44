"""Callback registration: the one write a handler makes to the database itself.

Every other thing an attempt does reaches Postgres as an outcome record, batched by the
committer after the handler returns. A callback id cannot wait for that: the handler hands
it to an external system before returning, and that system may answer at once. So the id
is written onto the running row when the handler asks for it, on a connection of the
process the handler runs in (opened at the first registration; forked workers open their
own after the fork).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.errors import LeaseLost
from awa_fast.producer import positive_seconds


class CallbackRegistrar:
    """Writes callback ids onto running attempts, guarded by (id, run_lease, state)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connecting = asyncio.Lock()

    async def register(self, job_id: int, run_lease: int, timeout_seconds: float) -> str:
        """A new callback id, on the row of attempt (``job_id``, ``run_lease``) before it is
        returned. Raises :class:`LeaseLost` when that attempt no longer owns its job."""
        timeout = positive_seconds("timeout_seconds", timeout_seconds)
        callback_id = str(uuid.uuid4())
        params = {
            "id": job_id,
            "lease": run_lease,
            "callback_id": callback_id,
            "timeout_s": timeout,
        }
        conn = await self._connection()
        cur = await conn.execute(Q.job_register_callback, params)
        if await cur.fetchone() is None:
            raise LeaseLost(job_id, run_lease)
        return callback_id

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, application_name="awa-fast callbacks"
                )
            return self._conn

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
