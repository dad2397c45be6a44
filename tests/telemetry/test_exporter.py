"""init_telemetry / shutdown_telemetry with real runners on a real Postgres, exporting
through the OpenTelemetry SDK to a real gRPC collector stand-in: what it gets while jobs
run and at shutdown, the SDK's call semantics, bad arguments, endpoints that fail while
jobs go on, and processes forked after init."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE

import awa_fast
from awa_fast import backpressure
from awa_fast.backpressure import Pressure
from awa_fast.errors import TelemetryError, ValidationError
from awa_fast.telemetry.otel import TIMEOUT
from tests.helpers import await_until, free_port, run, states
from tests.telemetry.collector import SDK_EXPORT, Collector, read_export

N = 12
CLAIMED = "awa_fast_jobs_claimed_total"
CONCURRENCY = "awa_fast_queue_concurrency"
EXPORTER_LOG = "opentelemetry.exporter.otlp.proto.grpc.exporter"

Requests = list[ExportMetricsServiceRequest]


@dataclass
class Ping:
    n: int


@pytest.fixture(autouse=True)
def telemetry_stopped(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test leaves telemetry running for the next, whatever became of it; and each
    starts in a process that has counted no backpressure (awa_fast.backpressure), whose
    counts telemetry exports with or without a runner."""
    monkeypatch.setattr(backpressure, "PRESSURE", Pressure())
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


def latest(numbers: Callable[[Any], bool]) -> Callable[[Requests], bool]:
    """A wait_for predicate: the latest export read by ``numbers`` holds."""
    return lambda requests: bool(requests) and numbers(read_export(requests[-1]))


async def exported(collector: Collector, numbers: Callable[[Any], bool]) -> Requests:
    """Wait, off this loop (its runners must go on), for an export ``numbers`` accepts."""
    return await asyncio.to_thread(collector.wait_for, latest(numbers))


def instances(requests: Requests) -> set[str]:
    """The service.instance.id of each export: the OpenTelemetry SDK gives every process
    its own (a forked child a new one)."""
    return {read_export(r).resource["service.instance.id"] for r in requests}


@pytest.mark.parametrize("processes", [None, 2])
def test_exports_carry_the_service_and_the_jobs_claimed(dsn: str, processes: int | None) -> None:
    client = pinging_client(dsn)

    async def main(collector: Collector) -> Requests:
        async with client:
            await client.insert_many([Ping(n) for n in range(N)], queue="q")
            await client.start({"q": 4}, processes=processes)
            return await exported(collector, lambda e: e.number(CLAIMED, queue="q") == N)

    with Collector() as collector:
        # Started before the client, as with the SDK: the workers fork with it running.
        assert awa_fast.init_telemetry(collector.endpoint, "billing", 50) is True
        requests = run(main(collector))
        awa_fast.shutdown_telemetry()  # its last export delivered too
    export = read_export(requests[-1])
    assert export.resource["service.name"] == "billing"
    assert export.scopes == ["awa_fast"]
    # Counters typed as the Awa SDK types its own (a cumulative monotonic sum).
    sdk = read_export(SDK_EXPORT.read_bytes())
    assert sdk.resource["service.name"] == "svc"
    assert export.shape(CLAIMED) == sdk.shape("awa.job.claimed")
    assert export.shape(CLAIMED) == ("sum", AGGREGATION_TEMPORALITY_CUMULATIVE, True)
    assert export.shape(CONCURRENCY)[0] == "gauge"
    assert export.number(CONCURRENCY, queue="q") == 4
    assert export.number("awa_fast_worker_processes") == (processes or 1)
    assert instances(requests) == {export.resource["service.instance.id"]}  # none a worker's


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
        awa_fast.shutdown_telemetry()  # no runner, nothing counted: nothing is sent
    export = read_export(request)
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
            == (claimed, concurrency)
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
        awa_fast.shutdown_telemetry()


def test_a_process_forked_after_init_exports_nothing(dsn: str) -> None:
    """What a pool worker (or any child) inherits: no export thread, and no telemetry of
    its own to shut down, while its parent's goes on exporting."""
    client = pinging_client(dsn)

    def in_the_child(endpoint: str) -> tuple[list[str], bool, float]:
        threads = sorted(thread.name for thread in threading.enumerate())
        fresh = awa_fast.init_telemetry(endpoint, "child", 3_600_000)  # off here: it starts
        started = time.monotonic()
        awa_fast.shutdown_telemetry()  # no runner runs here: nothing to send or wait for
        return threads, fresh, time.monotonic() - started

    async def main(collector: Collector) -> tuple[Any, Requests]:
        async with client:
            await client.insert_many([Ping(n) for n in range(N)], queue="q")
            await client.start({"q": 4})
            before = await exported(collector, lambda e: e.number(CLAIMED, queue="q") == N)
            child = forked(lambda: in_the_child(collector.endpoint))
            after = await asyncio.to_thread(
                collector.wait_for, lambda requests: len(requests) > len(before) + 1
            )
            return child, after

    with Collector() as collector:
        awa_fast.init_telemetry(collector.endpoint, "svc", 20)
        child, requests = run(main(collector))
        awa_fast.shutdown_telemetry()
    threads, fresh, took = child
    assert threads == ["MainThread"]
    assert fresh is True
    assert took < 0.5
    assert len(instances(requests)) == 1  # the parent's alone
    assert {read_export(r).resource["service.name"] for r in collector.requests} == {"svc"}


