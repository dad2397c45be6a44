"""The Awa SDK's ``init_telemetry`` / ``shutdown_telemetry``: this process's metrics,
pushed to an OpenTelemetry collector every interval.

What is pushed is awa-fast's own metric catalogue (awa_fast.runtime.metrics: the numbers
a runner's Prometheus endpoint serves), read from every runner the process has running
(awa_fast.runtime.runner.LIVE), over OTLP/gRPC as the SDK does (awa_fast.telemetry.grpc).
Counters are the process's totals over every runner it ran while telemetry was on, each
counted from its own start: a runner that stops leaves its final counts in them, so they
only grow (cumulative sums, as the SDK's). Gauges are the live runners' readings now.

Exports run on a thread of their own rather than a runner's loop: telemetry belongs to
the process (it starts before any client, as with the SDK, and outlives them), a process
may run several runners on several loops, and an export's network waits must never hold
up claiming or committing. A failed export is logged (at most once a minute, counting
the rest) and the next one tries again.
"""

from __future__ import annotations

import logging
import math
import threading
import time

from awa_fast.errors import TelemetryError, ValidationError
from awa_fast.runtime.runner import LIVE
from awa_fast.telemetry import grpc, otlp

log = logging.getLogger("awa_fast.telemetry")

TIMEOUT = 10.0  # seconds each socket operation of an export may take (OTLP's default)
REPORT_EVERY = 60.0  # seconds between log lines about exports that keep failing
USER_AGENT = "awa-fast-otlp"


class Exporter:
    """Exports the process's metrics to ``target`` every ``interval`` seconds from its
    thread, and once more on :meth:`close`."""

    def __init__(self, target: grpc.Target, service_name: str, interval: float) -> None:
        self.target = target
        self.resource = {
            "service.name": service_name,
            "telemetry.sdk.name": "awa-fast",
            "telemetry.sdk.language": "python",
        }
        self.interval = interval
        self._start_ns = time.time_ns()
        self._retired: otlp.Points = {}  # final counts of runners that stopped
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="awa-fast-telemetry", daemon=True)
        self._failures = 0  # since the last report
        self._reported = -math.inf  # time.monotonic() of the last report

    def start(self) -> None:
        LIVE.watch(True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread, then export what the numbers are now; raise TelemetryError if
        that fails (stopped all the same)."""
        self._stop.set()
        self._thread.join()
        try:
            self.export()
        except Exception as e:
            raise TelemetryError(f"telemetry shutdown failed: {e}") from e
        finally:
            LIVE.watch(False)

    def export(self) -> None:
        """Send the numbers as they are now; nothing while no runner has any yet."""
        live, stopped = LIVE.take()
        for metric, numbers in otlp.read(stopped, kinds=("counter",)).items():
            otlp.add(metric, self._retired.setdefault(metric, {}), numbers)
        points = otlp.read(live)
        for metric, numbers in self._retired.items():
            otlp.add(metric, points[metric], numbers)
        if not any(points.values()):
            return
        message = otlp.export_request(
            points, resource=self.resource, start_ns=self._start_ns, now_ns=time.time_ns()
        )
        grpc.call(self.target, otlp.EXPORT_PATH, message, timeout=TIMEOUT, user_agent=USER_AGENT)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.export()
            except Exception as e:  # whatever it is, the runners go on and so do we
                self._failed(e)
            else:
                self._recovered()

    def _failed(self, error: Exception) -> None:
        self._failures += 1
        now = time.monotonic()
        if now - self._reported >= REPORT_EVERY:
            log.warning(
                "telemetry export to %s failed (%d failed since the last report): %s",
                self.target.authority,
                self._failures,
                error,
                extra={"endpoint": self.target.authority, "failures": self._failures},
            )
            self._reported, self._failures = now, 0

    def _recovered(self) -> None:
        if self._reported > -math.inf:
            log.info("telemetry export to %s works again", self.target.authority)
            self._reported, self._failures = -math.inf, 0


_lock = threading.Lock()  # init and shutdown, from any thread
_active: Exporter | None = None


def init_telemetry(endpoint: str, service_name: str, export_interval_ms: int = 5000) -> bool:
    """Push this process's awa-fast metrics to the OpenTelemetry collector at ``endpoint``
    (OTLP/gRPC, e.g. ``http://localhost:4317``; its path is ignored) every
    ``export_interval_ms``, with ``service.name`` = ``service_name``, until
    :func:`shutdown_telemetry`. Returns False and changes nothing if telemetry is
    already running, as the Awa SDK does."""
    global _active
    target = _target(endpoint)
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
    with _lock:
        if _active is not None:
            return False
        _active = Exporter(target, service_name, export_interval_ms / 1000)
        _active.start()
        return True


def shutdown_telemetry() -> None:
    """Stop pushing metrics, after one last export of the numbers as they are now (raising
    :class:`~awa_fast.errors.TelemetryError`, a RuntimeError as the SDK's, if it fails).
    Does nothing when telemetry is not running."""
    global _active
    with _lock:
        exporter, _active = _active, None
        if exporter is not None:
            exporter.close()


def _target(endpoint: str) -> grpc.Target:
    if not isinstance(endpoint, str) or not endpoint:
        raise ValidationError("endpoint", f"an http(s) URL is required, got {endpoint!r}")
    try:
        return grpc.Target.parse(endpoint)
    except ValueError as e:
        raise ValidationError("endpoint", str(e)) from None
