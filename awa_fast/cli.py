"""The ``awa-fast`` command line.

With no database URL (``--database-url``, ``AWA_FAST_DATABASE_URL`` or ``DATABASE_URL``)
every command starts — or reuses — a local Postgres in the user's data directory, migrates it
and says which URL it uses, so a first run needs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from collections.abc import Sequence

import orjson

from awa_fast.db.migrate import migrate


def database_url(flag: str | None) -> str:
    url = flag or os.environ.get("AWA_FAST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if url:
        return url
    from awa_fast.localpg import embedded_url

    url = embedded_url()
    print(f"awa-fast: no database URL given; using local Postgres at {url}", file=sys.stderr)
    return url


def _cmd_migrate(opts: argparse.Namespace) -> int:
    applied = migrate(database_url(opts.database_url))
    print(f"applied migrations {applied}" if applied else "schema is up to date")
    return 0


def _cmd_enqueue(opts: argparse.Namespace) -> int:
    from awa_fast.client import Client

    url = database_url(opts.database_url)
    migrate(url)
    try:
        args = orjson.loads(opts.args)
    except orjson.JSONDecodeError as exc:
        print(f"awa-fast enqueue: --args is not valid JSON: {exc}", file=sys.stderr)
        return 2
    with Client(url) as client:
        row = client.insert(args, kind=opts.kind, queue=opts.queue, priority=opts.priority,
                            max_attempts=opts.max_attempts)
    print(json.dumps({"id": row.id, "kind": row.kind, "queue": row.queue, "state": row.state}))
    return 0


def _cmd_bench(opts: argparse.Namespace) -> int:
    from awa_fast import bench

    url = database_url(opts.database_url)
    results = bench.run_scenario(url, opts.scenario, runs=opts.runs, jobs=opts.jobs)
    for result in results:
        print(json.dumps(result))
    summary = bench.median_row(results)
    print(json.dumps({"median": summary, "settings": bench.server_settings(url)}))
    print(f"{opts.scenario}: {summary['jobs_per_s']:,.0f} jobs/s (median of {opts.runs}), "
          f"{summary['commits_per_job']:.4f} commits/job, "
          f"{summary['wal_bytes_per_job']:.0f} B WAL/job")
    return 0


def _version() -> str:
    try:
        return version("awa-fast")
    except PackageNotFoundError:
        return "(not installed)"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="awa-fast", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"awa-fast {_version()}")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help, description=help)
        cmd.add_argument("--database-url", help="Postgres URL (default: a local cluster)")
        return cmd

    command("migrate", "apply pending schema migrations").set_defaults(run=_cmd_migrate)

    enqueue = command("enqueue", "insert one job")
    enqueue.add_argument("kind")
    enqueue.add_argument("--args", default="{}", help="job args as a JSON object")
    enqueue.add_argument("--queue", default="default")
    enqueue.add_argument("--priority", type=int, default=2)
    enqueue.add_argument("--max-attempts", type=int, default=25)
    enqueue.set_defaults(run=_cmd_enqueue)

    bench = command("bench", "run a benchmark scenario on a fresh database")
    bench.add_argument("scenario", nargs="?", default="drain", choices=["drain"])
    bench.add_argument("--jobs", type=int, default=20_000)
    bench.add_argument("--runs", type=int, default=3)
    bench.set_defaults(run=_cmd_bench)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    from awa_fast.errors import AwaError

    opts = parser().parse_args(argv)
    try:
        return int(opts.run(opts))
    except AwaError as exc:
        print(f"awa-fast {opts.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
