"""One gRPC call over HTTP/2 to a local receiver: what arrives, flow control for a body
past the first window, the server's status, TLS, and the failures a caller sees."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from awa_fast.telemetry import grpc
from awa_fast.telemetry.grpc import GrpcError, Target
from tests.helpers import free_port
from tests.telemetry.collector import Collector

PATH = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"


def call(endpoint: str, message: bytes) -> None:
    grpc.call(Target.parse(endpoint), PATH, message, timeout=10, user_agent="test-agent")


def test_a_call_arrives_with_grpc_headers() -> None:
    with Collector() as collector:
        call(f"http://localhost:{collector.port}/v1/metrics", b"hello")
    (request,) = collector.requests
    assert request.message == b"hello"
    assert request.headers == {
        ":method": "POST",
        ":scheme": "http",
        ":path": PATH,  # the endpoint's own path plays no part, as with the SDK
        ":authority": f"localhost:{collector.port}",
        "content-type": "application/grpc",
        "te": "trailers",
        "user-agent": "test-agent",
    }


def test_a_body_past_the_first_window_waits_for_credit() -> None:
    message = bytes(range(256)) * 1000  # 256000 bytes: four windows of 65535
    with Collector() as collector:
        call(collector.endpoint, message)
    assert [r.message for r in collector.requests] == [message]


def test_a_status_other_than_ok_raises_with_its_message() -> None:
    with (
        Collector(status=14, status_message="try later") as collector,
        pytest.raises(GrpcError, match="grpc-status 14: try later"),
    ):
        call(collector.endpoint, b"x")
    assert len(collector.requests) == 1


def test_a_refused_connection_raises() -> None:
    with pytest.raises(GrpcError, match="ConnectionRefusedError"):
        call(f"http://127.0.0.1:{free_port()}", b"x")


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost, and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-nodes", "-days", "1", "-subj", "/CN=localhost"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-addext", "subjectAltName=DNS:localhost", "-keyout", key, "-out", cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    return context


def test_https_calls_over_tls_and_verify_the_certificate(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    with Collector(tls=server_context(cert, key)) as collector:
        with pytest.raises(GrpcError, match="CERTIFICATE_VERIFY_FAILED"):
            call(collector.endpoint, b"untrusted")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust it (the default context)
        call(collector.endpoint, b"trusted")
    assert [(r.headers[":scheme"], r.message) for r in collector.requests] == [
        ("https", b"trusted")
    ]


@pytest.mark.parametrize(
    ("endpoint", "target"),
    [
        ("http://collector", Target("collector", 80, tls=False)),
        ("https://collector/v1/metrics", Target("collector", 443, tls=True)),
        ("http://[::1]:4317", Target("::1", 4317, tls=False)),
    ],
)
def test_an_endpoint_is_its_host_and_port(endpoint: str, target: Target) -> None:
    assert Target.parse(endpoint) == target


def test_an_ipv6_authority_is_bracketed() -> None:
    assert Target.parse("http://[::1]:4317").authority == "[::1]:4317"
