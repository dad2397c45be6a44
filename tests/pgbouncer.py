"""A real PgBouncer in transaction pooling mode, on a loopback port in front of the test
Postgres: Debian's ``pgbouncer`` package, which CI installs (a missing one fails the
tests that need it, it does not skip them)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg import conninfo

from awa_fast.localpg import free_port, service_user
from tests.helpers import wait_until

# What PgBouncer itself sets on a server session for each client it lends it to.
TRACKED = (
    "application_name",
    "client_encoding",
    "datestyle",
    "timezone",
    "standard_conforming_strings",
)


def _reachable(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


class PgBouncer:
    """PgBouncer serving every database of the server at ``server_url`` through at most
    ``pool_size`` server sessions each, so that clients share them as they would in a
    fleet. Its own log is ``root/pgbouncer.log``."""

    def __init__(self, server_url: str, *, pool_size: int = 4) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer not found: apt-get install pgbouncer (.ci/run does)")
        server = conninfo.conninfo_to_dict(server_url)
        self.port = free_port()
        self.user = str(server.get("user", "postgres"))
        self.pool_size = pool_size
        # where the service user can reach it (pytest's own folders are root's alone)
        self.root = root = Path(tempfile.mkdtemp(prefix="awa-fast-pgbouncer-", dir="/var/tmp"))
        entry = " ".join(
            f"{key}={server[key]}" for key in ("host", "port", "user", "password") if key in server
        )
        config = root / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = {entry}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = any\n"  # every client logs in as the database entry's user
            "pool_mode = transaction\n"
            "max_client_conn = 500\n"
            f"default_pool_size = {pool_size}\n"
            f"logfile = {root / 'pgbouncer.log'}\n"
        )
        user = service_user()  # pgbouncer refuses to run as root
        if user is not None:
            shutil.chown(root, user)
        self._log = (root / "stdout.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, *(["-u", user] if user else []), str(config)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: self._up(server_url), timeout=10, what="pgbouncer to listen")

    def _up(self, server_url: str) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited: {(self.root / 'stdout.log').read_text()}")
        return _reachable(self.url(server_url))

    def url(self, dsn: str) -> str:
        """The URL of ``dsn``'s database through this pooler."""
        name = conninfo.conninfo_to_dict(dsn)["dbname"]
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{name}"

    def server_sessions(self, dsn: str) -> list[dict[str, object]]:
        """What each server session the pooler holds to ``dsn``'s database carries over
        from its last client: prepared statements, channels listened to, and the
        settings a client may have changed. Holding a transaction open on as many
        clients as the pool has sessions reaches every one of them."""
        query = (
            "SELECT pg_backend_pid() AS pid,"
            " (SELECT count(*) FROM pg_prepared_statements) AS prepared,"
            " (SELECT count(*) FROM pg_listening_channels()) AS listening,"
            " (SELECT array_agg(name ORDER BY name) FROM pg_settings"
            "  WHERE source = 'session' AND NOT name = ANY(%s)) AS settings"
        )
        conns = [
            psycopg.connect(self.url(dsn), prepare_threshold=None) for _ in range(self.pool_size)
        ]
        try:
            # each in a transaction of its own, so each on a server session of its own
            seen = [conn.execute(query, (list(TRACKED),)).fetchone() for conn in conns]
        finally:
            for conn in conns:
                conn.close()
        names = ("pid", "prepared", "listening", "settings")
        return [dict(zip(names, row, strict=True)) for row in seen if row is not None]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
