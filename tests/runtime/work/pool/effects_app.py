"""A handler with an effect: one row in ``effects`` per run, written and the job completed
in the handler's own transaction (``job.complete_in``), on a connection of this process's
pool (opened after the fork) that no other handler shares meanwhile."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

import awa_fast

client = awa_fast.AsyncClient(os.environ.get("AWA_FAST_TEST_APP_DSN", "postgresql:///unset"))
_pool: AsyncConnectionPool[Any] | None = None


@dataclass
class Effect:
    n: int


async def _connections() -> AsyncConnectionPool[Any]:
    global _pool
    if _pool is None:
        _pool = AsyncConnectionPool(client.dsn, min_size=1, max_size=32, open=False)
        await _pool.open()
    return _pool


@client.task(Effect, completes_in_transaction=True)
async def effect(job: awa_fast.Job[Effect]) -> None:
    async with (await _connections()).connection() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO effects (job_id, attempt, pid) VALUES (%s, %s, %s)",
            (job.id, job.attempt, os.getpid()),
        )
        await job.complete_in(conn)
