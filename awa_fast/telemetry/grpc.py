"""One unary gRPC call over HTTP/2, on a connection of its own: what an OTLP export is.

The Awa SDK exports its metrics with OTLP/gRPC (tonic): HTTP/2 with prior knowledge
(h2c) to the endpoint's host and port, whatever its scheme or path. Speaking the same
protocol to the same address is what lets ported code keep its collector endpoint; a
call every few seconds needs none of a gRPC library's machinery, so this is the
protocol's small core over a socket (RFC 9113): the connection preface, one stream, flow
control for the request body, and the frames a server may send meanwhile. ``https://``
endpoints get TLS with ALPN ``h2`` (the SDK sends plaintext to them).
"""

from __future__ import annotations

import socket
import ssl
import struct
import urllib.parse
from dataclasses import dataclass
from typing import NamedTuple

from awa_fast.telemetry import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Frame types (RFC 9113, 6)
DATA, HEADERS, RST_STREAM, SETTINGS = 0, 1, 3, 4
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY = 0x20
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
DEFAULT_WINDOW = 65535
MAX_FRAME = 16384  # the frame size every peer accepts, and the largest we accept
STREAM = 1  # the one stream a connection carries
FRAME_HEADER = struct.Struct(">I B I")  # length << 8 | type, flags, stream id


class GrpcError(Exception):
    """The call did not succeed: the connection failed, the server broke the protocol,
    or it answered with a gRPC status other than OK."""


class Frame(NamedTuple):
    type: int
    flags: int
    stream: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Target:
    """Where calls go: an endpoint's host and port (default 80, or 443 with TLS)."""

    host: str
    port: int
    tls: bool

    @classmethod
    def parse(cls, endpoint: str) -> Target:
        """Raise ValueError naming what is wrong with ``endpoint`` as an http(s) URL."""
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme not in ("http", "https"):
            raise ValueError(f"must be an http:// or https:// URL, got {endpoint!r}")
        if not url.hostname:
            raise ValueError(f"has no host: {endpoint!r}")
        port = url.port  # ValueError when not a port number
        tls = url.scheme == "https"
        return cls(url.hostname, (443 if tls else 80) if port is None else port, tls)

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def call(target: Target, path: str, message: bytes, *, timeout: float, user_agent: str) -> None:
    """Send ``message`` (serialized protobuf) to the method at ``path``; return once the
    server answers gRPC status OK, else raise GrpcError. ``timeout`` bounds each socket
    operation."""
    try:
        with _connect(target, timeout) as sock:
            stream = _Stream(sock)
            headers = [
                (":method", "POST"),
                (":scheme", "https" if target.tls else "http"),
                (":path", path),
                (":authority", target.authority),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("user-agent", user_agent),
            ]
            # The gRPC message prefix: not compressed, then the length.
            stream.request(headers, struct.pack(">BI", 0, len(message)) + message)
            _check(stream.response())
    except (OSError, struct.error, hpack.HpackError) as e:
        raise GrpcError(f"{type(e).__name__}: {e}") from e


def _connect(target: Target, timeout: float) -> socket.socket:
    sock = socket.create_connection((target.host, target.port), timeout=timeout)
    if not target.tls:
        return sock
    context = ssl.create_default_context()
    context.set_alpn_protocols(["h2"])
    try:
        tls = context.wrap_socket(sock, server_hostname=target.host)
    except BaseException:
        sock.close()
        raise
    if tls.selected_alpn_protocol() != "h2":
        tls.close()
        raise GrpcError(f"{target.authority} did not agree to HTTP/2 over TLS (ALPN h2)")
    return tls


def _check(headers: list[hpack.Header]) -> None:
    """Raise GrpcError unless the response's headers and trailers say OK."""
    fields = dict(headers)
    if fields.get(":status") != "200":
        raise GrpcError(f"HTTP status {fields.get(':status')}")
    status = fields.get("grpc-status")
    if status != "0":
        detail = urllib.parse.unquote(fields.get("grpc-message", ""))
        raise GrpcError(f"grpc-status {status}" + (f": {detail}" if detail else ""))


