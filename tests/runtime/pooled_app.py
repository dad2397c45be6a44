"""The app the PgBouncer tests serve (tests/runtime/test_pgbouncer.py): handlers that
write to their job while they run, on the attempt writer's connections, async and sync;
the async one reads each write back through the app's own client, as a handler using its
client would."""

from __future__ import annotations

import os
from dataclasses import dataclass

import awa_fast

client = awa_fast.AsyncClient(os.environ.get("AWA_FAST_TEST_APP_DSN", "postgresql:///unset"))
FLUSHES = 3  # progress written to the row, each on its own statement


@dataclass
class Flush:
    n: int


@dataclass
class FlushSync:
    n: int


@client.task(Flush)
async def flush(job: awa_fast.Job[Flush]) -> None:
    for step in range(1, FLUSHES + 1):
        job.set_progress(100 * step // FLUSHES)
        await job.flush_progress()
        row = await client.get_job(job.id)
        assert row.progress == {"percent": 100 * step // FLUSHES}
    job.update_metadata({"pid": os.getpid()})


@client.task(FlushSync)
def flush_sync(job: awa_fast.Job[FlushSync]) -> None:
    for step in range(1, FLUSHES + 1):
        job.set_progress(100 * step // FLUSHES)
        job.flush_progress_sync()
    job.update_metadata({"pid": os.getpid()})
