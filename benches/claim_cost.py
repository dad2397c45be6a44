"""What Postgres spends on a job by claim size: the CPU of the claiming backend and of the
completing one, per job, when jobs are claimed N at a time and each claim's jobs are then
completed in one statement, as the committer does.

Each round makes a fresh database, inserts the jobs in bulk (packs, as the cpu scenario
does; ``--rows`` inserts plain rows instead), then claims them with the runner's claim
statement on one connection and completes them with ``job_complete_many`` on another,
both with the settings of the runner's connections.
The backends' CPU is read from /proc, so the server must run on this machine. Sizes are
interleaved within each round; medians over the rounds are printed. A claim's fixed cost
is what the per-job figure loses as the size grows. ``--backlog N`` first adds N available
rows behind the measured jobs (the lowest priority, analyzed), so that each claim runs on
a queue of that size.

    PYTHONPATH=. python benches/claim_cost.py URL [--sizes 16,48,128,500] [--jobs 10000]
        [--rows] [--backlog 0]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import awa_fast
from awa_fast.bench.measure import fresh_database, process_stat
from awa_fast.db.connections import Database, attempts_params, connect_hot
from awa_fast.db.queries import Q


@dataclass
class Burn:
    n: int


@dataclass(frozen=True, slots=True)
class Cost:
    """CPU microseconds per job of the two backends."""

    claim_us: float
    complete_us: float


def backend_cpu(conn: psycopg.Connection[Any]) -> float:
    """CPU seconds (user + system) of ``conn``'s backend so far."""
    return process_stat(conn.info.backend_pid).cpu_s


def insert(url: str, jobs: int, *, rows: bool, backlog: int) -> None:
    with awa_fast.Client(url) as client:
        if rows:  # one statement a job keeps each out of a pack
            for n in range(jobs):
                client.insert(Burn(n))
        else:
            client.insert_many([Burn(n) for n in range(jobs)])
    if backlog:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO awa_fast.jobs_hot (kind, queue, priority)"
                " SELECT 'Burn', 'default', 4 FROM generate_series(1, %s)",
                (backlog,),
            )
            conn.execute("ANALYZE awa_fast.jobs_hot")


def claim_and_complete(url: str, size: int, *, jobs: int, rows: bool) -> Cost:
    """Claim the ``jobs`` jobs ``size`` at a time and complete each claim's."""
    statement = Q.job_claim_rows if rows else Q.job_claim_batch
    database = Database(url)
    with (  # the runner's settings, as its claimer and committer have them
        connect_hot(database) as claimer,
        connect_hot(database) as completer,
    ):
        host = claimer.execute(Q.host_register, {"name": "claim_cost", "queues": Jsonb({})})
        host_row = host.fetchone()
        assert host_row is not None
        params = {
            "queue": "default",
            "limit": size,
            "deadline_s": 600.0,
            "host_id": host_row[0],
            "aging_s": None,
        }
        cur = claimer.cursor(binary=True)
        claim_cpu, complete_cpu, done = backend_cpu(claimer), backend_cpu(completer), 0
        while done < jobs:
            params["limit"] = min(size, jobs - done)  # the backlog's rows stay
            cur.execute(statement, params)
            claimed = {row[0]: row[1] for row in cur.fetchall()}
            if not claimed:
                break
            completer.execute(Q.job_complete_many, attempts_params(claimed))
            done += len(claimed)
        claim_cpu = backend_cpu(claimer) - claim_cpu
        complete_cpu = backend_cpu(completer) - complete_cpu
    if done != jobs:
        raise SystemExit(f"claimed and completed {done} of {jobs} jobs")
    return Cost(claim_cpu / done * 1e6, complete_cpu / done * 1e6)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a Postgres server URL on this machine")
    parser.add_argument("--sizes", default="16,48,128,500", help="claim sizes, comma-separated")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", action="store_true", help="plain rows, not packs")
    parser.add_argument("--backlog", type=int, default=0, help="available rows behind them")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    costs: dict[int, list[Cost]] = {size: [] for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            with fresh_database(args.url) as url:
                insert(url, args.jobs, rows=args.rows, backlog=args.backlog)
                costs[size].append(claim_and_complete(url, size, jobs=args.jobs, rows=args.rows))
    behind = f", {args.backlog} rows behind" if args.backlog else ""
    print(f"{args.jobs} {'rows' if args.rows else 'packed jobs'}{behind}, median of {args.rounds}")
    print("claim size | claimer us/job | completer us/job | both | claimer us/claim")
    for size, runs in costs.items():
        claim = statistics.median(cost.claim_us for cost in runs)
        complete = statistics.median(cost.complete_us for cost in runs)
        both = claim + complete
        print(f"{size} | {claim:.1f} | {complete:.1f} | {both:.1f} | {claim * size:.0f}")


if __name__ == "__main__":
    main()
