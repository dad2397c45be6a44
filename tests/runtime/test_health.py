"""A client's health check: Postgres reachable or not, and a running client's claim loops,
heartbeat, shutdown and per-queue counts, as a readiness or liveness probe reads them. The
values are the Awa SDK's (awa-pg 0.6.9, probed): healthy only while handlers run."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import awa_fast
from awa_fast.runtime import health
from awa_fast.runtime.health import HealthCheck, QueueHealth
from tests.helpers import await_until, run

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"


@dataclass
class Hold:
    n: int


def idle(*, postgres_connected: bool) -> HealthCheck:
    """What the SDK reports for a client that runs no handlers: never started, shut down."""
    return HealthCheck(
        postgres_connected=postgres_connected,
        running=False,
        poll_loop_alive=False,
        heartbeat_alive=False,
        shutting_down=False,
        leader=False,
        queues={},
    )


def test_a_producer_is_not_healthy_and_says_whether_postgres_answers(dsn: str) -> None:
    with awa_fast.Client(dsn) as client:
        check = client.health_check()
    assert check == idle(postgres_connected=True) and check.healthy is False
    with awa_fast.Client(UNREACHABLE) as client:
        check = client.health_check()
    assert check == idle(postgres_connected=False) and check.healthy is False

    async def never_started() -> HealthCheck:
        async with awa_fast.AsyncClient(dsn) as client:
            return await client.health_check()

    check = run(never_started())
    assert check == idle(postgres_connected=True) and check.healthy is False


def test_the_sdk_weighted_queue_fields_are_none() -> None:
    queue = QueueHealth(in_flight=1, available=2, max_workers=3)
    assert (queue.min_workers, queue.weight, queue.overflow_held) == (None, None, None)


def test_a_running_client_reports_its_loops_and_queues_until_it_shuts_down(dsn: str) -> None:
    released = asyncio.Event()

    async def main() -> None:
        client = awa_fast.AsyncClient(dsn)

        @client.task(Hold, queue="q")
        async def hold(job: awa_fast.Job[Hold]) -> None:
            await released.wait()

        try:
            assert await client.health_check() == idle(postgres_connected=True)
            await client.insert_many([Hold(n) for n in range(5)], queue="q")
            runner = await client.start({"q": 3})

            # 3 run; the other 2 are held by the worker, claimed ahead (not available).
            three_running = {"q": QueueHealth(in_flight=3, available=0, max_workers=3)}

            async def three_held() -> bool:
                return (await client.health_check()).queues == three_running

            await await_until(three_held, what="3 jobs running, 2 held")
            # Units a claim round reserves while it runs are not running attempts. The
            # claimer's own round may hold the free units for a moment: take them after.
            taken: list[int] = []

            def reserve_some() -> bool:
                taken.append(runner.inflight.reserve(0, 4))
                return taken[-1] > 0

            await await_until(reserve_some, what="free units to reserve")
            reserved = taken[-1]
            try:
                assert (await client.health_check()).queues == three_running
            finally:
                runner.inflight.release(0, reserved)
            await await_until(lambda: runner.maintenance.leader.is_leader, what="leadership")
            check = await client.health_check()
            assert check.healthy and check.running
            assert check.poll_loop_alive and check.heartbeat_alive and not check.shutting_down
            assert check.leader
            # A heartbeat that has not landed for two intervals is not alive.
            later = time.monotonic() + 2.5 * runner.config.heartbeat_interval
            assert not runner.heartbeat.alive(later)

            stopping = asyncio.ensure_future(client.shutdown(timeout=30))
            await await_until(lambda: runner.stopping, what="shutdown under way")
            check = await client.health_check()
            assert check.running and check.shutting_down and not check.healthy
            released.set()
            await stopping
            check = await client.health_check()
            assert check == idle(postgres_connected=True) and check.healthy is False
            # Probed through the runner itself (as /health does), a stopped runner is not
            # healthy either.
            assert (await health.probe(dsn, runner)).healthy is False

            # Started again, it is healthy again.
            released.clear()
            await client.start({"q": 1})
            await await_until(lambda: healthy(client), what="healthy after a restart")
        finally:
            released.set()
            await client.close()

    run(main())


async def healthy(client: awa_fast.AsyncClient) -> bool:
    return (await client.health_check()).healthy
