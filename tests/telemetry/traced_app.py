"""The app tests/telemetry/test_trace_pool.py serves with ``awa-fast serve``: like an
application, its module sets an SDK tracer provider at import, before the pool forks, with
a batching processor. Its exporter writes each process's spans to a file of that process's
own (``spans-PID.jsonl`` in the directory AWA_FAST_TEST_SPANS names), one JSON object a
line, for the test to read once the server has exited."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import awa_fast

client = awa_fast.AsyncClient(os.environ.get("AWA_FAST_TEST_APP_DSN", "postgresql:///unset"))


class FileExporter(SpanExporter):
    """Spans as JSON lines, in a file per process."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        path = self.directory / f"spans-{os.getpid()}.jsonl"
        with path.open("a") as out:
            for span in spans:
                out.write(json.dumps(_fields(span)) + "\n")
        return SpanExportResult.SUCCESS


def _fields(span: ReadableSpan) -> dict[str, object]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent": None if span.parent is None else f"{span.parent.span_id:016x}",
        "attributes": dict(span.attributes or {}),
        "pid": os.getpid(),
    }


provider = TracerProvider()
# The processor's default schedule (5 s) is longer than the test runs: what reaches the
# files does so at the flush each worker makes as it exits.
provider.add_span_processor(
    BatchSpanProcessor(FileExporter(Path(os.environ["AWA_FAST_TEST_SPANS"])))
)
trace.set_tracer_provider(provider)


@dataclass
class Traced:
    n: int


@dataclass
class TracedSync:
    n: int


@client.task(Traced, queue="traced")
async def traced(job: awa_fast.Job[Traced]) -> None:
    assert trace.get_current_span().get_span_context().is_valid  # its consumer span


@client.task(TracedSync, queue="traced")
def traced_sync(job: awa_fast.Job[TracedSync]) -> None:
    assert trace.get_current_span().get_span_context().is_valid
