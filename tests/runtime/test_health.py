"""A client's health check: Postgres reachable or not, and a running client's claim loops,
heartbeat, shutdown and per-queue counts, as a readiness or liveness probe reads them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import awa_fast
from awa_fast.runtime.health import QueueHealth
from tests.helpers import await_until, run

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"


@dataclass
class Hold:
    n: int


def test_a_producer_is_healthy_while_postgres_answers(dsn: str) -> None:
    with awa_fast.Client(dsn) as client:
        check = client.health_check()
    assert check.healthy and check.postgres_connected
    assert not check.running and not check.poll_loop_alive and check.queues == {}
    with awa_fast.Client(UNREACHABLE) as client:
        check = client.health_check()
    assert not check.healthy and not check.postgres_connected


def test_a_running_client_reports_its_loops_and_queues_until_it_shuts_down(dsn: str) -> None:
    released = asyncio.Event()

    async def main() -> None:
        client = awa_fast.AsyncClient(dsn)

        @client.task(Hold, queue="q")
        async def hold(job: awa_fast.Job[Hold]) -> None:
            await released.wait()

        try:
            assert (await client.health_check()).running is False
            await client.insert_many([Hold(n) for n in range(5)], queue="q")
            runner = await client.start({"q": 3})

            async def three_held() -> bool:
                return (await client.health_check()).queues["q"].in_flight == 3

            await await_until(three_held, what="3 jobs in flight")
            check = await client.health_check()
            assert check.healthy and check.running
            assert check.poll_loop_alive and check.heartbeat_alive and not check.shutting_down
            assert check.queues == {"q": QueueHealth(in_flight=3, available=2, max_workers=3)}
            # A heartbeat that has not landed for two intervals is not alive.
            later = time.monotonic() + 2.5 * runner.config.heartbeat_interval
            assert not runner.heartbeat_alive(later)

            stopping = asyncio.ensure_future(client.shutdown(timeout=30))
            await await_until(lambda: runner.stopping, what="shutdown under way")
            check = await client.health_check()
            assert check.running and check.shutting_down and not check.healthy
            released.set()
            await stopping
            check = await client.health_check()
            assert check.healthy and not check.running and check.queues == {}
        finally:
            released.set()
            await client.close()

    run(main())
