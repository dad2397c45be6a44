"""The local Postgres the CLI starts when given no URL: announced, kept, seen and stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from awa_fast.cli import main
from awa_fast.db.migrate import current_migration_version, current_version
from awa_fast.localpg import LocalCluster


@pytest.fixture
def data_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data folder of the test's own for the CLI's cluster, and no URL in the
    environment. Under /var/tmp: as root, the server's user must reach it."""
    root = Path(tempfile.mkdtemp(prefix="awa-fast-local-", dir="/var/tmp"))
    monkeypatch.setenv("AWA_FAST_DATA_DIR", str(root))
    for name in ("AWA_FAST_DATABASE_URL", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    yield root
    LocalCluster(root).stop(remove=True)


def _local(capsys: pytest.CaptureFixture[str], action: str) -> tuple[int, dict[str, str]]:
    """``awa-fast local ACTION``'s status and its ``key: value`` lines."""
    status = main(["local", action])
    lines = capsys.readouterr().out.splitlines()
    return status, dict(line.split(": ", 1) for line in lines)


def test_the_server_a_command_starts_outlives_it_until_local_stop(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _local(capsys, "status") == (3, {"state": "absent", "data": str(data_dir)})

    first = subprocess.run(
        [sys.executable, "-m", "awa_fast.cli", "migrate"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert first.returncode == 0, first.stderr
    assert "started a local Postgres at postgresql://" in first.stderr
    assert f"(data in {data_dir})" in first.stderr
    assert "keeps running after this command; `awa-fast local stop` stops it" in first.stderr

    status, shown = _local(capsys, "status")  # the command has exited; its server has not
    assert (status, shown["state"], shown["data"]) == (0, "running", str(data_dir))
    url = shown["url"]
    assert url in first.stderr
    with psycopg.connect(url) as conn:
        assert current_version(conn) == current_migration_version()

    assert main(["status"]) == 0  # reuses the server, and says so without "started"
    reused = capsys.readouterr().err
    assert f"using local Postgres at {url}" in reused and "started" not in reused

    assert main(["local", "stop"]) == 0
    assert f"stopped; the data stays in {data_dir}" in capsys.readouterr().err
    assert _local(capsys, "status") == (3, {"state": "stopped", "url": url, "data": str(data_dir)})
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)
    assert main(["local", "stop"]) == 0
    assert f"no local Postgres runs in {data_dir}" in capsys.readouterr().err


def test_local_commands_need_no_postgres_binaries_when_there_is_no_cluster(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWA_FAST_POSTGRES_BINDIR", str(data_dir / "no-such-bindir"))
    assert _local(capsys, "status") == (3, {"state": "absent", "data": str(data_dir)})
    assert main(["local", "stop"]) == 0
    with pytest.raises(RuntimeError, match="no initdb there"):
        LocalCluster(data_dir).start()
