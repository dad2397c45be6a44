"""OpenTelemetry SDK tracer providers for tests: installed as the process's global one for
a test, then taken away, so that the tests after it run as a process without
OpenTelemetry set up does. The API lets a process set its provider once; :func:`installed`
resets its globals as OpenTelemetry's own test utilities do
(``opentelemetry.test.globals_test.reset_trace_globals``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def reset_tracer_provider() -> None:
    """No global tracer provider: the API's proxy answers again, as at start."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@contextlib.contextmanager
def installed() -> Iterator[InMemorySpanExporter]:
    """An SDK provider exporting each span as it ends to the exporter yielded, global for
    the block."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reset_tracer_provider()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        reset_tracer_provider()
        provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name``, in the order they ended."""
    return [span for span in exporter.get_finished_spans() if span.name == name]


def traceparent(span: ReadableSpan) -> str:
    """``span``'s context as the W3C traceparent a job stores."""
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
