"""What the jobs_hot insert trigger costs an insert: the current trigger function against
the first one (migration 0001's, which only sent the NOTIFY), alternating, on a fresh
database with no standby claim waiting (the case of nearly every insert under load).

Each round runs one-row inserts in a server-side DO loop, rolled back, under each function
in turn; it prints the median microseconds an insert over the rounds. The loop's own cost
is in both figures: their difference is the trigger's.

    PYTHONPATH=. python benches/insert_trigger_cost.py URL [--rounds 25] [--inserts 5000]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

import psycopg

from awa_fast.bench.measure import fresh_database

MIGRATIONS = Path(__file__).resolve().parent.parent / "awa_fast" / "db" / "migrations"


def first_trigger_function() -> str:
    """Migration 0001's notify_inserted, as a CREATE OR REPLACE."""
    sql = (MIGRATIONS / "0001_init.sql").read_text()
    found = re.search(r"CREATE FUNCTION awa_fast\.notify_inserted\(\).*?\$\$;", sql, re.S)
    if found is None:
        raise SystemExit("notify_inserted not found in 0001_init.sql")
    return found[0].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def insert_us(url: str, function: str, inserts: int) -> float:
    """Microseconds an insert of ``inserts`` one-row inserts under ``function``."""
    loop = (
        f"DO $$ BEGIN FOR i IN 1..{inserts} LOOP"
        " INSERT INTO awa_fast.jobs_hot (kind, queue) VALUES ('k', 'q'); END LOOP; END $$"
    )
    with psycopg.connect(url) as conn:
        conn.execute(function)
        conn.commit()
        began = time.perf_counter()
        conn.execute(loop)
        took = time.perf_counter() - began
        conn.rollback()
    return took / inserts * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a Postgres server URL (a fresh database is made)")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--inserts", type=int, default=5000)
    args = parser.parse_args()
    first = first_trigger_function()
    with fresh_database(args.url) as url:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT pg_get_functiondef('awa_fast.notify_inserted'::regproc)"
            ).fetchone()
        assert row is not None
        current = str(row[0])
        timings: dict[str, list[float]] = {"first": [], "current": []}
        for _ in range(args.rounds):
            timings["first"].append(insert_us(url, first, args.inserts))
            timings["current"].append(insert_us(url, current, args.inserts))
    medians = {name: statistics.median(us) for name, us in timings.items()}
    print(
        f"median us an insert over {args.rounds} rounds: first trigger {medians['first']:.1f},"
        f" current {medians['current']:.1f}, difference"
        f" {medians['current'] - medians['first']:.1f}"
    )


if __name__ == "__main__":
    main()
