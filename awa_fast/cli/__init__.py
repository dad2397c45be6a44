"""The ``awa-fast`` command line.

With no database URL (``--database-url``, ``--database-url-file``, ``AWA_FAST_DATABASE_URL``
or ``DATABASE_URL``) every command starts — or reuses — a local Postgres in the user's data
directory, migrates it and says which URL it uses, so a first run needs nothing. The Awa
SDK's command tree is here too (awa_fast.sdk_commands).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from awa_fast import __version__, bench, logs, sdk_commands
from awa_fast.cli import values
from awa_fast.cli.local import local_commands
from awa_fast.cli.schema import cmd_grants, cmd_migrate
from awa_fast.cli.urls import URL_FILE_HELP, URL_HELP, database_url, ensure_migrated, given_url
from awa_fast.client_sync import Client
from awa_fast.db.connections import Database
from awa_fast.errors import AwaError, JobNotFound
from awa_fast.runtime.config import DEFAULT_CONCURRENCY
from awa_fast.runtime.serve import serve

_SCENARIOS = ("drain", "cpu", "io", "latency", "sustained", "retry", "scheduled", "promote")


def _cmd_ui(opts: argparse.Namespace) -> int:
    def url() -> str:
        given = database_url(opts.database_url)
        ensure_migrated(given)
        return given

    return _ui_command()(opts, database_url=url, read_url=read_url(opts), environ=os.environ)


def _ui_command() -> Callable[..., int]:
    """``awa-fast ui``, imported now: the dashboard's libraries are an optional extra."""
    try:
        from awa_fast.ui.serve import command
    except ModuleNotFoundError as e:
        raise SystemExit(
            f"awa-fast ui needs the dashboard's libraries ({e}): pip install 'awa-fast[ui]'"
        ) from None
    return command


def _cmd_enqueue(opts: argparse.Namespace) -> int:

    url = database_url(opts.database_url)
    ensure_migrated(url)
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
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise  # an import inside the app failed: its traceback says where
        raise SystemExit(
            f"awa-fast serve: no module named {exc.name!r} (looked in {os.getcwd()} and on"
            " sys.path)"
        ) from None
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"awa-fast serve: {module_name} has no attribute {attribute!r}") from None
    if not hasattr(app, "handlers"):
        raise SystemExit(f"awa-fast serve: {target} is not an awa_fast Client or AsyncClient")
    return app


