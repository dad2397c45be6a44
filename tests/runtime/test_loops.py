"""Every long-lived loop of a runner is supervised (awa_fast.runtime.loops): one that
ends by an exception is logged, reported down by the health check while it waits for its
restart, and started again; once it runs, the client is healthy and works again."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import awa_fast
from awa_fast.runtime.runner import Runner
from tests.helpers import await_until, job, run


@dataclass
class Tick:
    n: int


class Fault:
    """While on, the methods patched raise instead of running (each loop here calls one
    on every pass, so that it fails again at each restart until the fault is off)."""

    def __init__(self, targets: list[tuple[Any, str]]) -> None:
        self.on = True
        for owner, name in targets:
            setattr(owner, name, self._faulty(getattr(owner, name), name))

    def _faulty(self, real: Callable[..., Any], name: str) -> Callable[..., Any]:
        def check() -> None:
            if self.on:
                raise RuntimeError(f"injected into {name}")

        if not inspect.iscoroutinefunction(real):

            def faulty(*args: Any, **kwargs: Any) -> Any:
                check()
                return real(*args, **kwargs)

            return faulty

        async def faulty_async(*args: Any, **kwargs: Any) -> Any:
            check()
            return await real(*args, **kwargs)

        return faulty_async


LOOPS: dict[str, Callable[[Runner], list[tuple[Any, str]]]] = {
    "heartbeat": lambda runner: [(runner.heartbeat, "refresh_descriptors")],
    "claimer": lambda runner: [(runner.claimer, "claim_round")],
    # a note fails it first; its restart then fails at once, as it listens again
    "listener": lambda runner: [(runner.listener, "heard"), (runner.claimer.packs, "heard")],
    "maintenance": lambda runner: [(runner.maintenance.leader, "check")],
    # called once outcomes are drained: a failed batch is logged inside the loop instead
    "committer": lambda runner: [(runner.committer, "_on_drain")],
}


async def healthy(client: awa_fast.AsyncClient) -> bool:
    return (await client.health_check()).healthy


async def down(client: awa_fast.AsyncClient, loop: str) -> bool:
    """``loop`` is reported down (a claimer by its number), and the client unhealthy."""
    check = await client.health_check()
    return any(name.split()[0] == loop for name in check.loops_down) and not check.healthy


@pytest.mark.parametrize("loop", list(LOOPS))
def test_a_loop_that_fails_is_logged_reported_down_and_restarted(
    dsn: str, caplog: pytest.LogCaptureFixture, loop: str
) -> None:
    """A job inserted while the fault is on (news for the claimers and the listener, an
    outcome for the committer) completes once it is off, with no poll to find it."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Tick)(lambda job: None)

    async def main() -> Runner:
        async with client:
            runner = await client.start(
                {"default": 2}, poll_interval=3600.0, heartbeat_interval=0.2, standby=False
            )
            await await_until(lambda: healthy(client), what="healthy at start")
            fault = Fault(LOOPS[loop](runner))
            during = await client.insert(Tick(1))
            await await_until(lambda: down(client, loop), what=f"the {loop} down")
            fault.on = False
            await await_until(lambda: healthy(client), what="healthy again")
            await await_until(
                lambda: job(dsn, during.id)["state"] == "completed",
                what=f"job {during.id} completed",
                explain=lambda: (job(dsn, during.id)["state"], vars(runner.claimer)),
            )
            await client.shutdown()
            return runner

    runner = run(main())
    assert sum(n for name, n in runner.loops.restarts.items() if name.startswith(loop))
    failures = [
        record
        for record in caplog.records
        if record.levelno == logging.ERROR and record.getMessage().split()[0] == loop
    ]
    assert failures and "ended by an exception" in failures[0].getMessage()
    assert failures[0].exc_info is not None
    assert str(failures[0].exc_info[1]).startswith("injected into")
