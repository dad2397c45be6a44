"""`awa-fast serve --maintenance-only`: a supervisor that leads and reports its health and
metrics, forks nothing and claims nothing, and refuses the options of a job host."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

import awa_fast
from tests.helpers import free_port, prometheus_samples, wait_until
from tests.runtime.work.pool.app import Step


def _health(port: int) -> dict[str, Any] | None:
    """/health's answer, whatever its status; None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as unhealthy:
        return dict(json.loads(unhealthy.read()))
    except OSError:
        return None


def _children(pid: int) -> list[str]:
    """The processes ``pid`` forked that still run (from every thread of it)."""
    return [
        child
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def test_serve_maintenance_only_leads_forks_nothing_and_claims_nothing(
    serve: Any, dsn: str
) -> None:
    with awa_fast.Client(dsn) as client:
        ids = client.insert_many([Step("record") for _ in range(5)])
    port = free_port()
    server = serve("--maintenance-only", "--metrics-port", str(port))
    wait_until(
        lambda: (_health(port) or {}).get("leader") is True,
        what="the maintenance-only host to lead",
        explain=server.log,
    )
    health = _health(port)
    assert health is not None and health["healthy"] and health["queues"] == {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        samples = prometheus_samples(response.read().decode())
    assert samples["awa_fast_worker_processes"] == 0
    assert _children(server.proc.pid) == []  # no fork server, no worker
    with psycopg.connect(dsn) as conn:
        leases = conn.execute(
            "SELECT run_lease FROM awa_fast.jobs WHERE id = ANY(%s)", (ids,)
        ).fetchall()
        assert leases == [(0,)] * 5  # waited through its start and election, unclaimed
    server.signal(signal.SIGTERM)
    assert server.wait(30) == 0
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa_fast.hosts").fetchone() == (0,)


def test_serve_maintenance_only_refuses_queues_and_worker_processes(serve: Any) -> None:
    with_queues = serve("--maintenance-only", "--queue", "default=2")
    assert with_queues.wait(30) == 2
    assert "give it no queues" in with_queues.log()
    with_processes = serve("--maintenance-only", "--processes", "2")
    assert with_processes.wait(30) == 1
    assert "--maintenance-only runs no worker processes" in with_processes.log()
