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
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg import conninfo

from awa_fast import __version__, bench, logs, sdk_commands
from awa_fast.client_sync import Client
from awa_fast.db.connections import Database
from awa_fast.db.migrate import (
    SCHEMA,
    current_migration_version,
    current_version,
    migrate,
    migrations_range,
)
from awa_fast.errors import AwaError, ConfigError, JobNotFound
from awa_fast.localpg import (
    LocalCluster,
    local_cluster,
    local_database_url,
    start_local_database,
)
from awa_fast.runtime.config import DEFAULT_CONCURRENCY, RunnerConfig
from awa_fast.runtime.ratelimit import check_rate_limit
from awa_fast.runtime.serve import serve

_SCENARIOS = ("drain", "cpu", "io", "latency", "sustained", "retry", "scheduled", "promote")
URL_HELP = (
    "Postgres URL (default: $AWA_FAST_DATABASE_URL, $DATABASE_URL, else a local cluster)."
    " Other users of this machine can read a command line in ps: pass a URL with a password"
    " in AWA_FAST_DATABASE_URL or --database-url-file instead"
)
URL_FILE_HELP = "read the Postgres URL from this file (out of sight of ps)"


def database_url(flag: str | None) -> str:
    """The URL given, else a local Postgres started (or reused) and migrated for the user."""
    url = flag or os.environ.get("AWA_FAST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    return url or _local_url()


def _local_url() -> str:
    """The zero-config cluster's database, migrated; saying so when this command started
    the server, which outlives it."""
    cluster = local_cluster()
    starting = not cluster.running()
    url = start_local_database(cluster)
    if starting:
        print(
            f"awa-fast: no database URL given; started a local Postgres at {url} (data in"
            f" {cluster.root}). It keeps running after this command; `awa-fast local stop`"
            " stops it",
            file=sys.stderr,
        )
    else:
        print(f"awa-fast: no database URL given; using local Postgres at {url}", file=sys.stderr)
    migrate(url)
    return url


def ensure_migrated(url: str) -> None:
    """Apply the pending migrations, if any. A database already up to date is only read:
    an application's role, which may not create anything there, runs every other command."""
    with psycopg.connect(url, autocommit=True) as conn:
        if current_version(conn) >= current_migration_version():
            return
    migrate(url)


def read_url_file(path: str) -> str:
    """The database URL a ``--database-url-file`` holds (its first line)."""
    try:
        url = Path(path).read_text().strip().partition("\n")[0]
    except OSError as exc:
        raise SystemExit(f"awa-fast: cannot read --database-url-file {path}: {exc}") from None
    if not url:
        raise SystemExit(f"awa-fast: --database-url-file {path} is empty")
    return url


def warn_if_password(url: str) -> None:
    """Say so when a URL given on the command line holds a password, which ps shows."""
    try:
        password = conninfo.conninfo_to_dict(url).get("password")
    except psycopg.ProgrammingError:
        return  # not a URL at all: connecting says what is wrong with it
    if password:
        print(
            "awa-fast: warning: the --database-url given holds a password, which other users"
            " of this machine can read in ps; pass it in AWA_FAST_DATABASE_URL or"
            " --database-url-file instead",
            file=sys.stderr,
        )


def given_url(*, url: str | None, url_file: str | None) -> str | None:
    """The URL ``--database-url`` or ``--database-url-file`` gives, if either does,
    warning about a password given in plain sight."""
    if url_file:
        return read_url_file(url_file)
    if url:
        warn_if_password(url)
    return url


def _cmd_migrate(opts: argparse.Namespace) -> int:
    """Apply the pending migrations; or, with ``--sql`` or a range (the Awa SDK's
    ``migrate`` options), print their SQL for a migration tool of one's own."""
    ranged = (opts.only, opts.first, opts.last) != (None, None, None)
    if not (opts.sql or opts.pending or ranged):
        applied = migrate(database_url(opts.database_url))
        # The Awa SDK's line on stdout, for the scripts that look for it; what it did below.
        print("Migrations applied successfully.")
        detail = f"applied migrations {applied}" if applied else "schema is up to date"
        print(f"awa-fast: {detail}", file=sys.stderr)
        return 0
    first, last = _migration_range(opts)
    chosen = migrations_range(first, last)
    if not chosen:
        print(f"awa-fast migrate: no migrations in range ({first}, {last}]", file=sys.stderr)
    for migration in chosen:
        print(f"-- Migration V{migration.version}: {migration.name}\n{migration.sql}")
    return 0


def _migration_range(opts: argparse.Namespace) -> tuple[int, int]:
    """The versions ``(after, up to]`` that ``migrate``'s options select."""
    latest = current_migration_version()
    if opts.only is not None:
        if opts.pending or opts.first is not None or opts.last is not None:
            raise SystemExit("awa-fast migrate: --version takes no --from, --to or --pending")
        if not 1 <= opts.only <= latest:
            raise SystemExit(
                f"awa-fast migrate: version {opts.only} is out of range: valid versions 1..{latest}"
            )
        return opts.only - 1, opts.only
    if opts.pending:
        if opts.first is not None:
            raise SystemExit("awa-fast migrate: --pending starts where the database is, not --from")
        url = (
            opts.database_url
            or os.environ.get("AWA_FAST_DATABASE_URL")
            or os.environ.get("DATABASE_URL")
        )
        if not url:
            raise SystemExit("awa-fast migrate: --pending needs the database: give --database-url")
        with psycopg.connect(url, autocommit=True) as conn:
            return current_version(conn), latest if opts.last is None else opts.last
    first = 0 if opts.first is None else opts.first
    return first, latest if opts.last is None else opts.last


# What an application role does in the schema: read and write jobs and the tables around
# them (hosts, queues, cron, batches), draw job ids (nextval), and call the schema's
# functions. Migrations are not among it: the schema's owner runs those.
_GRANTS = """\
-- awa-fast: what role {role} needs to insert, run and administer jobs in schema {schema}.
-- Run as the role that applied the migrations (the owner of the schema's objects). The
-- default privileges cover objects later migrations add; without them, run this again.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema}
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE ON SEQUENCES TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT EXECUTE ON FUNCTIONS TO {role};
-- Maintenance vacuums busy job tables itself; a role that does not own them is skipped
-- with a warning (autovacuum still runs). On Postgres 17 and later, to let it:
-- GRANT MAINTAIN ON ALL TABLES IN SCHEMA {schema} TO {role};
"""


def grant_sql(role: str) -> str:
    """The GRANT statements that let ``role`` use awa-fast."""
    quoted = '"' + role.replace('"', '""') + '"'
    return _GRANTS.format(role=quoted, schema=SCHEMA)


def _cmd_grants(opts: argparse.Namespace) -> int:
    print(grant_sql(opts.role), end="")
    return 0


def _cmd_ui(opts: argparse.Namespace) -> int:
    def url() -> str:
        given = database_url(opts.database_url)
        ensure_migrated(given)
        return given

    return _ui_command()(opts, database_url=url, environ=os.environ)


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


def _int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` (to ``high``), else an error naming both."""
    bounds = f">= {low}" if high is None else f"from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected an integer {bounds}, got {text!r}")
        return value

    return parse


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _queue_arg(text: str) -> tuple[str, int]:
    name, sep, concurrency = text.partition("=")
    if not sep or not name or not concurrency.isdigit() or int(concurrency) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=CONCURRENCY (>= 1), got {text!r}")
    return name, int(concurrency)


def _rate_limit_arg(text: str) -> tuple[str, tuple[float, int]]:

    name, sep, limit = text.partition("=")
    rate, _, burst = limit.partition(":")
    try:
        if not sep or not name:
            raise ValueError
        return name, check_rate_limit(name, (float(rate), int(burst or 1)))
    except (ValueError, ConfigError) as exc:
        detail = f" ({exc})" if isinstance(exc, ConfigError) else ""
        raise argparse.ArgumentTypeError(
            f"expected NAME=RATE[:BURST] (jobs a second, burst default 1), got {text!r}{detail}"
        ) from None


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


def _cmd_admin(opts: argparse.Namespace) -> int:

    url = database_url(opts.database_url)
    ensure_migrated(url)
    args = [getattr(opts, name) for name in opts.positional_names]
    filters = {
        name: getattr(opts, name)
        for name in _FILTERS.get(opts.method, ())
        if getattr(opts, name, None) is not None
    }
    with Client(url) as client:
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
    """--no-standby: RunnerConfig.standby off (awa_fast.runtime.standby)."""
    command.add_argument("--no-standby", dest="standby", action="store_false", help=help)


def _setting_arg(text: str) -> tuple[str, float | int]:
    from dataclasses import fields

    name, sep, value = text.partition("=")
    names = {f.name for f in fields(RunnerConfig)}
    if not sep or name not in names:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {sorted(names)}")
    try:
        return name, int(value) if value.isdigit() else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a number") from None


def _cmd_serve(opts: argparse.Namespace) -> int:

    logs.configure(fmt=opts.log_format, level=opts.log_level)
    app = load_app(opts.app)
    url = database_url(opts.database_url) if opts.database_url or not app.dsn else app.dsn
    ensure_migrated(url)
    # the client's pool too: handlers in the workers use it
    app.database = Database(url, pooled=opts.pgbouncer or app.database.pooled)
    queues = dict(opts.queue) if opts.queue else None
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


def _cmd_local_status(opts: argparse.Namespace) -> int:
    """Whether the zero-config cluster runs: 0 if it does, 3 if not (as ``pg_ctl status``)."""
    cluster = local_cluster()
    state = _local_state(cluster)
    print(f"state: {state}")
    if state != "absent":
        print(f"url: {local_database_url(cluster)}")
    print(f"data: {cluster.root}")
    return 0 if state == "running" else 3


def _local_state(cluster: LocalCluster) -> str:
    if not cluster.initialised():
        return "absent"
    return "running" if cluster.running() else "stopped"


def _cmd_local_stop(opts: argparse.Namespace) -> int:
    """Stop the zero-config cluster, keeping its data; nothing to stop is not an error."""
    cluster = local_cluster()
    if not cluster.running():
        print(f"awa-fast local stop: no local Postgres runs in {cluster.root}", file=sys.stderr)
        return 0
    cluster.stop()
    print(f"awa-fast local stop: stopped; the data stays in {cluster.root}", file=sys.stderr)
    return 0


_LOCAL_COMMANDS = (
    (
        "status",
        "whether it runs, its URL and its data folder (exit 3: not running)",
        _cmd_local_status,
    ),
    ("stop", "stop it; its data stays for the next command that needs it", _cmd_local_stop),
)


def _local_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``local status | stop``: the server the commands start when given no URL."""
    local = sub.add_parser("local", help="the local Postgres started when no database URL is given")
    local.set_defaults(database_url=None, database_url_file=None)
    actions = local.add_subparsers(dest="action", required=True)
    for name, help, run in _LOCAL_COMMANDS:
        actions.add_parser(name, help=help, description=help).set_defaults(run=run)


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
    migrating.set_defaults(run=_cmd_migrate)

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
        type=_queue_arg,
        metavar="NAME=CONCURRENCY",
        help="a queue to run and its most handlers at once, over all workers; repeat for "
        f"more (default: every queue the app's handlers name, at {DEFAULT_CONCURRENCY} each)",
    )
    serve.add_argument(
        "--rate-limit",
        action="append",
        type=_rate_limit_arg,
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
        type=_setting_arg,
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

    grants = command(
        "grants", "print the GRANT statements an application role needs (connects nowhere)"
    )
    grants.add_argument("--role", required=True, help="the role the application connects as")
    grants.set_defaults(run=_cmd_grants)

    ui = command("ui", "serve the web dashboard (pip install 'awa-fast[ui]')")
    ui.add_argument(
        "--host", default="127.0.0.1", help="listen here (beyond loopback only with auth)"
    )
    ui.add_argument("--port", type=_int_in(1, 65535), default=8080)
    ui.add_argument("--read-only", action="store_true", help="show everything, change nothing")
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
    bench.add_argument("--jobs", type=_int_in(1), help="jobs per run (default: per scenario)")
    bench.add_argument("--runs", type=_int_in(1), default=3, help="runs per configuration (median)")
    bench.add_argument(
        "--processes", type=_int_in(0), default=0, help="worker processes (0: in-process)"
    )
    bench.add_argument("--duration", type=_seconds, help="seconds of offered load (sustained)")
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
    _local_commands(sub)
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


if __name__ == "__main__":
    sys.exit(main())
