"""Traces in the pool: ``awa-fast serve`` forks its workers after the application's module
set its tracer provider, and each worker's consumer spans continue the traces of the jobs
it runs, exported from that worker (tests/telemetry/traced_app.py), its last ones at its
exit."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import awa_fast
from tests.helpers import states, wait_until
from tests.runtime.work.pool.conftest import Serve
from tests.telemetry.spans import installed, named, traceparent

N = 6  # jobs of each kind


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with installed() as exporter:
        yield exporter


def exported(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("spans-*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def test_forked_workers_continue_the_traces_of_the_jobs_they_run(
    dsn: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    out = tmp_path / "spans"
    out.mkdir()
    with awa_fast.Client(dsn) as client:
        rows = [
            client.insert({"n": n}, kind=kind, queue="traced")
            for kind in ("traced", "traced_sync")
            for n in range(N)
        ]
    sent = {span.attributes["messaging.message.id"]: span for span in named(spans, "send traced")}  # type: ignore[index]
    assert {row.metadata["awa:traceparent"] for row in rows} == {
        traceparent(sent[str(row.id)]) for row in rows
    }
    server = Serve(
        dsn,
        tmp_path,
        *("--processes", "2", "--queue", "traced=4"),
        app="tests.telemetry.traced_app",
        env={"AWA_FAST_TEST_SPANS": str(out)},
    )
    try:
        wait_until(lambda: states(dsn) == {"completed": 2 * N}, what="every job completed")
        server.signal(signal.SIGTERM)
        assert server.wait(60) == 0
    finally:
        server.close()
        print(server.log()[-4000:])
    processed = [s for s in exported(out) if s["name"] == "process traced"]
    assert sorted(int(s["attributes"]["messaging.message.id"]) for s in processed) == sorted(
        row.id for row in rows
    )
    for span in processed:
        producer = sent[span["attributes"]["messaging.message.id"]]
        assert span["kind"] == "CONSUMER"
        assert span["trace_id"] == f"{producer.context.trace_id:032x}"
        assert span["parent"] == f"{producer.context.span_id:016x}"
    # Exported by the workers, not the supervisor: each from the process that ran it.
    assert server.proc.pid not in {s["pid"] for s in processed}
    # At most the pool's two worker processes: a third pid would be a span from a process
    # that is neither (a replacement, or a fork that exported its parent's spans).
    assert 1 <= len({s["pid"] for s in processed}) <= 2
