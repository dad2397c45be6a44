"""A running client's Prometheus metrics and health endpoint on 127.0.0.1: real jobs, a
real Postgres, real HTTP over a socket; the port is closed again once the client shuts
down."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
import pytest

import awa_fast
from awa_fast.errors import ConfigError
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.metrics import METRICS, serve_metrics
from awa_fast.runtime.work.pool import EXIT_CAUSES
from awa_fast.telemetry.readings import Readings
from tests.factories import insert_job
from tests.helpers import (
    await_until,
    free_port,
    prometheus_samples,
    run,
    states,
    worker_exits,
)

N = 40
BY_NAME = {metric.name: metric for metric in METRICS}


@dataclass
class Ping:
    n: int


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


async def request(port: int, raw: bytes) -> Response:
    """Send ``raw`` and read the response until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    head, _, body = (await reader.read()).partition(b"\r\n\r\n")
    writer.close()
    await writer.wait_closed()
    status_line, *lines = head.decode("ascii").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    assert status_line.startswith("HTTP/1.0 ") and headers["Content-Length"] == str(len(body))
    return Response(int(status_line.split()[1]), headers, body)


async def get(port: int, path: str) -> Response:
    return await request(port, f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())


@pytest.mark.parametrize("processes", [None, 2])
def test_metrics_count_the_jobs_run_and_health_answers_until_shutdown(
    dsn: str, processes: int | None
) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Ping, queue="q")
    async def ping(job: awa_fast.Job[Ping]) -> None:
        pass

    port = free_port()

    async def main() -> None:
        async with client:
            await client.insert_many([Ping(n) for n in range(N)], queue="q")
            # No poll: once the last claims come back empty, none reserves capacity again.
            runner = await client.start(
                {"q": 8}, processes=processes, metrics_port=port, poll_interval=3600.0
            )
            await await_until(lambda: states(dsn) == {"completed": N}, what="N completions")
            assert await asyncio.to_thread(runner.committer.wait_committed, N, 30)
            await await_until(lambda: runner.maintenance.leader.is_leader, what="leadership")
            await await_until(lambda: runner.snapshot().in_flight == {"q": 0}, what="idle")

            metrics = await get(port, "/metrics")
            assert metrics.status == 200
            assert metrics.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            found = prometheus_samples(metrics.body.decode())
            assert found['awa_fast_jobs_claimed_total{queue="q"}'] == N
            assert found['awa_fast_outcomes_committed_total{outcome="completed"}'] == N
            others = [
                v
                for k, v in found.items()
                if k.startswith("awa_fast_outcomes_committed_total") and "completed" not in k
            ]
            assert len(others) == 8 and not any(others)
            assert found["awa_fast_outcomes_stale_total"] == 0
            assert found["awa_fast_commit_batches_total"] >= 1
            assert found['awa_fast_jobs_in_flight{queue="q"}'] == 0
            assert found['awa_fast_queue_concurrency{queue="q"}'] == 8
            assert found["awa_fast_worker_processes"] == (processes or 1)
            assert worker_exits(found) == dict.fromkeys(EXIT_CAUSES, 0)
            assert found["awa_fast_leader"] == 1
            age = found["awa_fast_heartbeat_age_seconds"]
            assert 0 <= age <= 2 * runner.config.heartbeat_interval

            health = await get(port, "/health")
            assert health.status == 200
            assert health.headers["Content-Type"] == "application/json"
            check = orjson.loads(health.body)
            assert check["healthy"] is True and check["running"] is True
            assert check["queues"] == {
                "q": {
                    "in_flight": 0,
                    "available": 0,
                    "max_workers": 8,
                    # the SDK's weighted-mode fields: none outside weighted mode
                    "min_workers": None,
                    "weight": None,
                    "overflow_held": None,
                }
            }

            await client.shutdown()
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection("127.0.0.1", port)

    run(main())


def _holding(dsn: str) -> tuple[awa_fast.AsyncClient, asyncio.Event]:
    """A client whose handlers of queue "q" run until the event is set."""
    client = awa_fast.AsyncClient(dsn)
    released = asyncio.Event()

    @client.task(Ping, queue="q")
    async def hold(job: awa_fast.Job[Ping]) -> None:
        await released.wait()

    return client, released


def test_health_says_503_while_draining_and_gauges_show_what_runs(dsn: str) -> None:
    client, released = _holding(dsn)
    port = free_port()

    async def main() -> None:
        async with client:
            await client.insert_many([Ping(n) for n in range(5)], queue="q")
            # Room for exactly the 5 jobs (3 run, 2 held): no claim can reserve free units
            # for a moment while the gauges are read.
            runner = await client.start({"q": 3}, metrics_port=port, prefetch=2)
            try:
                # Capacity is reserved before a claim runs and counted as claimed after
                # it returns: wait for both. 3 run; the other 2 are held, prefetched.
                await await_until(
                    lambda: (
                        runner.snapshot().in_flight == {"q": 5}
                        and runner.snapshot().prefetched == {"q": 2}
                        and runner.claimer.claimed_by_queue == [5]
                    ),
                    what="5 jobs claimed, 3 running",
                )
                found = prometheus_samples((await get(port, "/metrics")).body.decode())
                assert found['awa_fast_jobs_in_flight{queue="q"}'] == 5
                assert found['awa_fast_jobs_prefetched{queue="q"}'] == 2
                assert found['awa_fast_jobs_claimed_total{queue="q"}'] == 5

                stopping = asyncio.ensure_future(client.shutdown(timeout=30))
                await await_until(lambda: runner.stopping, what="shutdown under way")
                health = await get(port, "/health")
                assert health.status == 503
                check = orjson.loads(health.body)
                assert check["healthy"] is False and check["shutting_down"] is True
                assert check["queues"]["q"]["in_flight"] == 3
            finally:
                released.set()
            await stopping
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection("127.0.0.1", port)

    run(main())


