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

A handler that waits for its callback's payload (``job.wait_for_callback``) parks its row
in waiting_external and waits on a future. One poller per process reads where all of its
waiting attempts stand in one statement over the same async connection, every
``POLL_MIN``..``POLL_MAX`` seconds (sooner after news, backing off while nothing changes):
a payload resumes its handler, a job decided without it ends the wait with LeaseLost.
(LISTEN would need a connection of its own per process, and psycopg holds a connection's
lock while it waits for notifications, which would stall the other writes here.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from awa_fast.codec import encode_json
from awa_fast.db.connections import Database, closed_meanwhile, held_open, held_open_sync
from awa_fast.db.primary import check_primary, check_primary_async, usable
from awa_fast.db.queries import Q
from awa_fast.errors import LeaseLost, ServerIsStandby
from awa_fast.validation import positive_seconds

log = logging.getLogger("awa_fast.attempt_writer")

_SESSION: dict[str, Any] = {"autocommit": True, "application_name": "awa-fast attempt writes"}
POLL_MIN = 0.02  # seconds between polls of waiting attempts, after news
POLL_MAX = 0.5  # ... and at most, while nothing changes


@dataclass(slots=True)
class _Wait:
    """A handler waiting in ``wait_for_callback``."""

    callback_id: str
    cancelled: Callable[[], bool]
    answer: asyncio.Future[tuple[Any, datetime | None]]


class AttemptWriter:
    def __init__(self, database: Database) -> None:
        self.database = database
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connecting = asyncio.Lock()
        self._sync_conn: psycopg.Connection[Any] | None = None
        self._sync_lock = threading.Lock()
        self._waits: dict[tuple[int, int], _Wait] = {}  # by (job id, run_lease)
        self._news = asyncio.Event()  # a wait began: poll now
        self._poller: asyncio.Task[None] | None = None

    async def register_callback(
        self,
        job_id: int,
        run_lease: int,
        timeout_seconds: float,
        *,
        rules: dict[str, str] | None = None,
    ) -> str:
        """A new callback id, with its CEL expressions (``rules``, checked), on the row of
        attempt (``job_id``, ``run_lease``) before it is returned."""
        timeout = positive_seconds("timeout_seconds", timeout_seconds)
        callback_id = str(uuid.uuid4())
        params = {
            "callback_id": callback_id,
            "timeout_s": timeout,
            "rules": None if rules is None else encode_json("rules", rules).decode(),
        }
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
            if self._sync_conn is not None and closed_meanwhile(self._sync_conn):
                with contextlib.suppress(psycopg.Error):
                    self._sync_conn.execute("")
            if self._sync_conn is None or not usable(self._sync_conn):
                if self._sync_conn is not None:
                    self._sync_conn.close()
                conn = psycopg.connect(self.database.dsn, **_params(self.database, sync=True))
                check_primary(conn)
                self._sync_conn = conn
            try:
                row = self._sync_conn.execute(Q.job_save_progress, params).fetchone()
            except ServerIsStandby:  # a server demoted under it: connect again next time
                self._sync_conn.close()
                raise
        if row is None:
            raise LeaseLost(job_id, run_lease)

    async def wait_for_callback(
        self, job_id: int, run_lease: int, callback_id: str, cancelled: Callable[[], bool]
    ) -> tuple[Any, datetime | None]:
        """Park attempt (``job_id``, ``run_lease``) in waiting_external on ``callback_id``,
        which it registered, and return the payload ``resume_external`` gives it with the
        attempt's deadline, which the wait moved (callbacks.sql gives it back; None where
        the attempt has no deadline). Raises
        :class:`LeaseLost` once the job is decided without it, or once it is cut short
        (``cancelled()``, or this task cancelled), leaving the job parked on the callback.

        The callback may have answered before the wait begins: the first poll, at once,
        finds the payload (or the job decided) then."""
        params = {"callback_id": callback_id}
        await self._execute(Q.job_wait_callback, job_id, run_lease, params)
        key = (job_id, run_lease)
        wait = _Wait(callback_id, cancelled, asyncio.get_running_loop().create_future())
        self._waits[key] = wait
        self._news.set()
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll_waits(), name="awa-fast callback waits")
        try:
            return await wait.answer
        except asyncio.CancelledError:
            await self._park(job_id, run_lease, callback_id)
            raise
        finally:
            del self._waits[key]

    async def _poll_waits(self) -> None:
        """Settle the waits of this process until none is left: one read for all. Should
        it stop otherwise (closed, or a bug), no wait is left hanging."""
        delay = POLL_MIN
        try:
            while self._waits:
                self._news.clear()
                waits = list(self._waits.items())
                try:
                    ids = [job_id for (job_id, _), _ in waits]
                    rows = await self._read(Q.job_poll_callbacks, {"ids": ids})
                    settled = [await self._settle(key, wait, rows) for key, wait in waits]
                except psycopg.Error as exc:
                    log.warning("polling callback waits failed (%s); retrying", exc)
                    settled = []
                delay = POLL_MIN if any(settled) else min(delay * 2, POLL_MAX)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._news.wait(), delay)
        finally:
            for wait in self._waits.values():
                if not wait.answer.done():
                    wait.answer.set_exception(RuntimeError("callback waits stopped being polled"))

    async def _settle(
        self, key: tuple[int, int], wait: _Wait, rows: dict[int, Sequence[Any]]
    ) -> bool:
        """End ``wait`` if its job's row (as polled) answers it; True if it did."""
        if wait.answer.done():
            return False
        job_id, run_lease = key
        row = rows.get(job_id)
        if row is not None and row[LEASE] == run_lease:
            if row[STATE] == "waiting_external" and row[CALLBACK_ID] == wait.callback_id:
                if not wait.cancelled():
                    return False
                if not await self._park(job_id, run_lease, wait.callback_id):
                    return False  # answered meanwhile: the next poll says how
                reason = "cut short while waiting; the job stays parked on its callback"
                wait.answer.set_exception(LeaseLost(job_id, run_lease, reason))
                return True
            if row[STATE] == "running" and row[CALLBACK_ID] is None:  # resumed
                wait.answer.set_result((row[RESULT], row[DEADLINE]))
                return True
        wait.answer.set_exception(LeaseLost(job_id, run_lease, _decided(row, wait.callback_id)))
        return True

    async def _park(self, job_id: int, run_lease: int, callback_id: str) -> bool:
        """Leave the job of a wait cut short on its callback; False if it answered first."""
        params = {"callback_id": callback_id}
        try:
            return await self._execute(Q.job_park_callback, job_id, run_lease, params)
        except psycopg.Error as exc:
            log.warning("job %s: parking on callback %s failed (%s)", job_id, callback_id, exc)
            return False

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        """The async connection, made again if its server closed it while it sat idle (a
        restart, a failover): a handler's write must not fail on a stale connection."""
        async with self._connecting:
            if self._conn is not None and closed_meanwhile(self._conn):
                with contextlib.suppress(psycopg.Error):  # reads what came; raises if closed
                    await self._conn.execute("")
            if self._conn is None or not usable(self._conn):
                if self._conn is not None:
                    await self._conn.close()
                conn = await psycopg.AsyncConnection.connect(
                    self.database.dsn, **_params(self.database)
                )
                await check_primary_async(conn)
                self._conn = conn
            return self._conn

    async def _execute(
        self, query: str, job_id: int, run_lease: int, params: dict[str, Any]
    ) -> bool:
        """Run a write guarded by the attempt; True if it matched its row."""
        conn = await self._connection()
        try:
            cur = await conn.execute(query, {**params, "id": job_id, "lease": run_lease})
        except ServerIsStandby:  # a server demoted under it: connect again next time
            await conn.close()
            raise
        return await cur.fetchone() is not None

    async def _write(self, query: str, job_id: int, run_lease: int, params: dict[str, Any]) -> None:
        if not await self._execute(query, job_id, run_lease, params):
            raise LeaseLost(job_id, run_lease)

    async def _read(self, query: str, params: dict[str, Any]) -> dict[int, Sequence[Any]]:
        """Rows by their first column, a job id."""
        conn = await self._connection()
        cur = await conn.execute(query, params)
        return {row[0]: row for row in await cur.fetchall()}

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        with self._sync_lock:
            if self._sync_conn is not None:
                self._sync_conn.close()
                self._sync_conn = None


def _params(database: Database, *, sync: bool = False) -> dict[str, Any]:
    """Both connections' parameters: they stay open, go to the primary, and may go through
    a pooler."""
    threshold = database.prepare_threshold()
    held = held_open_sync(database.dsn) if sync else held_open(database.dsn)
    return {**_SESSION, **held, "prepare_threshold": threshold}


def _progress_params(progress: object, metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "progress": None if progress is None else encode_json("progress", progress).decode(),
        "metadata": encode_json("metadata", metadata).decode(),
    }


# Columns of a job_poll_callbacks row.
LEASE, STATE, CALLBACK_ID, RESULT, LAST_ERROR, DEADLINE = range(1, 7)


def _decided(row: Sequence[Any] | None, callback_id: str) -> str:
    """What became of a job while its handler waited on ``callback_id``."""
    waited = f"while it waited for callback {callback_id}, the job"
    if row is None:
        return f"{waited} left the job tables (dead-lettered, or deleted)"
    if row[STATE] in ("retryable", "failed", "cancelled") and row[LAST_ERROR]:
        return f"{waited} became {row[STATE]} ({row[LAST_ERROR]})"
    return f"{waited} became {row[STATE]}"
