"""A drain through a failover: the pause, and the jobs/s before and after.

One run makes its own primary and streaming standby (LocalClusters, fsync and
synchronous_commit on; the standby synchronous unless ``--asynchronous``), inserts a
backlog of no-op jobs, and starts ``awa-fast serve`` (``--processes``, every setting at its
default but those ``--set`` gives) on a URL naming both servers. Once ``--kill-at`` of the
backlog has completed, the primary is killed (``pg_ctl stop -m immediate``) and the
standby promoted at once (``pg_ctl promote``, which waits for it): what is measured is
Postgres's promotion and awa-fast following it, not a failover manager's detection.

Printed, in seconds from the kill's issue (``promoted``: when the promotion returned), from
the promoted standby's rows (finalized_at, the database's clock, the same machine's as the
kill's): the last completion before the outage and the first after it (either side of
the moment the kill had returned and the promotion not begun), the pause between them;
the jobs/s over ``--window`` seconds before the last and from the first; the jobs rescued
(attempt 2), and when the last job finished. The pool's log goes to ``--logs``.

    PYTHONPATH=. python benches/failover.py [--backlog 200000] [--kill-at 0.4]
        [--processes 2] [--asynchronous] [--set NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

import awa_fast
from awa_fast.db.dsn import with_database
from awa_fast.localpg import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "awa_failover"
client = awa_fast.AsyncClient("postgresql:///given-by-serve")  # serve's --database-url


@dataclass
class Noop:
    n: int


@client.task(Noop)
async def noop(job: awa_fast.Job[Noop]) -> None:
    """Nothing: the drain measures the queue."""


def query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """``sql``'s rows; one dict in ``params`` passes named parameters."""
    given = params[0] if len(params) == 1 and isinstance(params[0], dict) else params
    with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
        cur = conn.execute(sql, given)
        return cur.fetchall() if cur.description else []


def completed(url: str) -> int:
    try:
        return int(query(url, "SELECT count(*) FROM awa_fast.jobs_done")[0][0])
    except psycopg.OperationalError:
        return -1


def wait_for(predicate: Any, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"failover bench: timed out waiting for {what}")
        time.sleep(0.02)


def pair(*, synchronous: bool) -> tuple[LocalCluster, LocalCluster, str]:
    """A primary with the bench's database migrated, and its standby; the URL of both."""
    primary = LocalCluster.temporary()
    server = primary.start()
    query(server, f"CREATE DATABASE {DATABASE}")
    awa_fast.migrate(with_database(server, DATABASE))
    standby = primary.standby()
    url = with_database(primary.url, DATABASE)
    if synchronous:
        query(url, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        query(url, "SELECT pg_reload_conf()")
        wait_for(
            lambda: query(url, "SELECT sync_state FROM pg_stat_replication") == [("sync",)],
            timeout=30,
            what="the standby to be synchronous",
        )
    both = f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{DATABASE}"
    return primary, standby, both


# The completions either side of a moment when no server took writes: the outage's gap.
_GAP = """
SELECT max(t) FILTER (WHERE t <= %(dead)s), min(t) FILTER (WHERE t > %(dead)s)
FROM (SELECT extract(epoch FROM finalized_at)::float8 AS t FROM awa_fast.jobs_done) s
"""


def measure(url: str, *, killed: float, dead: float, window: float) -> dict[str, float]:
    """The completions around the kill issued at ``killed`` (epoch seconds), from
    ``url``'s rows: the gap around ``dead``, a moment when the old primary was gone and the
    standby not yet promoted, and the rate either side of it."""
    [(last, first)] = query(url, _GAP, {"dead": dead})
    [(before, after, rescued, end)] = query(
        url,
        "SELECT count(*) FILTER (WHERE finalized_at > to_timestamp(%s) AND finalized_at"
        " <= to_timestamp(%s)), count(*) FILTER (WHERE finalized_at >= to_timestamp(%s)"
        " AND finalized_at < to_timestamp(%s)), count(*) FILTER (WHERE attempt > 1),"
        " max(extract(epoch FROM finalized_at))::float8 FROM awa_fast.jobs_done",
        last - window,
        last,
        first,
        first + window,
    )
    return {
        "last_before": last - killed,
        "first_after": first - killed,
        "pause": first - last,
        "before_per_s": int(before) / window,
        "after_per_s": int(after) / window,
        "rescued": int(rescued),
        "last_done": end - killed,
    }


def run(args: argparse.Namespace) -> dict[str, float]:
    primary, standby, url = pair(synchronous=not args.asynchronous)
    log_path = Path(args.logs)
    log_path.mkdir(parents=True, exist_ok=True)
    log = (log_path / f"failover-{int(time.time())}.log").open("wb")
    server: subprocess.Popen[bytes] | None = None
    try:
        with awa_fast.Client(url) as producer:
            for start in range(0, args.backlog, 10_000):
                producer.insert_many([Noop(n) for n in range(start, start + 10_000)])
        settings = [arg for setting in args.set for arg in ("--set", setting)]
        serving = ["serve", "benches.failover:client", "--database-url", url]
        serving += ["--processes", str(args.processes), *settings]
        server = subprocess.Popen(
            [sys.executable, "-m", "awa_fast.cli", *serving],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        primary_url = with_database(primary.url, DATABASE)
        at = int(args.backlog * args.kill_at)
        wait_for(lambda: completed(primary_url) >= at, timeout=300, what="the drain")
        killed = time.time()  # issued: the server is gone a few milliseconds later
        primary.pg_ctl("stop", "-m", "immediate")
        dead = time.time()  # gone, and the standby not promoted yet
        standby.promote()
        promoted = time.time() - killed
        standby_url = with_database(standby.url, DATABASE)
        wait_for(lambda: completed(standby_url) >= args.backlog, timeout=300, what="every job done")
        found = measure(standby_url, killed=killed, dead=dead, window=args.window)
        return {"promoted": promoted, **found}
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)
        log.close()
        standby.stop(remove=True)
        primary.stop(remove=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--kill-at", type=float, default=0.4, help="share of the backlog done")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--window", type=float, default=2.0, help="seconds either side")
    parser.add_argument("--asynchronous", action="store_true", help="no synchronous standby")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--logs", default=str(ROOT / "benches" / "results" / "failover-logs"))
    args = parser.parse_args()
    found = run(args)
    mode = "asynchronous" if args.asynchronous else "synchronous"
    print("| standby | backlog | " + " | ".join(found) + " |")
    print("|---|--:|" + "--:|" * len(found))
    shown = " | ".join(_shown(key, value) for key, value in found.items())
    print(f"| {mode} | {args.backlog:,} | {shown} |")


def _shown(key: str, value: float) -> str:
    return f"{value:,.0f}" if key.endswith("per_s") or key == "rescued" else f"{value:.2f}"


if __name__ == "__main__":
    main()
