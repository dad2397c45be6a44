"""A local OTLP/gRPC metrics receiver for tests, and a reader of what it received.

The receiver speaks HTTP/2 with prior knowledge (optionally under TLS) on 127.0.0.1: it
answers SETTINGS and grants flow-control credit as data arrives, records each request's
headers and gRPC message, and answers with the gRPC status it was given. The reader
decodes an ExportMetricsServiceRequest with a generic protobuf wire-format parser; that
it reads the Awa SDK's own export (sdk_export.pb) is tested, so what it finds in ours is
laid out as the SDK lays it out.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from awa_fast.telemetry import grpc, hpack

SDK_EXPORT = Path(__file__).with_name("sdk_export.pb")


@dataclass
class Request:
    headers: dict[str, str]
    message: bytes


class Collector:
    """Receives gRPC calls on 127.0.0.1 until closed; answers each with ``status``."""

    def __init__(
        self,
        *,
        status: int = 0,
        status_message: str = "",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.status = status
        self.status_message = status_message
        self.tls = tls
        self.requests: list[Request] = []
        self._changed = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._threads = [threading.Thread(target=self._accept, daemon=True)]

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://localhost:{self.port}"

    def __enter__(self) -> Collector:
        self._threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() (close alone does not)
        self._listener.close()
        for thread in self._threads:
            thread.join(10)

    def wait_for(
        self, predicate: Callable[[list[Request]], bool], *, timeout: float = 30.0
    ) -> list[Request]:
        """The requests received, once ``predicate`` holds for them."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.requests):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s: {len(self.requests)} got")
                self._changed.wait(left)
            return list(self.requests)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                conn, _ = self._listener.accept()
                thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client went away, or failed TLS
            conn.settimeout(10)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)  # closes it on failure
            with conn:
                _Connection(conn, self).run()

    def record(self, request: Request) -> None:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()


