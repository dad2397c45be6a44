"""A mixed workload ends in exactly the predicted final states, with nothing left running."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import awa_fast
from awa_fast import TerminalError, WaitForCallback
from tests.helpers import run, run_until, states

COUNTS = {"complete": 40, "retry_once": 20, "terminal": 10, "callback_timeout": 5, "hang": 5}


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
                heartbeat_interval=0.1,
                rescue_interval=0.1,
                promote_interval=0.05,
                backoff=awa_fast.Backoff(base=0.05, jitter=0.1),
            )

    run(main())
    assert states(dsn) == {
        "completed": COUNTS["complete"] + COUNTS["retry_once"],
        "failed": COUNTS["terminal"] + COUNTS["callback_timeout"] + COUNTS["hang"],
    }
