"""A handler's flushed progress is on its job while it runs, in forked workers and
in-process, from async and plain ``def`` handlers; an attempt that lost its job cannot
write it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pytest

import awa_fast
from tests.helpers import await_until, job, run


@dataclass
class Long:
    n: int


def _running_with_progress(dsn: str, job_id: int) -> bool:
    row = job(dsn, job_id)
    return row["state"] == "running" and row["progress"] is not None


@pytest.mark.parametrize("processes", [None, 2])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "def"])
def test_flushed_progress_is_on_the_job_while_it_runs(
    dsn: str, processes: int | None, sync: bool
) -> None:
    async def main() -> dict[str, Any]:
        client = awa_fast.AsyncClient(dsn)

        if sync:

            @client.task(Long)
            def long(job: awa_fast.Job[Long]) -> None:
                job.set_progress(40, "reading")
                job.update_metadata({"rows": 400})
                job.flush_progress_sync()
                while not job.is_cancelled():
                    time.sleep(0.01)
        else:

            @client.task(Long)
            async def long(job: awa_fast.Job[Long]) -> None:
                job.set_progress(40, "reading")
                job.update_metadata({"rows": 400})
                await job.flush_progress()
                while not job.is_cancelled():
                    await asyncio.sleep(0.01)

        async with client:
            inserted = await client.insert(Long(1), metadata={"team": "ops"})
            await client.start({"default": 1}, processes=processes)
            await await_until(
                lambda: _running_with_progress(dsn, inserted.id), what="flushed progress"
            )
            seen = job(dsn, inserted.id)
            await client.cancel(inserted.id)
        return seen

    seen = run(main())
    assert seen["progress"] == {"percent": 40, "message": "reading", "metadata": {"rows": 400}}
    assert seen["metadata"] == {"team": "ops", "rows": 400}


def test_an_attempt_that_lost_its_job_cannot_flush(dsn: str) -> None:
    raised: list[BaseException] = []
    flushed = asyncio.Event()

    async def main() -> None:
        client = awa_fast.AsyncClient(dsn)

        @client.task(Long)
        async def long(job: awa_fast.Job[Long]) -> None:
            await job.flush_progress()  # owns the job: written
            flushed.set()
            while not job.is_cancelled():
                await asyncio.sleep(0.01)
            job.set_progress(99)
            try:
                await job.flush_progress()
            except awa_fast.LeaseLost as exc:
                raised.append(exc)

        async with client:
            inserted = await client.insert(Long(1))
            await client.start({"default": 1})
            # Cancelled only once the handler has flushed: a claimed job is running
            # before its handler starts.
            await asyncio.wait_for(flushed.wait(), 30)
            await client.cancel(inserted.id)
            await await_until(lambda: raised, what="the late flush to fail")
        row = job(dsn, inserted.id)
        assert row["state"] == "cancelled" and row["progress"] is None

    run(main())
    assert [type(e) for e in raised] == [awa_fast.LeaseLost]
