"""The wheel a user installs, checked as that user gets it.

Builds the abi3 wheel and the sdist with maturin, checks that they carry every file of the
package (the SQL and the type stubs among them) and that the wheel's tag is manylinux,
installs the wheel into a fresh virtualenv whose PATH holds no compiler, and runs it from
there: the CLI starts a local Postgres and migrates it, a few thousand jobs go in, `awa-fast
serve` drains them, its /health and /metrics answer, and so does the dashboard. Run by
.ci/run; exits non-zero on the first check that fails. A new check of the installed
package goes in ``smoke``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The oldest glibc the extension's symbols allow when it is built on this machine's (2.36):
# maturin's auditwheel check refuses the build if the extension needs a newer one.
MANYLINUX = "manylinux_2_34"
# What a source build needs: none of it may be on the virtualenv's PATH.
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "cargo", "rustc", "rustup", "maturin")
# The only tools the virtualenv's PATH gets beside its own: the local cluster runs the
# server as an unprivileged user through runuser when root.
TOOLS = ("runuser",)
# What the wheel must carry whatever git says: the extension, its stubs, the SQL.
CARRIED = (
    "awa_fast/_core.abi3.so",
    "awa_fast/_core.pyi",
    "awa_fast/py.typed",
    "awa_fast/db/sql/jobs.sql",
    "awa_fast/db/migrations/0001_init.sql",
)
# Variables that would lead the virtualenv's commands elsewhere than the wheel's install
# and its own local cluster.
DROPPED = ("VIRTUAL_ENV", "PYTHONPATH", "AWA_FAST_DATABASE_URL", "DATABASE_URL")
JOBS = 3000
DRAIN_TIMEOUT = 120.0

APP = """\
import os

import awa_fast

client = awa_fast.Client(os.environ["AWA_FAST_DATABASE_URL"])


@client.task(kind="smoke", queue="smoke")
async def smoke(job: awa_fast.Job[dict]) -> None:
    pass


def fill(count: int) -> None:
    with client:
        client.insert_many(({"n": n} for n in range(count)), kind="smoke", queue="smoke")
"""


def main() -> int:
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="awa-fast-wheel-", dir="/var/tmp"))
    work.chmod(0o755)  # the local cluster's server user must reach its data folder in here
    try:
        wheel, sdist = build(work / "dist")
        check_wheel(wheel)
        check_sdist(sdist)
        env = no_compiler_env(work)
        install(wheel, env)
        smoke(work, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wheel smoke run: passed in {time.monotonic() - began:.0f}s")
    return 0


def build(out: Path) -> tuple[Path, Path]:
    """The wheel and the sdist, as a release builds them."""
    maturin = [sys.executable, "-m", "maturin"]
    run([*maturin, "build", "--release", "--compatibility", MANYLINUX, "--out", str(out)])
    run([*maturin, "sdist", "--out", str(out)])
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return wheel, sdist


def tracked(*paths: str) -> set[str]:
    """The files git tracks under ``paths``: what a distribution must carry."""
    out = subprocess.run(
        ["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def check_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [tags] = [name for name in names if name.endswith(".dist-info/WHEEL")]
        tag = next(
            line.split(": ")[1]
            for line in archive.read(tags).decode().splitlines()
            if line.startswith("Tag: ")
        )
    expect(tag.startswith(f"cp311-abi3-{MANYLINUX}_"), f"wheel tag {tag}")
    missing = sorted(tracked("awa_fast") - names)
    expect(not missing, f"wheel carries every package file (missing: {missing})")
    for needed in CARRIED:
        expect(needed in names, f"wheel carries {needed}")
    print(f"wheel {wheel.name}: {len(names)} files, tag {tag}")


def check_sdist(sdist: Path) -> None:
    with tarfile.open(sdist) as archive:
        names = {name.partition("/")[2] for name in archive.getnames()}
    needed = tracked("awa_fast", "rust", "Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md")
    missing = sorted(needed - names)
    expect(not missing, f"sdist carries every file a build needs (missing: {missing})")
    print(f"sdist {sdist.name}: {len(names)} files")


def no_compiler_env(work: Path) -> dict[str, str]:
    """A fresh virtualenv's environment, with a PATH of its bin and ``TOOLS`` only."""
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    tools = work / "tools"
    tools.mkdir()
    for tool in TOOLS:
        where = shutil.which(tool)
        if where:
            (tools / tool).symlink_to(where)
    path = f"{work / 'venv' / 'bin'}{os.pathsep}{tools}"
    compilers = {name: shutil.which(name, path=path) for name in COMPILERS}
    expect(not any(compilers.values()), f"no compiler on the virtualenv's PATH: {compilers}")
    env = {name: value for name, value in os.environ.items() if name not in DROPPED}
    env.update(PATH=path, VIRTUAL_ENV=str(work / "venv"), AWA_FAST_DATA_DIR=str(work / "pg"))
    return env


