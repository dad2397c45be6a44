"""``awa-fast bench``: built-in scenarios measured against a real, durable Postgres.

Each run gets a fresh database; every result records commits and WAL bytes per job
(``pg_stat_database`` and ``pg_current_wal_lsn`` deltas) next to its throughput.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.client import AsyncClient
from awa_fast.db.migrate import migrate
from awa_fast.worker import Job

_serial = itertools.count()


def fresh_database(server_url: str) -> str:
    """A new, migrated database on the server of ``server_url``."""
    name = f"awa_fast_bench_{os.getpid()}_{next(_serial)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = server_url.rsplit("/", 1)[0] + "/" + name
    migrate(url)
    return url


def drop_database(server_url: str, url: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


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


def server_settings(url: str) -> dict[str, str]:
    names = ("server_version", "fsync", "synchronous_commit", "shared_buffers")
    with psycopg.connect(url) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in names}  # type: ignore[index]


@dataclass
class Noop:
    n: int


@dataclass
class Burn:
    ms: float


def burn_cpu(job: Job[Burn]) -> None:
    """Pure-Python CPU for ``job.args.ms`` milliseconds (a sync handler)."""
    until = time.perf_counter() + job.args.ms / 1000
    while time.perf_counter() < until:
        pass


async def _timed_drain(
    url: str,
    client: AsyncClient,
    items: list[Any],
    *,
    queues: dict[str, int],
    processes: int | None,
    scenario: str,
) -> dict[str, Any]:
    """Insert ``items``, start the pool, and time until every job's outcome is committed."""
    jobs = len(items)
    await client.insert_many(items)
    before = Counters.read(url)
    started = time.perf_counter()
    runner = await client.start(queues, processes=processes)
    finished = await asyncio.to_thread(runner.committer.wait_committed, jobs, 600.0)
    elapsed = time.perf_counter() - started
    await client.close()
    if not finished:
        raise RuntimeError(f"{scenario} of {jobs} jobs did not finish within 600 s")
    commits, wal = before.delta(Counters.read(url), url)
    where = f"{processes} worker processes" if processes else "1 process"
    return {
        "scenario": scenario,
        "system": f"awa-fast ({where})",
        "processes": processes or 0,
        "jobs": jobs,
        "seconds": round(elapsed, 4),
        "jobs_per_s": round(jobs / elapsed, 1),
        "commits_per_job": round(commits / jobs, 4),
        "wal_bytes_per_job": round(wal / jobs, 1),
    }


async def cpu(url: str, *, jobs: int, processes: int | None = None) -> dict[str, Any]:
    """``jobs`` handlers each burning 1 ms of pure-Python CPU."""
    client = AsyncClient(url)
    client.task(Burn)(burn_cpu)
    workers = processes or 1
    return await _timed_drain(
        url,
        client,
        [Burn(1.0) for _ in range(jobs)],
        queues={"default": 2 * workers},
        processes=processes,
        scenario="cpu",
    )


async def drain(
    url: str, *, jobs: int, processes: int | None = None, concurrency: int = 1000
) -> dict[str, Any]:
    """``jobs`` pre-inserted no-op jobs drained to committed completion, by this process
    (``processes=None``) or by that many forked worker processes."""
    client = AsyncClient(url)

    @client.task(Noop)
    async def noop(job: Job[Noop]) -> None:
        return None

    return await _timed_drain(
        url,
        client,
        [Noop(i) for i in range(jobs)],
        queues={"default": concurrency},
        processes=processes,
        scenario="drain",
    )


SCENARIOS = {"drain": drain, "cpu": cpu}


def run_scenario(
    server_url: str, scenario: str, *, runs: int, jobs: int, processes: int | None = None
) -> list[dict[str, Any]]:
    """Run ``scenario`` ``runs`` times, each on a fresh database; returns one dict per run."""
    import uvloop

    results = []
    for _ in range(runs):
        url = fresh_database(server_url)
        try:
            results.append(uvloop.run(SCENARIOS[scenario](url, jobs=jobs, processes=processes)))
        finally:
            drop_database(server_url, url)
    return results


def median_row(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose throughput is the median (its own counters stay consistent)."""
    ordered = sorted(results, key=lambda r: r["jobs_per_s"])
    median = dict(ordered[len(ordered) // 2])
    median["median_of"] = len(results)
    median["jobs_per_s_all"] = [r["jobs_per_s"] for r in results]
    median["jobs_per_s"] = statistics.median(r["jobs_per_s"] for r in results)
    return median
