"""What every scenario measures, and how: a fresh database per run, commit and WAL
counters, the machine and server a figure depends on, peak RSS, percentiles, and the
measured ``Window`` that yields the core result keys (``RESULT_KEYS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import psycopg

from awa_fast.db.dsn import with_database
from awa_fast.db.migrate import migrate
from awa_fast.producer_sync import insert_many
from awa_fast.runtime.runner import Runner

RESULT_KEYS = (
    "scenario",
    "system",
    "variant",
    "processes",
    "jobs",
    "seconds",
    "jobs_per_s",
    "completed",
    "commits_per_job",
    "wal_bytes_per_job",
    "rss_kib",
    "env",
)
Progress = Callable[[float], None]  # fraction done, 0..1
_serial = itertools.count()

# -- databases and counters ----------------------------------------------------------------


@contextlib.contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """The URL of a new, migrated database on the server of ``server_url``, dropped on
    the way out (every run starts from an empty schema and leaves nothing behind)."""
    name = f"awa_fast_bench_{os.getpid()}_{next(_serial)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    try:
        url = with_database(server_url, name)
        migrate(url)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@dataclass(frozen=True, slots=True)
class Counters:
    """Commit count and WAL position of one database at one moment."""

    commits: int
    wal_lsn: str

    @classmethod
    def read(cls, url: str) -> Counters:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            row = conn.execute(
                "SELECT xact_commit, pg_current_wal_lsn()::text FROM pg_stat_database "
                "WHERE datname = current_database()"
            ).fetchone()
            assert row is not None
            return cls(int(row[0]), str(row[1]))

    def delta(self, later: Counters, url: str) -> tuple[int, int]:
        """(commits, WAL bytes) from this reading to ``later``."""
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (later.wal_lsn, self.wal_lsn)
            ).fetchone()
            assert row is not None
            return later.commits - self.commits, int(row[0])


# -- the machine and the server ------------------------------------------------------------

SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "wal_compression",
    "shared_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
    "max_connections",
)
PACKAGES = ("awa-fast", "psycopg", "psycopg-c", "psycopg-pool", "uvloop", "msgspec", "orjson")


def server_settings(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return {
            name: str(row[0])
            for name in SETTINGS
            if (row := conn.execute(f"SHOW {name}").fetchone()) is not None
        }


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@functools.cache
def _host() -> dict[str, Any]:
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {n: v for n in PACKAGES if (v := _package_version(n)) is not None},
    }


def environment(url: str) -> dict[str, Any]:
    """What a figure depends on besides the code: recorded with every run."""
    return {**_host(), "postgres": server_settings(url)}


def cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine so far, in clock ticks (``/proc/stat``);
    None where there is no ``/proc``. Busy is all but idle and iowait: time the hypervisor
    stole counts as busy, a core this machine did not get."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:9]]  # user .. steal
    except (OSError, ValueError):
        return None
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


def busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """How much of the machine's CPU was busy between two ``cpu_jiffies`` readings: a run
    that left cores idle waited on something other than CPU (an fsync, a round trip)."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 3)


# -- per-process CPU -----------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ProcessStat:
    """What ``/proc/<pid>/stat`` says of a process that a CPU split needs."""

    name: str  # the command name, as the kernel keeps it
    parent: int
    cpu_s: float  # user + system time so far


def process_stat(pid: int) -> ProcessStat:
    """``pid``'s name, parent and CPU seconds (OSError once the process is gone)."""
    with open(f"/proc/{pid}/stat") as stat:
        head, tail = stat.read().rsplit(")", 1)
    fields = tail.split()
    cpu_s = (int(fields[11]) + int(fields[12])) / _TICKS
    return ProcessStat(head.partition("(")[2], int(fields[1]), cpu_s)


# -- per-process memory --------------------------------------------------------------------


def peak_rss_kib(pid: int) -> int | None:
    """``VmHWM`` of ``pid`` (peak resident set), None once the process is gone."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def reset_peak_rss() -> None:
    """Start this process's ``VmHWM`` afresh, so one run's peak is not an earlier run's."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def rss_of(runner: Runner) -> dict[str, Any]:
    """Peak RSS of the supervisor (this process) and of each live worker process."""
    pids: list[int] = list(getattr(runner.workers, "pids", []))
    workers = [kib for pid in pids if (kib := peak_rss_kib(pid)) is not None]
    return {"supervisor": peak_rss_kib(os.getpid()), "workers": workers}