# Admin commands: (name, help, positional args, client method).
ADMIN_COMMANDS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("status", "job counts per queue and state", (), "queue_stats"),
    ("jobs", "list jobs, newest first", (), "list_jobs"),
    ("job", "show one job", ("job_id",), "get_job"),
    ("cancel", "cancel a job (a running handler sees is_cancelled())", ("job_id",), "cancel"),
    ("retry", "run a failed or cancelled job again", ("job_id",), "retry"),
    ("retry-failed", "run the failed jobs (of --kind, --queue if given) again", (), "retry_failed"),
    ("discard-failed", "delete the failed jobs of a kind", ("kind",), "discard_failed"),
    ("dump", "a job and its timeline, as JSON", ("job_id",), "dump_job"),
    (
        "dump-run",
        "one attempt of a job (the latest unless --attempt), as JSON",
        ("job_id",),
        "dump_run",
    ),
    ("pause", "stop claiming a queue", ("queue",), "pause_queue"),
    ("resume", "claim a paused queue again", ("queue",), "resume_queue"),
    ("drain", "cancel every job of a queue that waits to run", ("queue",), "drain_queue"),
    ("dlq", "list dead-lettered jobs", (), "list_dlq"),
    ("dlq-depth", "how many jobs the dead-letter queue holds", (), "dlq_depth"),
    (
        "dlq-retry",
        "move a job from the dead-letter queue back to available",
        ("job_id",),
        "retry_from_dlq",
    ),
    ("dlq-retry-all", "revive the dead-lettered jobs the filters match", (), "bulk_retry_from_dlq"),
    (
        "dlq-move",
        "move a failed job into the dead-letter queue, saying why",
        ("job_id", "reason"),
        "move_failed_to_dlq",
    ),
    ("dlq-purge", "delete the dead-lettered jobs the filters match", (), "purge_dlq"),
    ("batch", "list batch operations, newest first", (), "list_batch_operations"),
    (
        "batch-cancel",
        "stop a batch operation between chunks",
        ("operation_id",),
        "cancel_batch_operation",
    ),
    ("cron", "list periodic jobs", (), "list_cron_jobs"),
    ("cron-delete", "remove a periodic job", ("name",), "delete_cron_job"),
)
# Commands about one thing that may not be there (a result of None or False): what to say.
_NOT_FOUND = {
    **dict.fromkeys(
        ("cancel", "retry", "retry_from_dlq", "move_failed_to_dlq"),
        "job {} not found, or not in a state that allows it",
    ),
    "delete_cron_job": "no periodic job named {!r}",
}
# Results printed as a summary, not whole: retry-failed says how many jobs it retried of
# how many it found (the rest stayed failed, held off by a live job's unique key, or went
# meanwhile) and how many retention has deleted, rather than print every retried job.
_SUMMARIES: dict[str, Callable[[Any], object]] = {
    "retry_failed": lambda result: {
        "retried": len(result.jobs),
        "matched": result.matched,
        "pruned_failed_count": result.pruned_failed_count,
        "ids": [job.id for job in result.jobs],
    },
}
# Options of each admin command; ``allow_all`` is the flag --all (bulk commands refuse to
# run with no filter without it).
_FILTERS = {
    "list_jobs": ("state", "kind", "queue", "limit"),
    "retry_failed": ("kind", "queue"),
    "pause_queue": ("paused_by",),
    "list_dlq": ("kind", "queue", "tag", "limit"),
    "dlq_depth": ("queue",),
    "bulk_retry_from_dlq": ("kind", "queue", "tag", "allow_all"),
    "purge_dlq": ("kind", "queue", "tag", "allow_all"),
    "list_batch_operations": ("state", "limit"),
    "dump_run": ("attempt",),
}


# Admin commands whose reads may come from a standby (--read-database-url).
_READS_THAT_MAY_LAG = ("queue_stats",)
READ_URL_ENV = "AWA_FAST_READ_DATABASE_URL"


def _read_url_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--read-database-url",
        metavar="URL",
        help="a standby's URL to read counts and pages from, which lag the primary by its "
        f"replay delay (default: ${READ_URL_ENV}; none: the database URL's primary)",
    )


def read_url(opts: argparse.Namespace) -> str | None:
    """The standby URL a command reads from, if it takes one and one is given."""
    given = getattr(opts, "read_database_url", None) or os.environ.get(READ_URL_ENV)
    return given if hasattr(opts, "read_database_url") else None


def _cmd_admin(opts: argparse.Namespace) -> int:

    url = database_url(opts.database_url)
    ensure_migrated(url)
    args = [getattr(opts, name) for name in opts.positional_names]
    filters = {
        name: getattr(opts, name)
        for name in _FILTERS.get(opts.method, ())
        if getattr(opts, name, None) is not None
    }
    with Client(url, read_url=read_url(opts)) as client:
        result = getattr(client, opts.method)(*args, **filters)
    if result in (None, False) and opts.method in _NOT_FOUND:
        print(f"awa-fast {opts.command}: {_NOT_FOUND[opts.method].format(*args)}", file=sys.stderr)
        return 1
    if opts.method in _SUMMARIES:
        result = _SUMMARIES[opts.method](result)
    if isinstance(result, str):  # already JSON (dump_job)
        print(result)
    elif result is not None:
        print(orjson.dumps(result, default=_plain, option=orjson.OPT_INDENT_2).decode())
    return 0


def _plain(value: object) -> object:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return str(value)


def _no_standby(command: argparse.ArgumentParser, *, help: str) -> None:
    """--no-standby: RunnerConfig.standby off (awa_fast.runtime.claim.standby)."""
    command.add_argument("--no-standby", dest="standby", action="store_false", help=help)


