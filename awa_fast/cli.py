"""The ``awa-fast`` command line.

With no database URL (``--database-url``, ``AWA_FAST_DATABASE_URL`` or ``DATABASE_URL``)
every command starts — or reuses — a local Postgres in the user's data directory, migrates it
and says which URL it uses, so a first run needs nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

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
        row = client.insert(
            args,
            kind=opts.kind,
            queue=opts.queue,
            priority=opts.priority,
            max_attempts=opts.max_attempts,
        )
    print(json.dumps({"id": row.id, "kind": row.kind, "queue": row.queue, "state": row.state}))
    return 0


def load_app(target: str) -> Any:
    """``module:attribute`` → the client object that has the handlers registered."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"awa-fast serve: APP must look like module:client, got {target!r}")
    sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"awa-fast serve: {module_name} has no attribute {attribute!r}") from None
    if not hasattr(app, "handlers"):
        raise SystemExit(f"awa-fast serve: {target} is not an awa_fast Client or AsyncClient")
    return app


def _queue_arg(text: str) -> tuple[str, int]:
    name, sep, concurrency = text.partition("=")
    if not sep or not name or not concurrency.isdigit() or int(concurrency) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=CONCURRENCY (>= 1), got {text!r}")
    return name, int(concurrency)


def _cmd_serve(opts: argparse.Namespace) -> int:
    from awa_fast.runtime.serve import serve

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    app = load_app(opts.app)
    url = database_url(opts.database_url) if opts.database_url or not app.dsn else app.dsn
    migrate(url)
    app.dsn = url
    config: dict[str, Any] = {"shutdown_timeout": opts.shutdown_timeout}
    if opts.max_jobs_per_worker:
        config["max_jobs_per_worker"] = opts.max_jobs_per_worker
    if opts.max_worker_memory_mb:
        config["max_worker_memory_mb"] = opts.max_worker_memory_mb
    queues = dict(opts.queue) if opts.queue else None
    processes = opts.processes or os.cpu_count() or 1
    return serve(app, queues, processes=processes, **config)


def _cmd_bench(opts: argparse.Namespace) -> int:
    from awa_fast import bench

    url = database_url(opts.database_url)
    results = bench.run_scenario(
        url, opts.scenario, runs=opts.runs, jobs=opts.jobs, processes=opts.processes or None
    )
    for result in results:
        print(json.dumps(result))
    summary = bench.median_row(results)
    print(json.dumps({"median": summary, "settings": bench.server_settings(url)}))
    print(
        f"{opts.scenario}: {summary['jobs_per_s']:,.0f} jobs/s (median of {opts.runs}), "
        f"{summary['commits_per_job']:.4f} commits/job, "
        f"{summary['wal_bytes_per_job']:.0f} B WAL/job"
    )
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

    serve = command("serve", "run the multiprocess worker pool for an app's handlers")
    serve.add_argument("app", help="module:client, the Client/AsyncClient with the handlers")
    serve.add_argument("--processes", type=int, default=0, help="worker processes (CPUs)")
    serve.add_argument("--queue", action="append", type=_queue_arg, metavar="NAME=CONCURRENCY")
    serve.add_argument("--shutdown-timeout", type=float, default=30.0)
    serve.add_argument("--max-jobs-per-worker", type=int)
    serve.add_argument("--max-worker-memory-mb", type=float)
    serve.set_defaults(run=_cmd_serve)

    bench = command("bench", "run a benchmark scenario on a fresh database")
    bench.add_argument("scenario", nargs="?", default="drain", choices=["drain", "cpu"])
    bench.add_argument("--jobs", type=int, default=20_000)
    bench.add_argument("--runs", type=int, default=3)
    bench.add_argument("--processes", type=int, default=0, help="0: run in-process")
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