class _Stream:
    """Stream 1 of a fresh client connection, and the connection's frames around it."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._decoder = hpack.Decoder()
        self._send_window = DEFAULT_WINDOW  # the connection's
        self._stream_window = DEFAULT_WINDOW
        self._initial_window = DEFAULT_WINDOW  # the server's SETTINGS_INITIAL_WINDOW_SIZE
        self._block = bytearray()  # a header block being received
        self._in_block = False  # its last frame lacked END_HEADERS: CONTINUATION must follow
        self._block_ends_stream = False
        self._headers: list[hpack.Header] = []  # response headers, then trailers
        self._ended = False

    def request(self, headers: list[hpack.Header], body: bytes) -> None:
        """Open the connection and send the request, as the windows let the body go."""
        push_off = struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0)
        self._sock.sendall(PREFACE + _frame(SETTINGS, 0, 0, push_off))
        self._send(HEADERS, END_HEADERS, STREAM, hpack.encode(headers))
        view, sent = memoryview(body), 0
        while sent < len(body) and not self._ended:  # the server may answer early
            size = min(self._send_window, self._stream_window, MAX_FRAME, len(body) - sent)
            if size <= 0:
                self._receive(self._read())  # wait for a WINDOW_UPDATE
                continue
            last = sent + size == len(body)
            self._send(DATA, END_STREAM if last else 0, STREAM, bytes(view[sent : sent + size]))
            self._send_window -= size
            self._stream_window -= size
            sent += size

    def response(self) -> list[hpack.Header]:
        """The response's headers and trailers, once the server ended the stream."""
        while not self._ended:
            self._receive(self._read())
        return self._headers

    def _send(self, type_: int, flags: int, stream: int, payload: bytes) -> None:
        self._sock.sendall(_frame(type_, flags, stream, payload))

    def _read(self) -> Frame:
        length_type, flags, stream = FRAME_HEADER.unpack(self._read_exactly(FRAME_HEADER.size))
        length = length_type >> 8
        if length > MAX_FRAME:
            raise GrpcError(f"a frame of {length} bytes exceeds the {MAX_FRAME} allowed")
        payload = self._read_exactly(length)
        return Frame(length_type & 0xFF, flags, stream & 0x7FFFFFFF, payload)

    def _read_exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self._sock.recv(left)
            if not chunk:
                raise GrpcError("the server closed the connection before answering")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _receive(self, frame: Frame) -> None:
        """Act on one frame from the server."""
        if self._in_block != (frame.type == CONTINUATION):
            raise GrpcError("a header block was interrupted by another frame")
        if frame.type == SETTINGS and not frame.flags & ACK:
            self._settings(frame.payload)
            self._send(SETTINGS, ACK, 0, b"")
        elif frame.type == PING and not frame.flags & ACK:
            self._send(PING, ACK, 0, frame.payload)
        elif frame.type == WINDOW_UPDATE:
            (increment,) = struct.unpack(">I", frame.payload)
            if frame.stream == 0:
                self._send_window += increment & 0x7FFFFFFF
            else:
                self._stream_window += increment & 0x7FFFFFFF
        elif frame.type == GOAWAY:
            last_stream, code = struct.unpack(">II", frame.payload[:8])
            if last_stream & 0x7FFFFFFF < STREAM or code:
                raise GrpcError(f"the server went away (HTTP/2 error code {code})")
        elif frame.type == RST_STREAM and frame.stream == STREAM:
            (code,) = struct.unpack(">I", frame.payload)
            raise GrpcError(f"the server reset the stream (HTTP/2 error code {code})")
        elif frame.type in (HEADERS, CONTINUATION) and frame.stream == STREAM:
            self._header_fragment(frame)
        elif frame.type == DATA and frame.stream == STREAM:
            self._ended = bool(frame.flags & END_STREAM)  # the reply message is empty

    def _settings(self, payload: bytes) -> None:
        for offset in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                self._stream_window += value - self._initial_window
                self._initial_window = value

    def _header_fragment(self, frame: Frame) -> None:
        payload = frame.payload
        if frame.type == HEADERS:
            start, end = 0, len(payload)
            if frame.flags & PADDED:
                start, end = 1, end - payload[0]
            if frame.flags & PRIORITY:
                start += 5
            payload = payload[start:end]
            self._block_ends_stream = bool(frame.flags & END_STREAM)
        self._block += payload
        self._in_block = not frame.flags & END_HEADERS
        if not self._in_block:
            self._headers += self._decoder.decode(bytes(self._block))
            self._block.clear()
            self._ended = self._block_ends_stream


def _frame(type_: int, flags: int, stream: int, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload) << 8 | type_, flags, stream) + payload