# -- statistics ----------------------------------------------------------------------------


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p95/p99/max (nearest rank) of ``values`` (non-empty), rounded to 0.001."""
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]

    return {
        "p50": round(rank(0.50), 3),
        "p95": round(rank(0.95), 3),
        "p99": round(rank(0.99), 3),
        "max": round(ordered[-1], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


# -- one measured window -------------------------------------------------------------------


@dataclass
class Window:
    """What a scenario measures between starting its pool and its last commit.

    Commit counts come from ``pg_stat_database``, which a backend updates only when it has
    been idle for a second or when it exits. So both readings are taken with no other
    connection to the database: inserts run on a connection closed before the window
    opens, and the final reading waits until the pool's connections have closed.
    """

    url: str
    scenario: str
    processes: int | None
    before: Counters = field(init=False)
    started: float = field(init=False)
    elapsed: float = field(init=False, default=0.0)
    rss: dict[str, Any] = field(init=False, default_factory=dict)
    jiffies: tuple[int, int] | None = field(init=False)
    cpu_busy: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        reset_peak_rss()
        quiesce(self.url)
        self.before = Counters.read(self.url)
        self.go()

    def go(self) -> None:
        """The pool is up (workers forked, connections open): start the clock here, as the
        peer harness does when it tells its ready workers to go. Commits and WAL still
        count from the quiesced reading taken before the pool started."""
        self.started = time.perf_counter()
        self.jiffies = cpu_jiffies()

    def stop(self, runner: Runner, *, seconds: float | None = None) -> None:
        """The measured work is done: take the time, the machine's busy share over it and
        (workers still alive) peak RSS. A scenario that times its work itself (``seconds``)
        gets no busy share: the window's own span is not what it measured."""
        if seconds is None:
            self.elapsed = time.perf_counter() - self.started
            self.cpu_busy = busy_share(self.jiffies, cpu_jiffies())
        else:
            self.elapsed = seconds
        self.rss = rss_of(runner)

    def result(self, *, jobs: int) -> dict[str, Any]:
        """The core keys; call after closing the client."""
        quiesce(self.url)
        commits, wal = self.before.delta(Counters.read(self.url), self.url)
        return {
            "scenario": self.scenario,
            "system": system_name(self.processes),
            "variant": "",
            "processes": self.processes or 0,
            "jobs": jobs,
            "seconds": round(self.elapsed, 4),
            "jobs_per_s": round(jobs / self.elapsed, 1),
            "completed": completed_jobs(self.url),
            "commits_per_job": round(commits / jobs, 4),
            "wal_bytes_per_job": round(wal / jobs, 1),
            "rss_kib": self.rss,
            "cpu_busy": self.cpu_busy,
            "env": environment(self.url),
        }


_OTHER_SESSIONS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def _await_sessions(
    url: str, where: str, *, done: Callable[[int], bool], timeout: float, interval: float
) -> bool:
    """Poll how many other connections to ``url``'s database match ``where`` until
    ``done(count)``; False if ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    sql = f"SELECT count(*) {_OTHER_SESSIONS} AND {where}"
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(sql).fetchone()
            if row is not None and done(row[0]):
                return True
            time.sleep(interval)
    return False


_CLIENTS = "backend_type = 'client backend'"


def quiesce(url: str, *, timeout: float = 10.0) -> None:
    """Until no other client is connected to ``url``'s database (their stats
    flushed). An autovacuum worker is not waited for: a run that inserts and deletes
    enough rows draws one to its database at a moment of the server's choosing, and it
    stays as long as the whole database takes to vacuum."""
    if not _await_sessions(url, _CLIENTS, done=lambda n: n == 0, timeout=timeout, interval=0.01):
        with psycopg.connect(url, autocommit=True) as conn:
            left = conn.execute(
                f"SELECT application_name, state, left(query, 60) {_OTHER_SESSIONS} AND {_CLIENTS}"
            ).fetchall()
        raise RuntimeError(f"sessions still connected to {url} after {timeout} s: {left}")


def wait_for_listener(url: str, *, timeout: float = 10.0) -> bool:
    """Until a connection to this database sits idle in LISTEN: only then are workers (any
    system's that LISTENs) started and waiting for a wake-up."""
    listening = "state = 'idle' AND query ILIKE 'LISTEN%%'"
    return _await_sessions(url, listening, done=bool, timeout=timeout, interval=0.02)


def insert_items(url: str, items: list[Any], **options: Any) -> None:
    """Insert ``items`` (``insert_many``) on a connection of their own, closed before measuring
    starts."""
    with psycopg.connect(url, autocommit=True) as conn:
        insert_many(conn, items, **options)


def system_name(processes: int | None) -> str:
    if not processes:
        return "awa-fast (1 process)"
    return f"awa-fast ({processes} worker process{'es' if processes > 1 else ''})"


def completed_jobs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM awa_fast.jobs WHERE state = 'completed'")
        return int(row.fetchone()[0])  # type: ignore[index]


async def wait_done(
    runner: Runner, count: int, *, timeout: float, progress: Progress | None = None
) -> None:
    """Until ``count`` outcomes are committed; reports progress while it waits. Waits in
    short slices so that a failing run does not leave a thread blocked for ``timeout``."""
    deadline = time.monotonic() + timeout
    committer = runner.committer
    while not await asyncio.to_thread(committer.wait_committed, count, 0.2):
        if progress is not None:
            progress(min(1.0, committer.committed / max(count, 1)))
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {committer.committed} of {count} outcomes in {timeout} s")
    if progress is not None:
        progress(1.0)
