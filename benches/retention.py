"""Retention a row at a time against a partition at a time, side by side on one database.

Two queues each get ``--jobs`` completed jobs in a sealed partition of ``jobs_done`` of
their own, the way a day of finishing leaves them. One queue has a retention of its own (23
hours; its jobs finished 23.5 hours ago, within the ring's day), so the cleaner deletes
them row by row, ``batch`` a statement, as it did every queue's before the ring; the
other's finished two days ago and go with their partition's TRUNCATE (migration 0030).
Prints, for each: seconds, WAL bytes and the dead tuples left in ``jobs_done``. Each round
runs on a fresh database; the ring's pass runs first in odd rounds.

    PYTHONPATH=. python benches/retention.py URL [--jobs 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import psycopg

from awa_fast.bench.measure import fresh_database
from awa_fast.db.connections import Database
from awa_fast.maintenance.cleaner import Cleaner, CleanerConfig
from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.stats import MaintenanceStats

DAY = 86400.0


def fill(url: str, jobs: int) -> None:
    """``jobs`` completed jobs of each queue, each queue's in a partition after the one in
    use, whose period is then made over, so that the next pass turns the ring."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at, slot)"
            " SELECT 'k', q.queue, 'completed', now() - q.age, (awa_fast.done_slot() + q.k) %% 8"
            " FROM (VALUES ('truncated', interval '2 days', 1),"
            "              ('deleted', interval '23.5 hours', 2)) AS q(queue, age, k),"
            "      generate_series(1, %s)",
            (jobs,),
        )
        conn.execute("VACUUM ANALYZE awa_fast.jobs_done")
        conn.execute(
            "UPDATE awa_fast.done_turns SET turned_at = now() - interval '1 day'"
            " WHERE slot = awa_fast.done_slot()"
        )


def dead_tuples(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    [(dead,)] = conn.execute(
        "SELECT COALESCE(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
        " WHERE relid IN (SELECT relid FROM pg_partition_tree('awa_fast.jobs_done'))"
    ).fetchall()
    return int(dead)


def measure(url: str, step: str, config: CleanerConfig) -> dict[str, float]:
    """One cleaner step (``free``: the ring; ``delete``: the rows of 'deleted') on its own:
    seconds, WAL bytes, and jobs_done's dead tuples after it."""

    async def main() -> int:
        leader = Leader(Database(url), interval=60.0)  # a term that outlasts the step
        cleaner = Cleaner(leader=leader, stats=MaintenanceStats(), config=config)
        assert await leader.check()
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                if step == "free":
                    return await cleaner._free_partitions(conn, dict(config.queue_retention))
                params: dict[str, Any] = {
                    "completed_s": 23 * 3600.0,
                    "failed_s": 3 * DAY,
                    "limit": config.batch,
                    "queue": "deleted",
                }
                return await cleaner._delete(conn, params)
        finally:
            await leader.close()

    with psycopg.connect(url, autocommit=True) as conn:
        dead_before = dead_tuples(conn)
        [(wal_before,)] = conn.execute("SELECT pg_current_wal_lsn()").fetchall()
        started = time.perf_counter()
        freed = asyncio.run(main())
        seconds = time.perf_counter() - started
        [(wal,)] = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (wal_before,)
        ).fetchall()
        time.sleep(1.5)  # the cleaner's session's statistics reach the views
        dead = dead_tuples(conn) - dead_before
    return {"freed": freed, "seconds": seconds, "wal": float(wal), "dead": float(dead)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = CleanerConfig(queue_retention={"deleted": (23 * 3600.0, 3 * DAY)})
    results: dict[str, list[dict[str, float]]] = {"delete": [], "free": []}
    for round_ in range(args.rounds):
        with fresh_database(args.url) as url:
            fill(url, args.jobs)
            steps = ["free", "delete"] if round_ % 2 == 0 else ["delete", "free"]
            for step in steps:
                results[step].append(measure(url, step, config))
    for step, label in (("delete", "row by row (DELETE)"), ("free", "by partition (TRUNCATE)")):
        runs = results[step]
        each = ", ".join(f"{r['seconds']:.3f}" for r in runs)
        print(
            f"{label}: {statistics.median(r['freed'] for r in runs):,.0f} jobs,"
            f" {statistics.median(r['seconds'] for r in runs):.3f} s,"
            f" {statistics.median(r['wal'] for r in runs) / 1e6:.1f} MB WAL,"
            f" {statistics.median(r['dead'] for r in runs):,.0f} dead tuples (median of"
            f" {len(runs)}; seconds {each})"
        )


if __name__ == "__main__":
    main()
