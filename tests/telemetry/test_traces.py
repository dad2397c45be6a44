"""Traces across the queue, with the OpenTelemetry SDK's in-memory exporter and real
runners on a real Postgres: the producer span of an insert, the context the job stores,
the consumer span of each attempt (a child of it on the first, a new trace linked to it
on a retry), a caller's own context, traces turned off, and no OpenTelemetry at all."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import awa_fast
from awa_fast import tracing
from awa_fast.errors import ConfigError, ConfigTypeError
from awa_fast.tracing.otel import stamped
from tests.helpers import await_until, run, states
from tests.telemetry.spans import installed, named, reset_tracer_provider, traceparent

ROOT = Path(__file__).resolve().parents[2]
FAST = {"promote_interval": 0.02, "backoff": awa_fast.Backoff(base=0.01, jitter=0.0)}
# A W3C context of no span here: what a caller that propagates its own stores.
CALLERS = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass
class Ping:
    n: int


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with installed() as exporter:
        yield exporter


@dataclass
class Seen:
    """What a handler saw of its own trace: the span current while it ran, and the job's
    stored context."""

    current: list[int]
    traceparents: list[str | None]


def traced_client(
    dsn: str, *, sync: bool = False, fail_first: bool = False, **options: Any
) -> tuple[awa_fast.AsyncClient, Seen]:
    """A client with a handler on queue "q" that records what it sees, and raises on its
    first attempt when ``fail_first``."""
    client = awa_fast.AsyncClient(dsn, **options)
    seen = Seen([], [])

    def handle(job: awa_fast.Job[Ping]) -> None:
        seen.current.append(trace.get_current_span().get_span_context().span_id)
        seen.traceparents.append(job.traceparent)
        if fail_first and job.attempt == 1:
            raise ValueError("first attempt fails")

    if sync:
        client.task(Ping, queue="q")(handle)
    else:

        async def handle_async(job: awa_fast.Job[Ping]) -> None:
            handle(job)

        client.task(Ping, queue="q")(handle_async)
    return client, seen


async def drain(client: awa_fast.AsyncClient, dsn: str, done: dict[str, int]) -> None:
    """Run ``client``'s handlers until the jobs' states are ``done``."""
    await client.start({"q": 2}, **FAST)
    try:
        await await_until(lambda: states(dsn) == done, what=f"states {done}")
    finally:
        await client.shutdown()


def only(spans: list[ReadableSpan]) -> ReadableSpan:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_the_first_attempt_is_a_child_of_the_producer_span(
    dsn: str, spans: InMemorySpanExporter, sync: bool
) -> None:
    client, seen = traced_client(dsn, sync=sync)
    tracer = trace.get_tracer("checkout")

    async def main() -> awa_fast.JobRow:
        async with client:
            with tracer.start_as_current_span("request"):
                row = await client.insert(Ping(1), queue="q")
            await drain(client, dsn, {"completed": 1})
            return row

    row = run(main())
    request, send = only(named(spans, "request")), only(named(spans, "send q"))
    process = only(named(spans, "process q"))
    assert send.kind == SpanKind.PRODUCER and process.kind == SpanKind.CONSUMER
    assert send.parent is not None and send.parent.span_id == request.context.span_id
    assert send.attributes == {
        "messaging.system": "awa-fast",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "q",
        "messaging.message.id": str(row.id),
    }
    # The job stores the producer span's context; its handler's span continues it.
    assert row.metadata == {"awa:traceparent": traceparent(send)}
    assert seen.traceparents == [traceparent(send)]
    assert process.context.trace_id == send.context.trace_id == request.context.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert process.parent.is_remote and not process.links
    assert process.attributes == {
        "messaging.system": "awa-fast",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "q",
        "messaging.message.id": str(row.id),
        "awa_fast.job.kind": "ping",
        "awa_fast.job.attempt": 1,
    }
    assert process.status.status_code == StatusCode.UNSET
    # Current while the handler ran (in its thread, for a sync one): what it traces nests.
    assert seen.current == [process.context.span_id]


def test_a_retry_starts_a_new_trace_linked_to_the_producer_span(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    client, _ = traced_client(dsn, fail_first=True)

    async def main() -> None:
        async with client:
            await client.insert(Ping(1), queue="q")
            await drain(client, dsn, {"completed": 1})

    run(main())
    send = only(named(spans, "send q"))
    first, second = named(spans, "process q")
    attempts = [span.attributes["awa_fast.job.attempt"] for span in (first, second)]  # type: ignore[index]
    assert attempts == [1, 2]
    assert first.context.trace_id == send.context.trace_id
    assert first.status.status_code == StatusCode.ERROR
    [event] = first.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "first attempt fails"
    # The retry: a trace of its own, no parent, a link back to where the job was sent.
    assert second.context.trace_id != send.context.trace_id
    assert second.parent is None
    [link] = second.links
    assert (link.context.trace_id, link.context.span_id) == (
        send.context.trace_id,
        send.context.span_id,
    )
    assert second.status.status_code == StatusCode.UNSET


def test_a_callers_own_traceparent_wins(dsn: str, spans: InMemorySpanExporter) -> None:
    client, seen = traced_client(dsn)

    async def main() -> awa_fast.JobRow:
        async with client:
            row = await client.insert(
                Ping(1), queue="q", metadata={"awa:traceparent": CALLERS, "team": "a"}
            )
            await drain(client, dsn, {"completed": 1})
            return row

    row = run(main())
    assert row.metadata == {"awa:traceparent": CALLERS, "team": "a"}
    assert len(named(spans, "send q")) == 1  # sent all the same
    process = only(named(spans, "process q"))
    assert process.parent is not None
    assert f"{process.parent.trace_id:032x}" == CALLERS.split("-")[1]
    assert f"{process.parent.span_id:016x}" == CALLERS.split("-")[2]
    assert seen.traceparents == [CALLERS]


def test_a_stored_context_that_is_not_w3c_starts_a_trace_of_its_own(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    client, seen = traced_client(dsn)

    async def main() -> None:
        async with client:
            await client.insert(Ping(1), queue="q", metadata={"awa:traceparent": "not-one"})
            await drain(client, dsn, {"completed": 1})

    run(main())
    process = only(named(spans, "process q"))
    assert process.parent is None and not process.links
    assert seen.traceparents == ["not-one"]


def test_a_batch_is_one_producer_span_whose_context_every_job_carries(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    """The uniform batch (one statement), the COPY path (mixed queues) and a transaction's
    inserts each send in a span of their own."""
    client = awa_fast.AsyncClient(dsn)

    async def main() -> tuple[list[int], list[int], awa_fast.JobRow]:
        async with client:
            uniform = await client.insert_many([Ping(n) for n in range(3)], queue="q")
            mixed = await client.insert_many(
                [
                    awa_fast.InsertRequest(Ping(1), queue="a"),
                    awa_fast.InsertRequest(Ping(2), queue="b"),
                ]
            )
            async with await client.transaction() as tx:
                in_tx = await tx.insert(Ping(9), queue="q")
            return uniform, mixed, in_tx

    uniform, mixed, in_tx = run(main())
    batch, one = named(spans, "send q")
    assert batch.attributes is not None and one.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in batch.attributes
    assert one.attributes["messaging.message.id"] == str(in_tx.id)
    both = only(named(spans, "send"))  # two queues: no one destination to name
    assert both.attributes is not None
    assert "messaging.destination.name" not in both.attributes
    assert both.attributes["messaging.batch.message_count"] == 2
    stored = {job.id: job.metadata.get("awa:traceparent") for job in jobs(dsn)}
    assert {stored[i] for i in uniform} == {traceparent(batch)}
    assert {stored[i] for i in mixed} == {traceparent(both)}
    assert stored[in_tx.id] == traceparent(one)


def jobs(dsn: str) -> list[awa_fast.JobRow]:
    with awa_fast.Client(dsn) as client:
        return client.list_jobs(limit=1000)


def test_traces_off_for_a_client_make_no_span_and_no_key(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    client, seen = traced_client(dsn, traces=False)

    async def main() -> None:
        async with client:
            await client.insert(Ping(1), queue="q")
            await client.insert_many([Ping(2), Ping(3)], queue="q")
            async with await client.transaction() as tx:
                await tx.insert(Ping(4), queue="q")
            await drain(client, dsn, {"completed": 4})

    run(main())
    assert spans.get_finished_spans() == ()
    assert [job.metadata for job in jobs(dsn)] == [{}] * 4
    assert seen.traceparents == [None] * 4


def test_traces_off_for_a_runner_make_no_consumer_span(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    client, _ = traced_client(dsn)

    async def main() -> None:
        async with client:
            await client.insert(Ping(1), queue="q")
            await client.start({"q": 1}, traces=False)
            await await_until(lambda: states(dsn) == {"completed": 1})
            await client.shutdown()

    run(main())
    assert [span.name for span in spans.get_finished_spans()] == ["send q"]


def test_without_a_provider_an_insert_stores_no_key(dsn: str) -> None:
    """The trace API imported (this process has it), no SDK provider set: no key, and
    nothing to run the handler in."""
    reset_tracer_provider()
    assert tracing.active() is None
    client, seen = traced_client(dsn)

    async def main() -> awa_fast.JobRow:
        async with client:
            row = await client.insert(Ping(1), queue="q")
            await drain(client, dsn, {"completed": 1})
            return row

    assert run(main()).metadata == {}
    assert seen.current == [trace.INVALID_SPAN_ID]


def python(code: str, dsn: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DSN": dsn, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_opentelemetry_awa_fast_never_loads_it_and_stores_no_key(dsn: str) -> None:
    """OpenTelemetry not importable at all (blocked here as an uninstalled package is)."""
    done = python(
        """
        import os, sys
        sys.modules["opentelemetry"] = None  # as if not installed
        import awa_fast
        with awa_fast.Client(os.environ["DSN"]) as client:
            row = client.insert({"n": 1}, kind="ping", queue="q")
            assert row.metadata == {}, row.metadata
            assert client.insert_many([{"n": 2}], kind="ping") != []
        loaded = [n for n, m in sys.modules.items() if n.startswith("opentelemetry") and m]
        print("ok", loaded)
        """,
        dsn,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "[]"]


SEND_WITH_A_PROVIDER = """
    import os
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import awa_fast

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    with awa_fast.Client(os.environ["DSN"]) as client:
        row = client.insert({"n": 1}, kind="ping", queue="q")
    print(len(exporter.get_finished_spans()), sorted(row.metadata))