def _cmd_serve(opts: argparse.Namespace) -> int:

    logs.configure(fmt=opts.log_format, level=opts.log_level)
    app = load_app(opts.app)
    url = database_url(opts.database_url) if opts.database_url or not app.dsn else app.dsn
    ensure_migrated(url)
    # the client's pool too: handlers in the workers use it
    app.database = Database(url, pooled=opts.pgbouncer or app.database.pooled)
    queues = dict(opts.queue) if opts.queue else None
    if opts.maintenance_only and opts.processes:
        raise SystemExit("awa-fast serve: --maintenance-only runs no worker processes")
    processes = opts.processes or os.cpu_count() or 1
    return serve(app, queues, processes=processes, **serve_config(opts))


def serve_config(opts: argparse.Namespace) -> dict[str, Any]:
    """The RunnerConfig fields ``serve``'s options set (the others keep their defaults)."""
    config: dict[str, Any] = {"shutdown_timeout": opts.shutdown_timeout, **dict(opts.set or [])}
    if opts.prefetch is not None:
        config["prefetch"] = opts.prefetch
    if opts.max_jobs_per_worker is not None:
        config["max_jobs_per_worker"] = opts.max_jobs_per_worker
    if opts.max_worker_memory_mb is not None:
        config["max_worker_memory_mb"] = opts.max_worker_memory_mb
    if opts.metrics_port is not None:
        config["metrics_port"] = opts.metrics_port
    if opts.rate_limit:
        config["queue_rate_limits"] = dict(opts.rate_limit)
    if not opts.standby:
        config["standby"] = False
    if opts.maintenance_only:
        config["maintenance_only"] = True
    if not opts.run_maintenance:
        config["run_maintenance"] = False
    if opts.pgbouncer:
        config["transaction_pooling"] = True
    direct = opts.direct_database_url or os.environ.get("AWA_FAST_DIRECT_DATABASE_URL")
    if opts.pgbouncer or direct:
        config["direct_dsn"] = direct
    return config


