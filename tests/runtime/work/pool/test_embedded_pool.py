"""``await client.start(processes=N)`` inside a program's own event loop — the standard
asyncio loop as well as uvloop — starts, runs and drains forked workers cleanly."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest
import uvloop

import awa_fast
from tests.helpers import await_until, run_until, settled, states

Run = Callable[[Coroutine[Any, Any, None]], None]


@dataclass
class Tick:
    n: int


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_start_with_processes_from_the_programs_own_loop(run: Run, dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Tick)
    async def tick(job: awa_fast.Job[Tick]) -> None:
        return None

    async def main() -> None:
        async with client:
            await client.insert_many([Tick(i) for i in range(500)])
            await run_until(client, {"default": 50}, lambda: settled(dsn), processes=2)

    run(main())
    assert states(dsn) == {"completed": 500}


@dataclass
class Crash:
    n: int


def test_an_attempt_lost_with_its_worker_fires_its_retried_event(dsn: str) -> None:
    """The supervisor reports a dead worker's attempts without knowing their kind; the
    committer still finds the kind's hooks (after the retry commits)."""
    client = awa_fast.AsyncClient(dsn)
    events: list[awa_fast.Event] = []

    @client.task(Crash)
    def crash(job: awa_fast.Job[Crash]) -> None:
        if job.attempt == 1:
            os._exit(1)

    client.on_event(Crash, events.append)

    async def main() -> None:
        async with client:
            [job_id] = await client.insert_many([Crash(1)])
            await run_until(
                client, {"default": 1}, lambda: states(dsn) == {"completed": 1}, processes=1
            )
            done = awa_fast.EventType.COMPLETED
            await await_until(lambda: any(e.type == done for e in events), what="Completed")
            outcomes = [e for e in events if e.type != awa_fast.EventType.STARTED]
            assert [(e.type, e.job.id) for e in outcomes] == [
                (awa_fast.EventType.RETRIED, job_id),
                (done, job_id),
            ]
            retried = outcomes[0]
            assert retried.error is not None and retried.error.endswith("exited with code 1")

    uvloop.run(main())