"""


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "1 ['awa:traceparent']"),
        ({"AWA_FAST_TRACES": "0"}, "0 []"),
        ({"AWA_TRACE_CAPTURE": "off"}, "0 []"),  # the Awa SDK's switch
    ],
    ids=["on", "AWA_FAST_TRACES=0", "AWA_TRACE_CAPTURE=off"],
)
def test_the_environment_turns_traces_off(dsn: str, env: dict[str, str], expected: str) -> None:
    done = python(SEND_WITH_A_PROVIDER, dsn, **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_bad_settings_are_refused_with_what_to_give() -> None:
    assert tracing.switched_off({}) is False
    assert tracing.switched_off({"AWA_FAST_TRACES": " OFF "}) is True
    assert tracing.switched_off({"AWA_FAST_TRACES": "1", "AWA_TRACE_CAPTURE": "false"}) is True
    with pytest.raises(ConfigError, match=r"AWA_FAST_TRACES='maybe': give 0, off, false or no"):
        tracing.switched_off({"AWA_FAST_TRACES": "maybe"})
    with pytest.raises(ConfigTypeError, match="traces must be True or False, got 'no'"):
        awa_fast.AsyncClient("postgresql:///unused", traces="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="traces must be True or False"):
        awa_fast.RunnerConfig(traces=0)  # type: ignore[arg-type]


def test_stamping_keeps_the_callers_value_and_everything_else() -> None:
    headers = {"awa:traceparent": CALLERS, "awa:tracestate": 'k=v"\\'}
    assert stamped("{}", headers) == (
        '{"awa:traceparent":"' + CALLERS + '","awa:tracestate":"k=v\\"\\\\"}'
    )
    assert stamped('{"a":[1,2]}', {}) == '{"a":[1,2]}'
    mine = '{"awa:traceparent":"00-mine"}'
    assert stamped(mine, headers) == mine


def test_the_fast_check_reads_a_global_the_trace_api_still_has() -> None:
    """tracing.active reads the API's provider global rather than call its getter (0.6 us):
    should a release of the API drop it, this fails, and the check falls back to the
    getter (correct, but slower)."""
    assert hasattr(trace, "_TRACER_PROVIDER")
    with installed():
        found = tracing.active()
        assert found is not None and found is tracing.active()
        assert tracing.active(False) is None
    assert tracing.active() is None
