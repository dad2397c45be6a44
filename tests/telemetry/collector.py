"""A local OpenTelemetry collector stand-in for tests: a real gRPC server implementing the
OTLP ``MetricsService`` (the servicer opentelemetry-proto ships), on 127.0.0.1, recording
the ``ExportMetricsServiceRequest``s it gets; and a reader of what they carry."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import (
    MetricsServiceServicer,
    add_MetricsServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

# What awa-pg 0.6.9 sent after five jobs on queue "probe", with
# init_telemetry(endpoint, "svc", 500).
SDK_EXPORT = Path(__file__).with_name("sdk_export.pb")


class Collector(MetricsServiceServicer):
    """Receives OTLP metric exports on 127.0.0.1 until closed; answers each with OK, or
    with the error ``reject`` when given."""

    def __init__(self, *, reject: grpc.StatusCode | None = None) -> None:
        self.reject = reject
        self.requests: list[ExportMetricsServiceRequest] = []
        self._changed = threading.Condition()
        self._server = grpc.server(ThreadPoolExecutor(max_workers=2))
        add_MetricsServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Collector:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None).wait()

    def Export(  # the servicer's method
        self, request: ExportMetricsServiceRequest, context: grpc.ServicerContext
    ) -> ExportMetricsServiceResponse:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()
        if self.reject is not None:
            context.abort(self.reject, "rejected by the test")
        return ExportMetricsServiceResponse()

    def wait_for(
        self,
        predicate: Callable[[list[ExportMetricsServiceRequest]], bool],
        *,
        timeout: float = 30.0,
    ) -> list[ExportMetricsServiceRequest]:
        """The requests received, once ``predicate`` holds for them."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.requests):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s: {len(self.requests)} got")
                self._changed.wait(left)
            return list(self.requests)


@dataclass
class Export:
    """One export's resource attributes, scopes, and metrics by name."""

    resource: dict[str, Any]
    scopes: list[str]
    metrics: dict[str, Metric]

    def number(self, name: str, **attributes: str) -> float:
        """The value of ``name``'s data point with exactly these ``attributes``."""
        metric = self.metrics[name]
        points = getattr(metric, metric.WhichOneof("data")).data_points
        (point,) = [p for p in points if _attributes(p.attributes) == attributes]
        return float(getattr(point, point.WhichOneof("value")))

    def shape(self, name: str) -> tuple[str, int, bool]:
        """How ``name`` is typed: sum or gauge, its temporality, whether monotonic."""
        metric = self.metrics[name]
        kind = metric.WhichOneof("data")
        if kind == "sum":
            return kind, metric.sum.aggregation_temporality, metric.sum.is_monotonic
        return kind, 0, False


def read_export(request: ExportMetricsServiceRequest | bytes) -> Export:
    if isinstance(request, bytes):
        request = ExportMetricsServiceRequest.FromString(request)
    (resource_metrics,) = request.resource_metrics
    export = Export(_attributes(resource_metrics.resource.attributes), [], {})
    for scope_metrics in resource_metrics.scope_metrics:
        export.scopes.append(scope_metrics.scope.name)
        export.metrics.update((metric.name, metric) for metric in scope_metrics.metrics)
    return export


def _attributes(key_values: list[KeyValue]) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in key_values}
