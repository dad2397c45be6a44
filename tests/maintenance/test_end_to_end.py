"""Maintenance end to end, under a running client: a mixed workload ends in exactly the
predicted final states with nothing left running, a handler hanging past its deadline is
rescued and retried, and a scheduled job is promoted within one interval."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import awa_fast
from awa_fast import TerminalError, WaitForCallback
from tests.helpers import await_until, job, run, run_until, settled, states

COUNTS = {"complete": 40, "retry_once": 20, "terminal": 10, "callback_timeout": 5, "hang": 5}
FAST = {"heartbeat_interval": 0.1, "rescue_interval": 0.1, "promote_interval": 0.05}


@dataclass
class Work:
    do: str


def test_mixed_workload_ends_in_exact_counts(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Work)
    async def work(job: awa_fast.Job[Work]) -> Any:
        match job.args.do:
            case "retry_once" if job.attempt == 1:
                raise RuntimeError("transient")
            case "terminal":
                raise TerminalError("permanent")
            case "callback_timeout":
                return WaitForCallback(await job.register_callback(timeout_seconds=0.3))
            case "hang":
                await asyncio.sleep(3600)
        return None

    def finished() -> bool:
        counts = states(dsn)
        return sum(counts.get(s, 0) for s in ("completed", "failed")) == sum(COUNTS.values())

    async def main() -> None:
        async with client:
            await client.insert_many(
                [Work(do) for do, n in COUNTS.items() for _ in range(n)], max_attempts=3
            )
            await run_until(
                client,
                {"default": 20},
                finished,
                timeout=60,
                deadline=0.5,
                deadline_grace=0.2,
                backoff=awa_fast.Backoff(base=0.05, jitter=0.1),
                **FAST,
            )

    run(main())
    assert states(dsn) == {
        "completed": COUNTS["complete"] + COUNTS["retry_once"],
        "failed": COUNTS["terminal"] + COUNTS["callback_timeout"] + COUNTS["hang"],
    }


def test_handler_hanging_past_its_deadline_is_cancelled_and_retried(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Work)
    async def work(job: awa_fast.Job[Work]) -> None:
        if job.attempt == 1:
            await asyncio.sleep(3600)  # hangs, ignoring its cancel flag

    async def main() -> int:
        async with client:
            row = await client.insert(Work("hang"))
            await run_until(
                client,
                {"default": 1},
                lambda: job(dsn, row.id)["state"] == "completed",
                timeout=30,
                deadline=0.5,
                deadline_grace=0.3,
                backoff=awa_fast.Backoff(0.05),
                **FAST,
            )
            return row.id

    final = job(dsn, run(main()))
    assert final["attempt"] == 2
    assert final["errors"][0]["error"].startswith("deadline exceeded"), final["errors"]


def test_scheduled_jobs_run_within_one_promotion_interval(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(Work)(lambda job: None)
    interval = 0.2

    async def main() -> int:
        async with client:
            await client.start({"default": 5}, promote_interval=interval)
            when = datetime.now(UTC) + timedelta(seconds=1)
            row = await client.insert(Work("later"), run_at=when)
            assert row.state == "scheduled"
            await await_until(lambda: settled(dsn) and "scheduled" not in states(dsn))
            await client.shutdown()
            return row.id

    final = job(dsn, run(main()))
    delay = (final["attempted_at"] - final["run_at"]).total_seconds()
    assert 0 <= delay <= interval + 0.3, delay
