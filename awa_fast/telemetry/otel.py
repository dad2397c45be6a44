"""The process's awa-fast metrics (awa_fast.telemetry.readings) through the OpenTelemetry
SDK, pushed over OTLP/gRPC by its own exporter, as the Awa SDK pushes its metrics.

Imported by ``init_telemetry`` only (the ``otel`` extra): a process that never turns
telemetry on never loads the SDK, gRPC or protobuf.

The pipeline is private to awa-fast: its own ``MeterProvider`` (the global one, which the
application may have set up for itself, is left alone), resource ``service.name``, one
observable instrument per metric of the catalogue (counters as ObservableCounter,
cumulative; gauges as ObservableGauge; a metric's label an attribute) whose callbacks read
the process's numbers when the SDK collects, and a ``PeriodicExportingMetricReader``
handing each collection to an ``OTLPMetricExporter``.

The reader is given no interval of its own: :class:`Pipeline`'s thread asks it to collect
and export every interval instead. The SDK's reader re-starts its export thread in every
process forked from this one (``os.register_at_fork``), and a forked pool worker would then
export copies of its parent's numbers through its parent's gRPC channel; this thread, like
any, does not survive a fork. The last export runs in ``shutdown_telemetry``'s own thread,
where its outcome is known (the reader drops every export's result).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

from awa_fast.errors import TelemetryError
from awa_fast.runtime.metrics import METRICS, Metric
from awa_fast.telemetry.readings import Readings

log = logging.getLogger("awa_fast.telemetry")

SCOPE = "awa_fast"  # the instrumentation scope every metric is exported under
# Seconds one export may take, its retries while the collector is unavailable included
# (the exporter's own default is 10). It bounds shutdown_telemetry: an export under way,
# then the last one.
TIMEOUT = 3.0


class _Exporter(OTLPMetricExporter):
    """The OTLP exporter, remembering how its latest export went: the reader drops each
    result, and shutdown_telemetry must say whether the last export failed."""

    latest: MetricExportResult | None = None

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.latest = MetricExportResult.FAILURE  # should it raise (the reader logs that)
        self.latest = super().export(metrics_data, timeout_millis, **kwargs)
        return self.latest


class Pipeline:
    """Exports the process's metrics to ``endpoint`` (``scheme://host:port``) every
    ``interval`` seconds from its thread, and once more on :meth:`close`."""

    def __init__(self, endpoint: str, *, service_name: str, interval: float) -> None:
        self.endpoint = endpoint
        self._readings = Readings()
        self._exporter = _Exporter(
            endpoint=endpoint, insecure=endpoint.startswith("http://"), timeout=TIMEOUT
        )
        self._reader = PeriodicExportingMetricReader(
            self._exporter, export_interval_millis=math.inf
        )
        self._provider = MeterProvider(
            metric_readers=[self._reader],
            resource=Resource.create({SERVICE_NAME: service_name}),
            # As with the Awa SDK, only shutdown_telemetry sends a last export: an exit
            # never waits on a collector.
            shutdown_on_exit=False,
        )
        meter = self._provider.get_meter(SCOPE)
        for metric in METRICS:
            create = (
                meter.create_observable_counter
                if metric.type == "counter"
                else meter.create_observable_gauge
            )
            create(
                metric.name,
                callbacks=[functools.partial(self._observe, metric)],
                description=metric.help,
            )
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="awa-fast-telemetry", daemon=True)

    def start(self) -> None:
        self._readings.start()
        self._thread.start()

    def close(self) -> None:
        """Stop the thread, export the numbers as they are now, and shut the SDK's
        pipeline down; raise TelemetryError if that last export failed (stopped all the
        same)."""
        self._stop.set()
        self._thread.join()
        try:
            failure = self._last_export()
        finally:
            self._readings.stop()
            self._provider.shutdown()
        if failure is not None:
            raise TelemetryError(f"telemetry shutdown failed: {failure}")

    def _last_export(self) -> str | None:
        """Collect and export once more; what went wrong, if anything did. Nothing is
        sent (and nothing fails) while the process has no numbers: no runner, and no
        backpressure counted."""
        self._exporter.latest = None
        try:
            self._readings.refresh()
            self._reader.collect(timeout_millis=TIMEOUT * 1000)
        except Exception as e:  # the collection timed out
            return str(e)
        if self._exporter.latest is MetricExportResult.FAILURE:
            return (
                f"the last export to {self.endpoint} did not go through (see the log of "
                f"opentelemetry.exporter.otlp.proto.grpc.exporter)"
            )
        return None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._readings.refresh()
                # Exports too. The exporter logs a failed export (the same message at most
                # once in 20 seconds while it keeps failing); the runners never see it.
                self._reader.collect(timeout_millis=TIMEOUT * 1000)
            except Exception:  # a collection that timed out: the next one tries again
                log.warning("collecting the metrics for telemetry failed", exc_info=True)

    def _observe(self, metric: Metric, options: CallbackOptions) -> list[Observation]:
        """``metric``'s numbers, for the SDK's collection: a label value becomes the
        attribute the label names."""
        return [
            Observation(
                number, None if metric.label is None or key is None else {metric.label: key}
            )
            for key, number in self._readings.read(metric).items()
        ]
