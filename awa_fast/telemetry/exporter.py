"""The Awa SDK's ``init_telemetry`` / ``shutdown_telemetry``: this process's awa-fast
metrics (awa_fast.telemetry.readings), pushed to an OpenTelemetry collector over
OTLP/gRPC every interval by the OpenTelemetry SDK (awa_fast.telemetry.otel, the ``otel``
extra, imported here only when telemetry is turned on).

Telemetry belongs to the process: it starts before any client, as with the SDK, outlives
them, and reads every runner the process runs. Exports run on a thread of their own, so an
export's network waits never hold up claiming or committing, and a failing collector
costs the runners nothing.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from typing import TYPE_CHECKING

from awa_fast.errors import ValidationError

if TYPE_CHECKING:
    from awa_fast.telemetry.otel import Pipeline

EXTRA = "pip install 'awa-fast[otel]'"

_lock = threading.Lock()  # init and shutdown, from any thread
_active: Pipeline | None = None
_parents: list[Pipeline] = []  # a forked child's inheritance: see _forget


def init_telemetry(endpoint: str, service_name: str, export_interval_ms: int = 5000) -> bool:
    """Push this process's awa-fast metrics to the OpenTelemetry collector at ``endpoint``
    (OTLP/gRPC, e.g. ``http://localhost:4317``; ``https://`` for TLS; its path is
    ignored) every ``export_interval_ms``, with ``service.name`` = ``service_name``, until
    :func:`shutdown_telemetry`. Returns False and changes nothing if telemetry is
    already running, as the Awa SDK does. Needs the ``otel`` extra (ImportError saying so
    otherwise)."""
    global _active
    target = _endpoint(endpoint)
    if not isinstance(service_name, str) or not service_name:
        raise ValidationError("service_name", f"must be a non-empty string, got {service_name!r}")
    if (
        isinstance(export_interval_ms, bool)
        or not isinstance(export_interval_ms, int)
        or export_interval_ms <= 0
    ):
        raise ValidationError(
            "export_interval_ms", f"must be an integer > 0, got {export_interval_ms!r}"
        )
    pipeline = _pipeline_class()
    with _lock:
        if _active is not None:
            return False
        _active = pipeline(target, service_name=service_name, interval=export_interval_ms / 1000)
        _active.start()
        return True


def shutdown_telemetry() -> None:
    """Stop pushing metrics, after one last export of the numbers as they are now (raising
    :class:`~awa_fast.errors.TelemetryError`, a RuntimeError as the SDK's, if it fails).
    Does nothing when telemetry is not running."""
    global _active
    with _lock:
        pipeline, _active = _active, None
        if pipeline is not None:
            pipeline.close()


def _endpoint(endpoint: str) -> str:
    """``endpoint`` as ``scheme://host:port`` (the port http's or https's when it has
    none), or ValidationError naming what is wrong with it."""
    if not isinstance(endpoint, str) or not endpoint:
        raise ValidationError("endpoint", f"an http(s) URL is required, got {endpoint!r}")
    try:
        url = urllib.parse.urlsplit(endpoint)
        port = url.port
    except ValueError as e:  # not a URL, or its port not a number
        raise ValidationError("endpoint", f"{e}: {endpoint!r}") from None
    if url.scheme not in ("http", "https"):
        raise ValidationError("endpoint", f"must be an http:// or https:// URL, got {endpoint!r}")
    if not url.hostname:
        raise ValidationError("endpoint", f"has no host: {endpoint!r}")
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    default = 80 if url.scheme == "http" else 443
    return f"{url.scheme}://{host}:{default if port is None else port}"


def _pipeline_class() -> type[Pipeline]:
    """The OpenTelemetry side, imported now; ImportError naming the extra that brings
    what it needs if that is not installed."""
    try:
        from awa_fast.telemetry.otel import Pipeline
    except ModuleNotFoundError as e:
        raise ImportError(
            f"init_telemetry needs the OpenTelemetry SDK ({e}): {EXTRA}", name=e.name
        ) from e
    return Pipeline


def _forget() -> None:
    """In a forked child: telemetry is off. The pipeline it inherited is its parent's (its
    thread did not survive the fork, its gRPC channel is its parent's): shutdown_telemetry
    here must not export copies of the parent's numbers, nor a new init_telemetry return
    False. It stays referenced, never closed here: a child calls nothing of gRPC's that
    its parent set up."""
    global _active, _lock
    _lock = threading.Lock()
    if _active is not None:
        _parents.append(_active)
        _active = None


os.register_at_fork(after_in_child=_forget)