class _Connection:
    """The server side of one HTTP/2 connection: requests on any stream."""

    def __init__(self, sock: socket.socket, collector: Collector) -> None:
        self.sock = sock
        self.collector = collector
        self.decoder = hpack.Decoder()
        self.headers: dict[int, dict[str, str]] = {}
        self.bodies: dict[int, bytearray] = {}

    def run(self) -> None:
        assert self._read(len(grpc.PREFACE)) == grpc.PREFACE
        self._send(grpc.SETTINGS, 0, 0, b"")
        while True:
            length_type, flags, stream = grpc.FRAME_HEADER.unpack(self._read(9))
            kind, payload = length_type & 0xFF, self._read(length_type >> 8)
            if kind == grpc.SETTINGS and not flags & grpc.ACK:
                self._send(grpc.SETTINGS, grpc.ACK, 0, b"")
            elif kind == grpc.HEADERS:
                assert flags & grpc.END_HEADERS, "the client's headers fit one frame"
                self.headers[stream] = dict(self.decoder.decode(payload))
                self.bodies[stream] = bytearray()
            elif kind == grpc.DATA:
                self.bodies[stream] += payload
                credit = struct.pack(">I", len(payload))
                self._send(grpc.WINDOW_UPDATE, 0, 0, credit)
                self._send(grpc.WINDOW_UPDATE, 0, stream, credit)
            if kind in (grpc.HEADERS, grpc.DATA) and flags & grpc.END_STREAM:
                self._answer(stream)

    def _answer(self, stream: int) -> None:
        body = bytes(self.bodies.pop(stream))
        compressed, length = struct.unpack(">BI", body[:5])
        assert compressed == 0 and length == len(body) - 5
        self.collector.record(Request(self.headers.pop(stream), body[5:]))
        status_200 = bytes([0x80 | 8])  # indexed: static table entry 8
        self._send(
            grpc.HEADERS,
            grpc.END_HEADERS,
            stream,
            status_200 + hpack.encode([("content-type", "application/grpc")]),
        )
        self._send(grpc.DATA, 0, stream, b"\0\0\0\0\0")  # an empty reply message
        trailers = [("grpc-status", str(self.collector.status))]
        if self.collector.status_message:
            trailers.append(("grpc-message", self.collector.status_message.replace(" ", "%20")))
        end = grpc.END_HEADERS | grpc.END_STREAM
        self._send(grpc.HEADERS, end, stream, hpack.encode(trailers))

    def _send(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        self.sock.sendall(grpc.FRAME_HEADER.pack(len(payload) << 8 | kind, flags, stream) + payload)

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the client closed the connection")
            data += chunk
        return data


# -- reading an ExportMetricsServiceRequest -------------------------------------------------


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of a protobuf message: varints as ints, the
    other wire types as their bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _varint(data, pos)
            yield number, value
        else:
            size = {1: 8, 5: 4}.get(wire_type)
            if size is None:
                assert wire_type == 2, f"wire type {wire_type}"
                size, pos = _varint(data, pos)
            yield number, data[pos : pos + size]
            pos += size


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _all(data: bytes, number: int) -> list[bytes]:
    found = [v for n, v in fields(data) if n == number]
    assert all(isinstance(v, bytes) for v in found)
    return found  # type: ignore[return-value]


def _one(data: bytes, number: int) -> int | bytes | None:
    found = [v for n, v in fields(data) if n == number]
    assert len(found) <= 1, f"field {number} repeated"
    return found[0] if found else None


def _attributes(key_values: list[bytes]) -> dict[str, str | int]:
    """KeyValues with a string or int AnyValue."""
    out: dict[str, str | int] = {}
    for kv in key_values:
        key, value = _one(kv, 1), _one(kv, 2)
        assert isinstance(key, bytes) and isinstance(value, bytes)
        string, integer = _one(value, 1), _one(value, 3)
        out[key.decode()] = string.decode() if isinstance(string, bytes) else int(integer or 0)
    return out


@dataclass
class Metric:
    kind: str  # "sum" or "gauge"
    description: str
    temporality: int | None = None  # sums only: 2 is cumulative
    monotonic: bool = False
    # attributes (as sorted pairs) -> number
    points: dict[tuple[tuple[str, str | int], ...], float] = field(default_factory=dict)
    times: list[tuple[int, int]] = field(default_factory=list)  # (start, time) unix ns


@dataclass
class Export:
    resource: dict[str, str | int]
    scopes: list[str]
    metrics: dict[str, Metric]

    def number(self, name: str, **attributes: str) -> float:
        return self.metrics[name].points[tuple(sorted(attributes.items()))]


def read_export(message: bytes) -> Export:
    """The number metrics (sums and gauges) of an ExportMetricsServiceRequest."""
    (resource_metrics,) = _all(message, 1)
    (resource,) = _all(resource_metrics, 1)
    export = Export(_attributes(_all(resource, 1)), [], {})
    for scope_metrics in _all(resource_metrics, 2):
        scope = _one(scope_metrics, 1)
        assert isinstance(scope, bytes)
        export.scopes.append(bytes(_all(scope, 1)[0]).decode())
        for metric in _all(scope_metrics, 2):
            name, read = _read_metric(metric)
            if read is not None:
                export.metrics[name] = read
    return export


def _read_metric(data: bytes) -> tuple[str, Metric | None]:
    name, description = _all(data, 1)[0].decode(), b"".join(_all(data, 2)).decode()
    for number, kind in ((5, "gauge"), (7, "sum")):
        for body in _all(data, number):
            metric = Metric(kind, description)
            if kind == "sum":
                temporality, monotonic = _one(body, 2), _one(body, 3)
                assert isinstance(temporality, int)
                metric.temporality, metric.monotonic = temporality, monotonic == 1
            for point in _all(body, 1):
                key = tuple(sorted(_attributes(_all(point, 7)).items()))
                metric.points[key] = _value(point)
                start, now = _one(point, 2), _one(point, 3)
                assert isinstance(start, bytes) and isinstance(now, bytes)
                metric.times.append((_u64(start), _u64(now)))
            return name, metric
    return name, None  # a histogram: the SDK has some, awa-fast none


def _value(point: bytes) -> float:
    as_double, as_int = _one(point, 4), _one(point, 6)
    if isinstance(as_int, bytes):
        return int(struct.unpack("<q", as_int)[0])
    assert isinstance(as_double, bytes), "a data point without a value"
    return float(struct.unpack("<d", as_double)[0])


def _u64(data: bytes) -> int:
    return int(struct.unpack("<Q", data)[0])