def test_the_queues_depths_are_gauges_from_the_counts(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Every host's jobs by queue and state, as the database counts them, on /metrics and
    in the process's telemetry readings; a state with no job reads 0."""
    for state, queue in (("available", "idle"), ("available", "idle"), ("scheduled", "q")):
        insert_job(conn, queue=queue, state=state)
    insert_job(conn, queue="idle", state="retryable")
    conn.execute("UPDATE awa_fast.jobs_deferred SET run_at = now() + interval '1 day'")
    conn.execute(
        "INSERT INTO awa_fast.dlq (kind, queue, state, dlq_reason)"
        " VALUES ('k', 'idle', 'failed', 'x')"
    )
    client, released = _holding(dsn)
    port = free_port()
    expected = {
        "q": {"available": 0, "running": 3, "scheduled": 1, "retryable": 0},
        "idle": {"available": 2, "running": 0, "scheduled": 0, "retryable": 1},
    }
    expected["q"] |= {"waiting_external": 0, "dead_lettered": 0}
    expected["idle"] |= {"waiting_external": 0, "dead_lettered": 1}

    async def main() -> None:
        async with client:
            await client.insert_many([Ping(n) for n in range(3)], queue="q")
            await client.start({"q": 3}, metrics_port=port, prefetch=0)
            try:
                await await_until(lambda: states(dsn).get("running") == 3, what="3 running")
                found = prometheus_samples((await get(port, "/metrics")).body.decode())
                telemetry = Readings()
                telemetry.start()
                await asyncio.to_thread(telemetry.refresh)
                for queue, gauges in expected.items():
                    for name, n in gauges.items():
                        metric = f"awa_fast_queue_jobs_{name}"
                        assert found[f'{metric}{{queue="{queue}"}}'] == n, (metric, queue)
                        assert telemetry.read(BY_NAME[metric]).get(queue) == n, (metric, queue)
                telemetry.stop()
            finally:
                released.set()

    run(main())


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /nowhere HTTP/1.0\r\n\r\n", 404),
        (b"GET /metrics?x=1 HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n", 200),
        (b"GET /metrics HTTP/1.0\n\n", 200),  # bare newlines, as from printf | nc
        (b"POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n", 405),
        (b"hello\r\n\r\n", 400),
        (b"GET /metrics SMTP/1.0\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.0\r\nHost: loc", 400),  # ends inside its headers
        (b"GET /\xff HTTP/1.0\r\n\r\n", 400),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.0\r\n\r\n", 400),  # past the line limit
    ],
)
def test_requests_other_than_the_two_gets_are_refused(dsn: str, raw: bytes, status: int) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(kind="idle", queue="q")(lambda job: None)  # start() needs a handler
    port = free_port()

    async def main() -> None:
        async with client:
            await client.start({"q": 1}, metrics_port=port)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            writer.write_eof()
            response = await reader.read()
            writer.close()
            assert response.startswith(f"HTTP/1.0 {status} ".encode()), response[:80]

    run(main())


def test_a_silent_client_is_dropped_after_the_read_timeout(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(kind="idle", queue="q")(lambda job: None)  # start() needs a handler
    port = free_port()

    async def main() -> None:
        async with client:
            runner = await client.start({"q": 1})
            server = await serve_metrics(runner, port, read_timeout=0.2)
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                # Closed by the server unanswered: EOF, not a response (nor a hang).
                assert await asyncio.wait_for(reader.read(), 10) == b""
                writer.close()
            finally:
                server.close()
                await server.wait_closed()

    run(main())


@pytest.mark.parametrize("port", [0, -1, 65536, True, 9464.0, "9464"])
def test_a_bad_metrics_port_names_the_field(port: Any) -> None:
    with pytest.raises(ConfigError, match=r"metrics_port must be None or a port in 1\.\.65535"):
        RunnerConfig(metrics_port=port)


def test_a_port_in_use_refuses_to_start_with_nothing_left_running(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(kind="idle", queue="q")(lambda job: None)  # start() needs a handler

    async def main() -> None:
        async with client:
            with socket.socket() as taken:
                taken.bind(("127.0.0.1", 0))
                taken.listen()
                with pytest.raises(OSError):
                    await client.start({"q": 1}, metrics_port=taken.getsockname()[1])

    run(main())
    with psycopg.connect(dsn) as conn:  # no host registered: nothing had started
        assert conn.execute("SELECT count(*) FROM awa_fast.hosts").fetchone() == (0,)
