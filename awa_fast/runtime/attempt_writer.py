"""The writes a running attempt makes to its own row before its outcome.

Everything else an attempt does reaches Postgres as an outcome record, batched by the
committer after the handler returns. Two things cannot wait for that:

- a callback id: the handler hands it to an external system before returning, and that
  system may answer at once, so the id is on the row before the handler gets it;
- progress the handler flushes (``job.flush_progress()``): for a long job whose progress
  others watch, or that a rescued attempt's successor should find.

Both are guarded by (id, run_lease, state): an attempt that no longer owns its job raises
:class:`LeaseLost`. They go over connections of the process the handler runs in, opened at
the first write (forked workers open their own after the fork): an async one for async
handlers, a sync one, shared under a lock, for sync handlers on their threads.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import psycopg

from awa_fast.codec import encode_json
from awa_fast.db.queries import Q
from awa_fast.errors import LeaseLost
from awa_fast.producer import positive_seconds

_SESSION: dict[str, Any] = {"autocommit": True, "application_name": "awa-fast attempt writes"}


class AttemptWriter:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connecting = asyncio.Lock()
        self._sync_conn: psycopg.Connection[Any] | None = None
        self._sync_lock = threading.Lock()

    async def register_callback(self, job_id: int, run_lease: int, timeout_seconds: float) -> str:
        """A new callback id, on the row of attempt (``job_id``, ``run_lease``) before it is
        returned."""
        timeout = positive_seconds("timeout_seconds", timeout_seconds)
        callback_id = str(uuid.uuid4())
        params = {"callback_id": callback_id, "timeout_s": timeout}
        await self._write(Q.job_register_callback, job_id, run_lease, params)
        return callback_id

    async def save_progress(
        self, job_id: int, run_lease: int, progress: object, metadata: dict[str, Any]
    ) -> None:
        """The attempt's progress, and its metadata updates so far, on its row now."""
        params = _progress_params(progress, metadata)
        await self._write(Q.job_save_progress, job_id, run_lease, params)

    def save_progress_sync(
        self, job_id: int, run_lease: int, progress: object, metadata: dict[str, Any]
    ) -> None:
        """:meth:`save_progress` from a sync handler's thread."""
        params = {**_progress_params(progress, metadata), "id": job_id, "lease": run_lease}
        with self._sync_lock:
            if self._sync_conn is None or self._sync_conn.closed:
                self._sync_conn = psycopg.connect(self.dsn, **_SESSION)
            row = self._sync_conn.execute(Q.job_save_progress, params).fetchone()
        if row is None:
            raise LeaseLost(job_id, run_lease)

    async def _write(self, query: str, job_id: int, run_lease: int, params: dict[str, Any]) -> None:
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(self.dsn, **_SESSION)
            conn = self._conn
        cur = await conn.execute(query, {**params, "id": job_id, "lease": run_lease})
        if await cur.fetchone() is None:
            raise LeaseLost(job_id, run_lease)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        with self._sync_lock:
            if self._sync_conn is not None:
                self._sync_conn.close()
                self._sync_conn = None


def _progress_params(progress: object, metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "progress": None if progress is None else encode_json("progress", progress).decode(),
        "metadata": encode_json("metadata", metadata).decode(),
    }
