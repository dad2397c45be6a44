"""awa-fast's metric catalogue (awa_fast.runtime.metrics) as an OTLP metrics export.

The readings are the ones the Prometheus endpoint serves, taken from every runner of the
process and combined per metric (:attr:`Metric.combine`). The message is
``opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest``, encoded here
field by field: its handful of message types do not warrant a protobuf dependency.
Counters become cumulative monotonic sums, gauges gauges, a metric's label an attribute.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from awa_fast.runtime.metrics import METRICS, Metric, Value

if TYPE_CHECKING:
    from awa_fast.runtime.runner import Runner

EXPORT_PATH = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
SCOPE = "awa_fast"
CUMULATIVE = 2  # AggregationTemporality
VARINT, I64, LEN = 0, 1, 2  # protobuf wire types

# A metric's numbers by label value (None: a metric without a label).
Numbers = dict[str | None, float]
Points = dict[Metric, Numbers]


def read(runners: Iterable[Runner], *, kinds: tuple[str, ...] = ("counter", "gauge")) -> Points:
    """The numbers of every metric of these ``kinds``, each combined over ``runners``."""
    points: Points = {m: {} for m in METRICS if m.type in kinds}
    for runner in runners:
        for metric, numbers in points.items():
            add(metric, numbers, _numbers(metric.read(runner)))
    return points


def add(metric: Metric, into: Numbers, numbers: Mapping[str | None, float]) -> None:
    """Combine ``numbers`` of ``metric`` into ``into``."""
    for key, number in numbers.items():
        into[key] = metric.combine(into[key], number) if key in into else number


def _numbers(value: Value) -> Numbers:
    """A reading as numbers by label value; a copy, since runners go on counting in other
    threads."""
    if isinstance(value, Mapping):
        return {key: number for key, number in value.items()}
    return {} if value is None else {None: value}


def export_request(
    points: Points, *, resource: Mapping[str, str], start_ns: int, now_ns: int
) -> bytes:
    """The ExportMetricsServiceRequest carrying ``points`` (metrics without numbers are
    left out), counted since ``start_ns`` and read at ``now_ns``."""
    metrics = b"".join(
        _message(2, _metric(metric, numbers, start_ns, now_ns))
        for metric, numbers in points.items()
        if numbers
    )
    scope = _message(1, _string(1, SCOPE))
    attributes = b"".join(_message(1, _key_value(k, v)) for k, v in resource.items())
    resource_metrics = _message(1, attributes) + _message(2, scope + metrics)
    return _message(1, resource_metrics)


def _metric(metric: Metric, numbers: Numbers, start_ns: int, now_ns: int) -> bytes:
    points = b"".join(
        _message(1, _point(metric.label, key, number, start_ns, now_ns))
        for key, number in numbers.items()
    )
    if metric.type == "counter":  # Sum
        data = _message(7, points + _varint(2, CUMULATIVE) + _varint(3, 1))
    else:  # Gauge
        data = _message(5, points)
    return _string(1, metric.name) + _string(2, metric.help) + data


def _point(label: str | None, key: str | None, number: float, start_ns: int, now_ns: int) -> bytes:
    """A NumberDataPoint: an integer as ``as_int``, anything else as ``as_double``."""
    attributes = b"" if label is None or key is None else _message(7, _key_value(label, key))
    if isinstance(number, int):
        value = _tag(6, I64) + struct.pack("<q", number)
    else:
        value = _tag(4, I64) + struct.pack("<d", number)
    times = _tag(2, I64) + struct.pack("<Q", start_ns) + _tag(3, I64) + struct.pack("<Q", now_ns)
    return attributes + times + value


def _key_value(key: str, value: str) -> bytes:
    """A KeyValue with a string AnyValue."""
    return _string(1, key) + _message(2, _string(1, value))


def _message(field: int, payload: bytes) -> bytes:
    return _tag(field, LEN) + _uvarint(len(payload)) + payload


def _string(field: int, text: str) -> bytes:
    return _message(field, text.encode())


def _varint(field: int, number: int) -> bytes:
    return _tag(field, VARINT) + _uvarint(number)


def _tag(field: int, wire_type: int) -> bytes:
    return _uvarint(field << 3 | wire_type)


def _uvarint(number: int) -> bytes:
    out = bytearray()
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)