def install(wheel: Path, env: dict[str, str]) -> None:
    """One pip command, as a user types it, with nothing to compile anything with."""
    run(["pip", "install", "--no-cache-dir", "--quiet", f"{wheel}[ui]"], env=env)
    impl = run(["python", "-c", "import psycopg; print(psycopg.pq.__impl__)"], env=env)
    expect(impl.strip() == "binary", f"psycopg's implementation is binary, not {impl.strip()}")
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    shown = run(["awa-fast", "--version"], env=env).strip()
    expect(shown == f"awa-fast {cargo}", f"awa-fast --version says {shown!r}")


def smoke(work: Path, env: dict[str, str]) -> None:
    """Migrate, insert, drain with ``awa-fast serve`` and scrape it, on the local cluster
    the CLI starts; then stop that cluster."""
    try:
        started = run(["awa-fast", "migrate"], env=env, stderr=True)
        expect("started a local Postgres" in started, "the CLI says it started a server")
        status = run(["awa-fast", "local", "status"], env=env).splitlines()
        env["AWA_FAST_DATABASE_URL"] = dict(line.split(": ", 1) for line in status)["url"]
        app = work / "app"
        app.mkdir()
        (app / "smoke_app.py").write_text(APP)
        run(["python", "-c", f"import smoke_app; smoke_app.fill({JOBS})"], env=env, cwd=app)
        port = free_port()
        with serving(env, app, port):
            drained(port)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health") as response:
                health = json.loads(response.read())
            expect(health["healthy"] is True, f"/health says healthy: {health}")
        [queue] = json.loads(run(["awa-fast", "status"], env=env))
        expect(queue["completed_last_hour"] == JOBS, f"every job completed: {queue}")
        dashboard(env)
        print(f"smoke run: serve drained {JOBS} jobs; /health, /metrics and the dashboard answered")
    finally:
        run(["awa-fast", "local", "stop"], env=env)
    stopped = subprocess.run(["awa-fast", "local", "status"], env=env, capture_output=True)
    expect(stopped.returncode == 3, "local status says stopped after local stop")


def dashboard(env: dict[str, str]) -> None:
    """``awa-fast ui`` (the ui extra) shows the smoke queue on its overview."""
    port = free_port()
    server = subprocess.Popen(["awa-fast", "ui", "--port", str(port)], env=env)
    try:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as response:
                    page = response.read().decode()
                break
            except OSError:  # not listening yet
                expect(time.monotonic() < deadline, "the dashboard answers")
                time.sleep(0.2)
        expect("smoke" in page, "the dashboard's overview lists the smoke queue")
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextmanager
def serving(env: dict[str, str], app: Path, port: int) -> Iterator[None]:
    """``awa-fast serve`` of the smoke app, stopped with SIGTERM as a service manager would."""
    command = ["awa-fast", "serve", "smoke_app:client", "--processes", "2", "--queue", "smoke=64"]
    server = subprocess.Popen([*command, "--metrics-port", str(port)], env=env, cwd=app)
    try:
        yield
        server.send_signal(signal.SIGTERM)
        expect(server.wait(timeout=60) == 0, "serve exits 0 on SIGTERM")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def drained(port: int) -> None:
    """Wait until serve's /metrics counts every job completed."""
    line = f'awa_fast_outcomes_committed_total{{outcome="completed"}} {JOBS}'
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
                if line in response.read().decode().splitlines():
                    return
        except OSError:  # not listening yet
            pass
        time.sleep(0.2)
    raise SystemExit(f"wheel smoke run: serve did not complete {JOBS} jobs in {DRAIN_TIMEOUT}s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    stderr: bool = False,
) -> str:
    """``command``'s stdout (or stderr), failing the run with both if it fails."""
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"wheel smoke run: {' '.join(command)} exited {done.returncode}")
    return done.stderr if stderr else done.stdout


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"wheel smoke run: expected {what}")


if __name__ == "__main__":
    sys.exit(main())
