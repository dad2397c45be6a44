"""The spans of traces across the queue, through OpenTelemetry's trace API, following its
messaging semantic conventions: ``send {queue}`` (PRODUCER) around an insert, and
``process {queue}`` (CONSUMER) around each attempt's handler.

Imported by :func:`awa_fast.tracing.active` only, once the application has set an SDK
tracer provider: a process without one never loads this module.

A job carries its producer span's context as W3C ``traceparent`` (and ``tracestate``)
text under the reserved metadata keys. Its first attempt's consumer span is a child of
that context: the request that inserted the job and the job's run read as one trace. A
retry's span starts a trace of its own with a link to it, as the conventions advise for
deferred processing: a retry hours later does not stretch the producer's trace over its
backoff, nor inherit its sampling decision.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from awa_fast.codec import decode_json, encode_json
from awa_fast.tracing import KEY, STATE_KEY

T = TypeVar("T")

SCOPE = "awa_fast"  # the instrumentation scope of every span
# messaging.system: the queue's own name, not Postgres': the destination is an awa-fast
# queue, whatever stores it (docs/observability.md, "Traces").
SYSTEM = "awa-fast"
FLUSH_TIMEOUT_MS = 3000  # what a worker's exit waits for its last spans, at most
_W3C = TraceContextTextMapPropagator()  # W3C whatever propagators the application set


class Processed(Protocol):
    """What a consumer span reads of the attempt: awa_fast.worker.Job's fields."""

    id: int
    kind: str
    queue: str
    attempt: int
    metadata: dict[str, Any]


class Tracing:
    """Spans from the provider the application set (``provider``)."""

    def __init__(self, provider: trace.TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)

    @contextlib.contextmanager
    def sending(
        self, jobs: Sequence[Any], uniform: dict[str, Any] | None = None
    ) -> Iterator[Callable[[T], T]]:
        """A producer span around the insert of ``jobs`` (awa_fast.producer's PreparedJob)
        or of a uniform batch (``uniform``, job_insert_uniform's parameters), whose context
        their metadata takes on; yields ``sent``, which reads the job ids off the insert's
        result. A failed insert ends the span with its exception."""
        queues = {job.options.queue for job in jobs} if uniform is None else {uniform["queue"]}
        count = len(jobs) if uniform is None else uniform["count"]
        if not count:
            yield _same
            return
        attributes = _messaging("send")
        if len(queues) == 1:
            attributes["messaging.destination.name"] = next(iter(queues))
        if count > 1:
            attributes["messaging.batch.message_count"] = count
        name = f"send {next(iter(queues))}" if len(queues) == 1 else "send"
        with self.tracer.start_as_current_span(
            name, kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            _stamp(jobs, uniform, _headers())
            yield lambda result: _sent(span, result)

    @contextlib.contextmanager
    def processing(self, job: Processed) -> Iterator[None]:
        """The consumer span of ``job``'s attempt, current while its handler runs; an
        exception out of the handler is recorded on it, and sets its status to ERROR."""
        stored = _stored(job.metadata)
        stored_span = trace.get_current_span(stored).get_span_context()
        first = job.attempt <= 1
        # Never the ambient context: a runner started inside a span must not make every job
        # a child of it.
        parent = stored if first else Context()
        links = [Link(stored_span)] if stored_span.is_valid and not first else None
        attributes = _messaging("process")
        attributes["messaging.destination.name"] = job.queue
        attributes["messaging.message.id"] = str(job.id)
        attributes["awa_fast.job.kind"] = job.kind
        attributes["awa_fast.job.attempt"] = job.attempt
        with self.tracer.start_as_current_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        ):
            yield

    def flush(self) -> None:
        """Export what the provider's processors hold (the SDK's provider has
        ``force_flush``; the API's has none)."""
        force_flush = getattr(self.provider, "force_flush", None)
        if force_flush is not None:
            force_flush(FLUSH_TIMEOUT_MS)


def _messaging(operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }


def _same(result: T) -> T:
    return result


def _sent(span: Span, result: T) -> T:
    """``result`` (a JobRow, or a batch's ids), its one job's id set on ``span``."""
    ids = result if isinstance(result, list) else [getattr(result, "id", None)]
    if len(ids) == 1 and ids[0] is not None:
        span.set_attribute("messaging.message.id", str(ids[0]))
    return result


def _headers() -> dict[str, str]:
    """The current span's context as the metadata keys (none for an invalid context: a
    provider that records nothing)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    keys = {"traceparent": KEY, "tracestate": STATE_KEY}
    return {keys[name]: value for name, value in carrier.items() if name in keys and value}


def stamped(metadata: str, headers: Mapping[str, str]) -> str:
    """Encoded ``metadata`` with ``headers`` added, unless it holds a traceparent of the
    caller's own: that one wins, and neither key is written."""
    if not headers:
        return metadata
    fields = decode_json(metadata.encode())
    if KEY in fields:
        return metadata
    return encode_json("metadata", {**fields, **headers}).decode()


def _stamp(jobs: Sequence[Any], uniform: dict[str, Any] | None, headers: Mapping[str, str]) -> None:
    """Put ``headers`` into the metadata of ``jobs`` (or of ``uniform``): once per set of
    options the jobs share, as the producer encodes it once."""
    if uniform is not None:
        uniform["metadata"] = stamped(uniform["metadata"], headers)
        return
    made: dict[int, tuple[Any, Any]] = {}  # id(options) -> (those options, kept alive; new)
    for job in jobs:
        old = job.options
        pair = made.get(id(old))
        if pair is None:
            new = dataclasses.replace(old, metadata=stamped(old.metadata, headers))
            pair = made[id(old)] = (old, new)
        job.options = pair[1]


def _stored(metadata: Mapping[str, Any]) -> Context:
    """The context a job's metadata carries, as a remote parent; an empty context when it
    carries none, or one that is not W3C's (the propagator ignores what it cannot parse)."""
    parent = metadata.get(KEY)
    if not isinstance(parent, str):
        return Context()
    carrier = {"traceparent": parent}
    state = metadata.get(STATE_KEY)
    if isinstance(state, str):
        carrier["tracestate"] = state
    return _W3C.extract(carrier, context=Context())
