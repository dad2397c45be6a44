"""Traces across the queue (docs/observability.md, "Traces"): an insert sends its jobs in
an OpenTelemetry producer span whose W3C context each job carries in its metadata, and
each attempt's handler runs in a consumer span that continues that context.

This module is the one check every insert and every attempt makes, and it is meant to cost
next to nothing where traces are not wanted: it never imports OpenTelemetry. Only once the
application has imported OpenTelemetry's trace API and set an SDK ``TracerProvider`` does
:func:`active` load :mod:`awa_fast.tracing.otel`, which does the work. The keys are the Awa
SDK's (its ADR-039), so that jobs inserted by either carry the same context.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from awa_fast.errors import ConfigError, ConfigTypeError

if TYPE_CHECKING:
    from awa_fast.tracing.otel import Tracing

KEY = "awa:traceparent"  # the W3C traceparent of the span that sent the job
STATE_KEY = "awa:tracestate"  # its tracestate, when it has one
ENV = "AWA_FAST_TRACES"
AWA_ENV = "AWA_TRACE_CAPTURE"  # the Awa SDK's switch: "off" turns traces off here too
_ON = ("", "1", "on", "true", "yes")
_OFF = ("0", "off", "false", "no")


def switched_off(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the environment turns traces off for the whole process; ConfigError for a
    value that says neither, rather than guessing what was meant."""
    off = False
    for name in (ENV, AWA_ENV):
        value = environ.get(name, "").strip().lower()
        if value not in _ON + _OFF:
            raise ConfigError(
                f"{name}={environ[name]!r}: give 0, off, false or no to turn traces off, "
                "or 1, on, true or yes"
            )
        off = off or value in _OFF
    return off


OFF = switched_off()  # read once: a process's traces are on or off for its whole life

_MISSING = object()
# The trace API's global provider as last read, and what it made: the cache that lets an
# insert or an attempt skip the API's getter, which reads the environment on every call.
_seen: object = _MISSING
_tracing: Tracing | None = None


def active(on: bool = True) -> Tracing | None:
    """The tracing to send or process a job in, or None: traces off (``on`` False, the
    client's or runner's ``traces`` option, or :data:`ENV`), OpenTelemetry's trace API not
    imported, or no SDK provider set (the API's default proxy or its no-op one)."""
    if OFF or not on:
        return None
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    # The API's own global, read directly: get_tracer_provider() costs 0.6 us a call for
    # its environment lookup, 5-10 times this whole check (benches/RESULTS.md, "Design
    # measurements"), and a provider once set is never replaced. Without that global
    # (another API version), the getter every time: right, only slower.
    provider = getattr(api, "_TRACER_PROVIDER", _MISSING)
    if provider is _seen and provider is not _MISSING:
        return _tracing
    return _look(api)


def _look(api: Any) -> Tracing | None:
    """Ask the trace API ``api`` for its provider (which loads one
    OTEL_PYTHON_TRACER_PROVIDER names) and remember what it is."""
    global _seen, _tracing
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        _tracing = None
    elif _tracing is None or _tracing.provider is not provider:
        from awa_fast.tracing.otel import Tracing

        _tracing = Tracing(provider)
    _seen = getattr(api, "_TRACER_PROVIDER", _MISSING)
    return _tracing


def flush() -> None:
    """Export the spans the provider still holds, if traces were on here: a worker process
    ends with ``os._exit``, which runs no exit hook, so a batching processor's last spans
    would be lost with it."""
    if _tracing is not None:
        _tracing.flush()


def option(value: object) -> bool:
    """A client's or runner's ``traces`` option, checked."""
    if not isinstance(value, bool):
        raise ConfigTypeError(f"traces must be True or False, got {value!r}")
    return value