def _cmd_bench(opts: argparse.Namespace) -> int:

    names = list(bench.SCENARIOS) if "all" in opts.scenario else opts.scenario
    planned = bench.plan(
        names,
        jobs=opts.jobs,
        processes=opts.processes or None,
        duration=opts.duration,
        standby=opts.standby,
        transaction_pooling=opts.transaction_pooling,
    )
    url = database_url(opts.database_url)
    results = bench.run_all(url, planned, runs=opts.runs)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    bench.save_results(out / "awa-fast.jsonl", results)
    print(f"awa-fast bench: results in {out / 'awa-fast.jsonl'}", file=sys.stderr)
    print(bench.write_report(out, includes=[Path(p) for p in opts.include]))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="awa-fast", description=DESCRIPTION)
    top.add_argument("--version", action="version", version=f"awa-fast {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help, description=help)
        urls = cmd.add_mutually_exclusive_group()
        urls.add_argument("--database-url", help=URL_HELP)
        urls.add_argument("--database-url-file", metavar="PATH", help=URL_FILE_HELP)
        return cmd

    migrating = command("migrate", "apply pending schema migrations, or print their SQL")
    migrating.add_argument("--sql", action="store_true", help="print the SQL, apply nothing")
    migrating.add_argument(
        "--from", dest="first", type=int, help="print migrations after this version"
    )
    migrating.add_argument("--to", dest="last", type=int, help="... up to this one")
    migrating.add_argument("--version", dest="only", type=int, help="print this version's")
    migrating.add_argument(
        "--pending", action="store_true", help="print those the database has not applied"
    )
    migrating.set_defaults(run=cmd_migrate)

    enqueue = command("enqueue", "insert one job")
    enqueue.add_argument("kind")
    enqueue.add_argument("--args", default="{}", help="job args as a JSON object")
    enqueue.add_argument("--queue", default="default")
    enqueue.add_argument("--priority", type=int, default=2)
    enqueue.add_argument("--max-attempts", type=int, default=25)
    enqueue.set_defaults(run=_cmd_enqueue)

    serve = command("serve", "run the multiprocess worker pool for an app's handlers")
    serve.add_argument("app", help="module:client, the Client/AsyncClient with the handlers")
    serve.add_argument(
        "--processes", type=int, default=0, help="worker processes (default: one per CPU)"
    )
    serve.add_argument(
        "--queue",
        action="append",
        type=values.queue_arg,
        metavar="NAME=CONCURRENCY",
        help="a queue to run and its most handlers at once, over all workers; repeat for "
        f"more (default: every queue the app's handlers name, at {DEFAULT_CONCURRENCY} each)",
    )
    serve.add_argument(
        "--rate-limit",
        action="append",
        type=values.rate_limit_arg,
        metavar="NAME=RATE[:BURST]",
        help="start at most RATE jobs a second of queue NAME (in bursts of up to BURST)",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds running handlers get to finish on the first SIGTERM or SIGINT (30)",
    )
    _no_standby(serve, help="leave no standby claims: every job starts on a claim of its own")
    roles = serve.add_mutually_exclusive_group()
    roles.add_argument(
        "--maintenance-only",
        action="store_true",
        help="claim no jobs and run no workers: leader election and maintenance only "
        "(promotion, rescue, retention, periodic jobs...); no handler need be registered",
    )
    roles.add_argument(
        "--no-maintenance",
        dest="run_maintenance",
        action="store_false",
        help="claim and run jobs, and leave elections and maintenance to other hosts "
        "(maintenance-only ones); without any, nothing is promoted or rescued",
    )
    serve.add_argument(
        "--prefetch",
        type=int,
        help="jobs each worker holds per queue beyond those it runs, claimed ahead "
        "(default: about 200 ms of the queue's work, up to 256, from each worker's pace; "
        "0: none)",
    )
    serve.add_argument(
        "--max-jobs-per-worker",
        type=int,
        help="replace a worker after this many jobs (default: never)",
    )
    serve.add_argument(
        "--max-worker-memory-mb",
        type=float,
        help="replace a worker whose resident memory passes this (default: never)",
    )
    serve.add_argument(
        "--metrics-port", type=int, help="serve /metrics and /health on 127.0.0.1 at this port"
    )
    serve.add_argument(
        "--pgbouncer",
        action="store_true",
        help="the database URL goes through PgBouncer in transaction pooling mode: no "
        "prepared statements or session settings, LISTEN only on --direct-database-url",
    )
    serve.add_argument(
        "--direct-database-url",
        metavar="URL",
        help="with --pgbouncer: Postgres itself, for LISTEN (default: "
        "$AWA_FAST_DIRECT_DATABASE_URL; without one, new jobs wait for the next poll)",
    )
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one object a line, with job_id, worker_pid, ... as fields",
    )
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    serve.add_argument(
        "--set",
        action="append",
        type=values.setting_arg,
        metavar="NAME=VALUE",
        help="any RunnerConfig field, e.g. --set heartbeat_interval=2",
    )
    serve.set_defaults(run=_cmd_serve)

    for name, help, positional, method in ADMIN_COMMANDS:
        cmd = command(name, help)
        for arg in positional:
            cmd.add_argument(arg, type=int if arg == "job_id" else str)
        for option in _FILTERS.get(method, ()):
            if option == "allow_all":
                cmd.add_argument("--all", dest="allow_all", action="store_true", help="no filter")
            else:
                cmd.add_argument(
                    f"--{option.replace('_', '-')}",
                    dest=option,
                    type=int if option in ("limit", "attempt") else str,
                )
        cmd.set_defaults(run=_cmd_admin, method=method, positional_names=positional)
        if method in _READS_THAT_MAY_LAG:
            _read_url_option(cmd)

    grants = command(
        "grants", "print the GRANT statements an application role needs (connects nowhere)"
    )
    grants.add_argument("--role", required=True, help="the role the application connects as")
    grants.set_defaults(run=cmd_grants)

    ui = command("ui", "serve the web dashboard (pip install 'awa-fast[ui]')")
    ui.add_argument(
        "--host", default="127.0.0.1", help="listen here (beyond loopback only with auth)"
    )
    ui.add_argument("--port", type=values.int_in(1, 65535), default=8080)
    ui.add_argument("--read-only", action="store_true", help="show everything, change nothing")
    _read_url_option(ui)
    ui.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="how each action is logged, with who did it (json: one object a line)",
    )
    ui.add_argument(
        "--token-file",
        metavar="PATH",
        help="ask for the token in this file (default: $AWA_FAST_UI_TOKEN)",
    )
    ui.add_argument(
        "--basic-auth-file",
        metavar="PATH",
        help="ask for the USER:PASSWORD in this file (default: $AWA_FAST_UI_BASIC_AUTH)",
    )
    ui.set_defaults(run=_cmd_ui)

    bench = command("bench", "run benchmark scenarios, each run on a fresh database")
    bench.add_argument(
        "scenario",
        nargs="*",
        default=["drain"],
        choices=["all", *_SCENARIOS],
        help="scenarios to run (default: drain; all: every one)",
    )
    bench.add_argument("--jobs", type=values.int_in(1), help="jobs per run (default: per scenario)")
    bench.add_argument(
        "--runs", type=values.int_in(1), default=3, help="runs per configuration (median)"
    )
    bench.add_argument(
        "--processes", type=values.int_in(0), default=0, help="worker processes (0: in-process)"
    )
    bench.add_argument(
        "--duration", type=values.seconds, help="seconds of offered load (sustained)"
    )
    bench.add_argument("--out", default="bench-results", help="folder for results and charts")
    _no_standby(bench, help="latency, sustained: run the pool without standby claims")
    bench.add_argument(
        "--transaction-pooling",
        action="store_true",
        help="latency: run as behind a transaction pooler with no direct URL "
        "(no LISTEN, claims poll; nothing prepared)",
    )
    bench.add_argument(
        "--include", action="append", default=[], metavar="FILE.jsonl", help="peer results"
    )
    bench.set_defaults(run=_cmd_bench)
    local_commands(sub)
    return top