def forked(check: Callable[[], object]) -> Any:
    """``check()`` (as JSON carries it), run in a process forked now, which then exits as
    pool workers do, with os._exit."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            os.write(write, json.dumps(check()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        out = pipe.read()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    return json.loads(out)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", "svc"), "endpoint"),
        ((None, "svc"), "endpoint"),
        (("localhost:4317", "svc"), "endpoint"),
        (("ftp://collector:4317", "svc"), "endpoint"),
        (("http://", "svc"), "endpoint"),
        (("http://collector:port", "svc"), "endpoint"),
        (("http://[::1", "svc"), "endpoint"),
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


def python(script: str) -> str:
    """What ``script`` prints, run by a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def test_importing_awa_fast_loads_no_opentelemetry() -> None:
    loaded = python(
        "import sys, awa_fast\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('opentelemetry', 'grpc')))"
    )
    assert loaded.strip() == "[]"


def test_without_the_otel_extra_init_telemetry_names_it() -> None:
    said = python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if not installed\n"
        "import awa_fast\n"
        "try:\n"
        "    awa_fast.init_telemetry('http://127.0.0.1:4317', 'svc')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    assert said.startswith("init_telemetry needs the OpenTelemetry SDK")
    assert "pip install 'awa-fast[otel]'" in said


def exporter_failures(caplog: pytest.LogCaptureFixture, port: int) -> list[logging.LogRecord]:
    """What the OpenTelemetry exporter logged about failing to export to ``port``."""
    return [
        r
        for r in caplog.records
        if r.name == EXPORTER_LOG and f"127.0.0.1:{port}" in r.getMessage()
    ]


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
            # Exports failed meanwhile. (The exporter logs a repeated line once in 20 s,
            # the window another test's may still hold.)
            await await_until(lambda: exporter_failures(caplog, port), timeout=60)

    assert awa_fast.init_telemetry(f"http://127.0.0.1:{port}", "svc", 20) is True
    run(main())
    assert states(dsn) == {"completed": N}
    started = time.monotonic()
    with pytest.raises(TelemetryError, match=f"last export to http://127.0.0.1:{port}") as raised:
        awa_fast.shutdown_telemetry()
    assert time.monotonic() - started < 2 * TIMEOUT + 1  # an export under way, then the last
    assert isinstance(raised.value, RuntimeError)  # what the SDK raises, for ported code
    awa_fast.shutdown_telemetry()  # stopped all the same


def test_failed_exports_are_logged_once_in_20_seconds_at_most(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A collector that rejects every export: many fail, a line or two says so. The
    OpenTelemetry exporter drops a repeat of one message within a 20 s window, so the ten or
    more failures here log once, or twice when they straddle a window's end; one line per
    failure (no rate limit) or none (failures swallowed) fails the test."""
    client = pinging_client(dsn)

    async def main(collector: Collector) -> None:
        async with client:
            await client.insert_many([Ping(n) for n in range(N)], queue="q")
            await client.start({"q": 4})
            await await_until(completed(dsn, N))
            await asyncio.to_thread(collector.wait_for, lambda requests: len(requests) >= 10)
            await await_until(lambda: exporter_failures(caplog, collector.port), timeout=60)

    with Collector(reject=grpc.StatusCode.PERMISSION_DENIED) as collector:
        awa_fast.init_telemetry(collector.endpoint, "svc", 20)
        run(main(collector))
        failures = exporter_failures(caplog, collector.port)
        rejected = len(collector.requests)
        with pytest.raises(TelemetryError):
            awa_fast.shutdown_telemetry()  # the last export is rejected too
    assert states(dsn) == {"completed": N}
    assert rejected >= 10
    # Fails both ways: no line (failures swallowed) is 0, a line per failure is >= 10; two
    # lines only when the failures straddled the exporter's 20 s window.
    assert 1 <= len(failures) <= 2, [r.getMessage() for r in failures]
    assert len(failures) < rejected  # fewer lines than failed exports: rate-limited
    assert {r.levelno for r in failures} == {logging.ERROR}
    assert "PERMISSION_DENIED" in failures[0].getMessage()


def test_a_process_that_only_produces_exports_its_backpressure(dsn: str) -> None:
    """A bulk loader runs no runner: what its inserts' checks found is exported all the
    same."""
    with Collector() as collector:
        awa_fast.init_telemetry(collector.endpoint, "loader", 3_600_000)
        with awa_fast.Client(dsn) as producer:
            producer.insert(Ping(0), queue="bp", max_queue_depth=1)  # at its limit: a signal
            with pytest.raises(awa_fast.QueueFull):
                producer.insert(Ping(1), queue="bp", max_queue_depth=1)
        awa_fast.shutdown_telemetry()
    (request,) = collector.requests
    export = read_export(request)
    assert export.number("awa_fast_inserts_backpressure_refused_total", queue="bp") == 1
    assert export.number("awa_fast_inserts_backpressure_signalled_total", queue="bp") == 2
    assert CLAIMED not in export.metrics
