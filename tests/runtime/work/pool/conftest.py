"""Pool tests run `awa-fast serve` as a real supervisor process against a test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest

from awa_fast.localpg import LocalCluster

ROOT = Path(__file__).resolve().parents[4]  # the checkout: tests/runtime/work/pool/ is 4 deep


class Serve:
    """A running process that serves the handlers of ``app`` (a module with a ``client``,
    tests.runtime.work.pool.app unless given): `awa-fast serve APP:client ARGS...`, or with
    ``in_process``, `client.run()` or the call ``run`` (no CLI: handlers in the serving
    process itself). ``env`` adds to its environment; with ``own_group`` it leads a
    process group of its own, which :meth:`kill_group` ends whole."""

    def __init__(
        self,
        dsn: str,
        tmp_path: Path,
        *args: str,
        in_process: bool = False,
        app: str = "tests.runtime.work.pool.app",
        run: str = "client.run()",
        env: Mapping[str, str] | None = None,
        own_group: bool = False,
    ) -> None:
        self.log_path = tmp_path / f"serve-{len(list(tmp_path.glob('serve-*.log')))}.log"
        env = {
            **os.environ,
            "AWA_FAST_TEST_APP_DSN": dsn,
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
        self._log = self.log_path.open("wb")
        serving = (
            ["-c", f"from {app} import client; raise SystemExit({run})"]
            if in_process
            else ["-m", "awa_fast.cli", "serve", f"{app}:client", "--database-url", dsn]
        )
        self.proc = subprocess.Popen(
            [sys.executable, *serving, *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=own_group,
        )

    def signal(self, sig: signal.Signals = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def kill_group(self) -> None:
        """SIGKILL the supervisor and its workers at once (it must lead its own group)."""
        assert os.getpgid(self.proc.pid) == self.proc.pid, "not started with own_group"
        os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"serve did not exit within {timeout}s; its log ends:\n{self.log()[-4000:]}"
            ) from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    """A Postgres of the test's own, which it may stop and start."""
    cluster = LocalCluster.temporary()
    cluster.start()
    yield cluster
    cluster.stop(remove=True)


@pytest.fixture
def calls(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE calls (job_id bigint, pid int, attempt int, note text,"
            " at timestamptz DEFAULT clock_timestamp())"
        )
    return dsn


@pytest.fixture
def serve(calls: str, tmp_path: Path) -> Iterator[Any]:
    started: list[Serve] = []

    def start(*args: str, in_process: bool = False, **options: str) -> Serve:
        s = Serve(calls, tmp_path, *args, in_process=in_process, **options)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()
        # Captured: pytest shows it under a failed test only, where a wait timed out on
        # what the server did.
        print(f"--- {s.log_path.name}, its end ---\n{s.log()[-8000:]}")