DESCRIPTION = (
    "awa-fast, a Postgres job queue. Commands use --database-url, --database-url-file, "
    "$AWA_FAST_DATABASE_URL or $DATABASE_URL; with none, a local Postgres in your data "
    "directory, started on first use."
)
_URL_OPTIONS = ("--database-url", "--database-url-file")


def _leading_database_url(argv: list[str]) -> tuple[list[str], list[str]]:
    """A ``--database-url`` (or ``--database-url-file``) given before the command, where
    the Awa SDK's command line takes it, as ``[option, value]`` (or ``[]``), and the rest
    of ``argv``."""
    if argv[:1] and argv[0] in _URL_OPTIONS and len(argv) > 1:
        return argv[:2], argv[2:]
    option, equals, value = argv[0].partition("=") if argv else ("", "", "")
    if equals and option in _URL_OPTIONS:
        return [option, value], argv[1:]
    return [], argv


def main(argv: Sequence[str] | None = None) -> int:

    url_option, rest = _leading_database_url(list(sys.argv[1:] if argv is None else argv))
    if sdk_commands.is_sdk_command(rest):
        option, value = url_option or (None, None)
        url = given_url(
            url=value if option == "--database-url" else None,
            url_file=value if option == "--database-url-file" else None,
        )

        def sdk_command() -> int:
            return sdk_commands.main(rest, database_url=lambda: database_url(url))

        return _exit_status(" ".join(rest[:2]), sdk_command)
    if rest:
        rest = [rest[0], *url_option, *rest[1:]]
    opts = parser().parse_args(rest)
    opts.database_url = given_url(url=opts.database_url, url_file=opts.database_url_file)
    return _exit_status(opts.command, lambda: int(opts.run(opts)))


def _exit_status(command: str, run: Callable[[], int]) -> int:
    """``run``'s status, or an awa-fast error said on stderr: 1 for a job that is not
    there, 2 for any other."""

    try:
        return run()
    except JobNotFound as exc:
        print(f"awa-fast {command}: {exc}", file=sys.stderr)
        return 1
    except AwaError as exc:
        print(f"awa-fast {command}: {exc}", file=sys.stderr)
        return 2
