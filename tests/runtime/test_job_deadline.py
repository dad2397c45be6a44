"""``job.deadline``: when the attempt a handler runs must end, as the claim set it (the
job's own deadline, else its queue's, else the runner's), in-process and in forked worker
processes alike; and moved later by a wait for a callback, as the row's deadline is."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

import awa_fast
from tests.helpers import await_until, run, run_until, states
from tests.helpers import job as row_of

PROCESSES = pytest.mark.parametrize("processes", [None, 2], ids=["in-process", "forked"])


@dataclass
class Timed:
    label: str


@PROCESSES
def test_a_handler_sees_its_attempts_deadline(dsn: str, processes: int | None) -> None:
    """Each handler records its deadline and the time it started. The deadline is a UTC
    datetime, exactly the claim's time (the row's attempted_at) plus the seconds that apply,
    so it falls after the handler's start and within those seconds of it."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Timed, queue="plain")  # a queue the runner runs, as start() asks
    async def timed(job: awa_fast.Job[Timed]) -> None:
        started = datetime.now(UTC)
        job.update_metadata(
            {"deadline": job.datetimes.deadline.isoformat(), "started": started.isoformat()}
        )

    async def main() -> dict[int, float]:
        async with client:
            runner_default = await client.insert(Timed("runner"), queue="plain")
            queue_default = await client.insert(Timed("queue"), queue="tight")
            own = await client.insert(Timed("job"), queue="tight", deadline=20.5)
            await run_until(
                client,
                [
                    {"name": "plain", "max_workers": 2},
                    {"name": "tight", "max_workers": 2, "deadline_duration_ms": 45_000},
                ],
                lambda: states(dsn) == {"completed": 3},
                processes=processes,
                deadline=90.0,
            )
        return {runner_default.id: 90.0, queue_default.id: 45.0, own.id: 20.5}

    for job_id, seconds in run(main()).items():
        row = row_of(dsn, job_id)
        deadline = datetime.fromisoformat(row["metadata"]["deadline"])
        started = datetime.fromisoformat(row["metadata"]["started"])
        assert deadline.utcoffset() == timedelta(0)
        assert deadline == row["attempted_at"] + timedelta(seconds=seconds)
        assert started < deadline <= started + timedelta(seconds=seconds)


@PROCESSES
def test_a_wait_for_a_callback_moves_the_deadline(dsn: str, processes: int | None) -> None:
    """A wait does not use up the attempt's running time: after resume_external, the
    handler's deadline is the one the resume gave the row, later than before the wait."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Timed)
    async def waits(job: awa_fast.Job[Timed]) -> None:
        before = job.datetimes.deadline
        await job.wait_for_callback(await job.register_callback(timeout_seconds=600))
        job.update_metadata(
            {"before": before.isoformat(), "after": job.datetimes.deadline.isoformat()}
        )

    async def main() -> tuple[int, datetime | None]:
        async with client:
            row = await client.insert(Timed("wait"), deadline=30)
            await client.start({"default": 1}, processes=processes)
            try:
                await await_until(
                    lambda: row_of(dsn, row.id)["state"] == "waiting_external",
                    what="the handler to wait",
                )
                callback_id = str(row_of(dsn, row.id)["callback_id"])
                resumed = await client.resume_external(callback_id, {"go": True})
                await await_until(lambda: row_of(dsn, row.id)["state"] == "completed")
            finally:
                await client.shutdown()
            return row.id, resumed.datetimes.deadline  # the SDK's name for deadline_at

    job_id, resumed_deadline = run(main())
    row = row_of(dsn, job_id)
    before = datetime.fromisoformat(row["metadata"]["before"])
    after = datetime.fromisoformat(row["metadata"]["after"])
    assert before == row["attempted_at"] + timedelta(seconds=30)
    assert after == resumed_deadline
    assert after > before
