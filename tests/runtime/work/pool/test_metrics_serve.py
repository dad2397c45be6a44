"""`awa-fast serve --metrics-port`: the supervisor of a forked pool serves its metrics on
loopback while it runs, and lets the port go when it exits."""

from __future__ import annotations

import signal
import urllib.request
from typing import Any

import pytest

import awa_fast
from tests.helpers import free_port, prometheus_samples, states, wait_until
from tests.runtime.work.pool.app import Step


def test_serve_publishes_metrics_of_its_workers_until_it_exits(serve: Any, dsn: str) -> None:
    with awa_fast.Client(dsn) as client:
        client.insert_many([Step("record") for _ in range(20)])
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    server = serve("--processes", "2", "--queue", "default=4", "--metrics-port", str(port))
    wait_until(lambda: states(dsn) == {"completed": 20}, what="20 completions")
    # A claim is counted before its jobs are handed to the workers, so before they run.
    with urllib.request.urlopen(url, timeout=10) as response:
        found = prometheus_samples(response.read().decode())
    assert found['awa_fast_jobs_claimed_total{queue="default"}'] == 20
    assert found["awa_fast_worker_processes"] == 2
    assert found['awa_fast_queue_concurrency{queue="default"}'] == 4
    server.signal(signal.SIGTERM)
    assert server.wait(30) == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=10)
