"""``await client.start(processes=N)`` inside a program's own event loop — the standard
asyncio loop as well as uvloop — starts, runs and drains forked workers cleanly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest
import uvloop

import awa_fast
from tests.helpers import run_until, settled, states

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
