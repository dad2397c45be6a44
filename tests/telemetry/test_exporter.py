"""init_telemetry / shutdown_telemetry with real runners on a real Postgres: what a local
OTLP/gRPC receiver gets while jobs run and at shutdown, the SDK's call semantics, bad
arguments, and endpoints that fail while jobs go on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import awa_fast
from awa_fast.errors import TelemetryError, ValidationError
from awa_fast.telemetry.otlp import EXPORT_PATH
from tests.helpers import await_until, free_port, run, states
from tests.telemetry.collector import Collector, Request, read_export

N = 12
CLAIMED = "awa_fast_jobs_claimed_total"
CONCURRENCY = "awa_fast_queue_concurrency"


@dataclass
class Ping:
    n: int


@pytest.fixture(autouse=True)
def telemetry_stopped() -> Iterator[None]:
    """No test leaves telemetry running for the next, whatever became of it."""
    yield
    with contextlib.suppress(TelemetryError):
        awa_fast.shutdown_telemetry()


def pinging_client(dsn: str) -> awa_fast.AsyncClient:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Ping, queue="q")
    async def ping(job: awa_fast.Job[Ping]) -> None:
        pass

    return client


def completed(dsn: str, n: int) -> Callable[[], bool]:
    return lambda: states(dsn).get("completed", 0) == n


def latest(numbers: Callable[[Any], bool]) -> Callable[[list[Request]], bool]:
    """A wait_for predicate: the latest export read by ``numbers`` holds."""
    return lambda requests: bool(requests) and numbers(read_export(requests[-1].message))


async def exported(collector: Collector, numbers: Callable[[Any], bool]) -> list[Request]:
    """Wait, off this loop (its runners must go on), for an export ``numbers`` accepts."""
    return await asyncio.to_thread(collector.wait_for, latest(numbers))


@pytest.mark.parametrize("processes", [None, 2])
def test_exports_carry_the_service_and_the_jobs_claimed(dsn: str, processes: int | None) -> None:
    client = pinging_client(dsn)

    async def main(collector: Collector) -> list[Request]:
        async with client:
            await client.insert_many([Ping(n) for n in range(N)], queue="q")
            await client.start({"q": 4}, processes=processes)
            return await exported(collector, lambda e: e.number(CLAIMED, queue="q") == N)

    with Collector() as collector:
        # Started before the client, as with the SDK: the workers fork with its thread alive.
        assert awa_fast.init_telemetry(collector.endpoint, "billing", 50) is True
        requests = run(main(collector))
    export = read_export(requests[-1].message)
    assert export.resource["service.name"] == "billing"
    claimed = export.metrics[CLAIMED]
    assert (claimed.kind, claimed.temporality, claimed.monotonic) == ("sum", 2, True)
    assert export.metrics["awa_fast_queue_concurrency"].kind == "gauge"
    assert export.number("awa_fast_queue_concurrency", queue="q") == 4
    assert export.number("awa_fast_worker_processes") == (processes or 1)
    assert {(r.headers[":path"], r.headers["content-type"]) for r in requests} == {
        (EXPORT_PATH, "application/grpc")
    }


def test_shutdown_sends_a_final_export_and_init_twice_keeps_the_first(dsn: str) -> None:
    client = pinging_client(dsn)

    async def main() -> None:
        async with client:
            await client.insert_many([Ping(n) for n in range(N)], queue="q")
            await client.start({"q": 4})
            await await_until(completed(dsn, N))

    with Collector() as first, Collector() as second:
        assert awa_fast.init_telemetry(first.endpoint, "first", 3_600_000) is True
        assert awa_fast.init_telemetry(second.endpoint, "second", 50) is False  # as the SDK
        run(main())  # the client has stopped: its final counts wait for the next export
        assert first.requests == []
        awa_fast.shutdown_telemetry()
        (request,) = first.requests  # sent before shutdown_telemetry returned
        awa_fast.shutdown_telemetry()  # stopped already: nothing to do
        assert awa_fast.init_telemetry(second.endpoint, "second", 50) is True
        awa_fast.shutdown_telemetry()  # no runner, no numbers: nothing is sent
    export = read_export(request.message)
    assert export.resource["service.name"] == "first"
    assert export.number(CLAIMED, queue="q") == N
    assert export.number("awa_fast_outcomes_committed_total", outcome="completed") == N
    assert "awa_fast_jobs_in_flight" not in export.metrics  # gauges: running runners only
    assert second.requests == []


def test_the_process_counts_all_its_runners_and_keeps_the_counts_of_stopped_ones(
    dsn: str,
) -> None:
    a, b = pinging_client(dsn), pinging_client(dsn)

    def numbers(claimed: int, concurrency: int) -> Callable[[Any], bool]:
        return lambda e: (
            (e.number(CLAIMED, queue="q"), e.number(CONCURRENCY, queue="q"))
            == (
                claimed,
                concurrency,
            )
        )

    async def main(collector: Collector) -> None:
        async with a, b:
            await a.insert_many([Ping(n) for n in range(N)], queue="q")
            await a.start({"q": 2})
            await b.start({"q": 3})
            await await_until(completed(dsn, N))
            await exported(collector, numbers(N, 5))
            await a.shutdown()
            await b.insert_many([Ping(n) for n in range(N)], queue="q")
            await await_until(completed(dsn, 2 * N))
            await exported(collector, numbers(2 * N, 3))

    with Collector() as collector:
        awa_fast.init_telemetry(collector.endpoint, "svc", 50)
        run(main(collector))


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", "svc"), "endpoint"),
        ((None, "svc"), "endpoint"),
        (("localhost:4317", "svc"), "endpoint"),
        (("ftp://collector:4317", "svc"), "endpoint"),
        (("http://", "svc"), "endpoint"),
        (("http://collector:port", "svc"), "endpoint"),
        (("http://collector:4317", ""), "service_name"),
        (("http://collector:4317", 5), "service_name"),
        (("http://collector:4317", "svc", 0), "export_interval_ms"),
        (("http://collector:4317", "svc", -5), "export_interval_ms"),
        (("http://collector:4317", "svc", 1.5), "export_interval_ms"),
        (("http://collector:4317", "svc", True), "export_interval_ms"),
    ],
)
def test_bad_arguments_raise_naming_them(args: tuple[Any, ...], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        awa_fast.init_telemetry(*args)
    assert raised.value.field == field
    assert awa_fast.init_telemetry("http://collector:4317", "svc") is True  # nothing started


def test_a_refused_endpoint_does_not_disturb_the_jobs(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = pinging_client(dsn)
    port = free_port()  # nothing listens there

    async def main() -> None:
        async with client:
            await client.insert_many([Ping(n) for n in range(N)], queue="q")
            await client.start({"q": 4})
            await await_until(completed(dsn, N))
            await await_until(lambda: failures(caplog, port))

    assert awa_fast.init_telemetry(f"http://127.0.0.1:{port}", "svc", 20) is True
    run(main())
    assert states(dsn) == {"completed": N}
    with pytest.raises(TelemetryError, match=r"telemetry shutdown failed: .*Refused") as raised:
        awa_fast.shutdown_telemetry()
    assert isinstance(raised.value, RuntimeError)  # what the SDK raises, for ported code
    awa_fast.shutdown_telemetry()  # stopped all the same


def failures(caplog: pytest.LogCaptureFixture, port: int) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "awa_fast.telemetry" and f"export to 127.0.0.1:{port} failed" in r.message
    ]


def test_failures_are_logged_once_a_minute_at_most(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An endpoint that hangs up on every export: many fail, one line says so."""
    client = pinging_client(dsn)
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    hung_up = threading.Semaphore(0)

    def hang_up() -> None:
        with contextlib.suppress(OSError):
            while True:
                listener.accept()[0].close()
                hung_up.release()

    threading.Thread(target=hang_up, daemon=True).start()

    async def main() -> None:
        async with client:
            await client.insert_many([Ping(n) for n in range(N)], queue="q")
            await client.start({"q": 4})
            await await_until(completed(dsn, N))
            for _ in range(5):
                assert await asyncio.to_thread(hung_up.acquire, timeout=30)

    awa_fast.init_telemetry(f"http://127.0.0.1:{port}", "svc", 20)
    try:
        run(main())
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
    (record,) = failures(caplog, port)
    assert record.levelno == logging.WARNING
    assert "failed (1 failed since the last report)" in record.message  # the first one
    assert states(dsn) == {"completed": N}
