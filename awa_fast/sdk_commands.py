"""The Awa SDK's command tree (``python -m awa GROUP COMMAND``), for ``awa-fast`` and
``python -m awa_fast``: an operator's script that ran ``python -m awa --database-url URL job
retry 7`` runs with ``awa`` changed to ``awa_fast``, and prints the lines the SDK's commands
print (scripts grep them).

Only the grouped forms are the SDK's (``job dump``, ``queue pause``, ``dlq list``, ``cron
remove``, ``queue-stats``); a command line that is not one of them is ``awa-fast``'s own, so
``awa-fast job 7`` and ``awa-fast dlq`` keep their meaning. ``serve`` stays ``awa-fast``'s
(the SDK's serves its web UI, which awa-fast does not have).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any

from awa_fast.client_sync import Client

# group -> command -> its arguments: (flag or positional name, argparse options).
Arguments = tuple[tuple[str, dict[str, Any]], ...]
_ID: Arguments = (("id", {"type": int}),)
_FILTER: Arguments = (("--kind", {}), ("--queue", {}), ("--tag", {}))
_ALL: Arguments = (("--all", {"action": "store_true", "dest": "allow_all"}),)
TREE: dict[str, dict[str, Arguments]] = {
    "job": {
        "dump": _ID,
        "dump-run": (*_ID, ("--attempt", {"type": int})),
        "retry": _ID,
        "cancel": _ID,
        "retry-failed": (("--kind", {}), ("--queue", {})),
        "discard": (("--kind", {"required": True}),),
        "list": (
            ("--state", {}),
            ("--kind", {}),
            ("--queue", {}),
            ("--limit", {"type": int, "default": 50}),
        ),
    },
    "queue": {
        "pause": (("queue", {}),),
        "resume": (("queue", {}),),
        "drain": (("queue", {}),),
        "stats": (),
    },
    "dlq": {
        "list": (
            *_FILTER,
            ("--before-id", {"type": int}),
            ("--before-dlq-at", {"type": datetime.fromisoformat}),
            ("--limit", {"type": int, "default": 50}),
        ),
        "depth": (("--queue", {}),),
        "retry": _ID,
        "retry-all": (*_FILTER, *_ALL),
        "purge": (*_FILTER, *_ALL),
    },
    "cron": {"list": (), "remove": (("name", {}),)},
    "storage": {"status": ()},
}
# The SDK's ungrouped spelling of a grouped command.
ALIASES = {"queue-stats": ("queue", "stats")}


def is_sdk_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (after any leading ``--database-url``) is one of the SDK's grouped
    commands rather than one of ``awa-fast``'s."""
    if not argv:
        return False
    if argv[0] in ALIASES or argv[0] in ("queue", "storage"):  # no awa-fast commands
        return True
    commands = TREE.get(argv[0])
    return commands is not None and len(argv) > 1 and argv[1] in commands


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="awa-fast", description="The Awa SDK's command tree")
    groups = top.add_subparsers(dest="group", required=True)
    for group, commands in TREE.items():
        sub = groups.add_parser(group).add_subparsers(dest="command", required=True)
        for command, arguments in commands.items():
            cmd = sub.add_parser(command)
            for name, options in arguments:
                cmd.add_argument(name, **options)
    return top


def main(argv: Sequence[str], *, database_url: Callable[[], str]) -> int:
    """Run one of the SDK's commands; the exit status. ``database_url`` is asked for the
    URL once the command is known to need it (not for ``-h``, nor for a refusal)."""
    argv = [*ALIASES.get(argv[0], (argv[0],)), *argv[1:]]
    opts = parser().parse_args(argv)
    refusal = _refusal(opts)
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    with Client(database_url()) as client:
        return COMMANDS[opts.group, opts.command](client, opts) or 0


def _refusal(opts: argparse.Namespace) -> str | None:
    """What is refused before connecting: as the SDK refuses them, a retry-failed without
    exactly one filter and a bulk DLQ command with no filter and no --all."""
    if (opts.group, opts.command) == ("job", "retry-failed") and bool(opts.kind) == bool(
        opts.queue
    ):
        return "Specify exactly one of --kind or --queue"
    bulk = (opts.group, opts.command) in (("dlq", "retry-all"), ("dlq", "purge"))
    if bulk and not (opts.kind or opts.queue or opts.tag or opts.allow_all):
        return (
            f"dlq {opts.command}: pass --kind/--queue/--tag to scope, or --all to confirm "
            "a fleet-wide operation."
        )
    return None


def _retry_failed(client: Client, opts: argparse.Namespace) -> None:
    result = client.retry_failed(kind=opts.kind, queue=opts.queue)
    retried = len(result.jobs)
    message = f"Retried {retried} failed jobs"
    if result.matched != retried:
        message += f" (matched {result.matched}; {result.matched - retried} raced or pruned)"
    if result.pruned_failed_count:
        message += (
            f"; {result.pruned_failed_count} failed rows have been pruned past retention and"
            " are no longer retryable"
        )
    print(message)


# A table the SDK prints: each column's title, width and value of a row.
Column = tuple[str, int, Callable[[Any], object]]
JOB_COLUMNS: tuple[Column, ...] = (
    ("ID", 8, attrgetter("id")),
    ("KIND", 25, attrgetter("kind")),
    ("QUEUE", 10, attrgetter("queue")),
    ("STATE", 10, attrgetter("state")),
    ("ATT", 5, attrgetter("attempt")),
    ("MAX", 5, attrgetter("max_attempts")),
)
QUEUE_COLUMNS: tuple[Column, ...] = (
    ("QUEUE", 15, attrgetter("queue")),
    ("AVAIL", 10, attrgetter("available")),
    ("RUNNING", 10, attrgetter("running")),
    ("FAILED", 10, attrgetter("failed")),
)
DLQ_COLUMNS: tuple[Column, ...] = (
    ("ID", 8, attrgetter("job.id")),
    ("KIND", 25, attrgetter("job.kind")),
    ("QUEUE", 10, attrgetter("job.queue")),
    ("REASON", 30, lambda row: row.reason if len(row.reason) <= 30 else row.reason[:27] + "..."),
    ("DLQ_AT", 25, attrgetter("dlq_at")),
)
CRON_COLUMNS: tuple[Column, ...] = tuple(
    (title, width, itemgetter(key))
    for title, width, key in (
        ("NAME", 25, "name"),
        ("CRON", 20, "cron_expr"),
        ("TIMEZONE", 12, "timezone"),
        ("MISSED", 12, "missed_fire_policy"),
        ("KIND", 25, "kind"),
        ("QUEUE", 10, "queue"),
    )
)


def _table(
    rows: Sequence[Any], columns: Sequence[Column], *, empty: str, footer: str | None = None
) -> None:
    """Print ``rows`` as the SDK does: ``empty`` for none, else a header, a line a row and
    ``footer`` (with ``{count}``) after a blank line."""
    if not rows:
        print(empty)
        return
    print(" ".join(f"{title:<{width}}" for title, width, _ in columns))
    for row in rows:
        print(" ".join(f"{value(row)!s:<{width}}" for _, width, value in columns))
    if footer:
        print(f"\n{footer.format(count=len(rows))}")


def _list_jobs(client: Client, opts: argparse.Namespace) -> None:
    jobs = client.list_jobs(state=opts.state, kind=opts.kind, queue=opts.queue, limit=opts.limit)
    _table(jobs, JOB_COLUMNS, empty="No jobs found.", footer="{count} jobs listed.")


def _queue_stats(client: Client, opts: argparse.Namespace) -> None:
    _table(client.queue_stats(), QUEUE_COLUMNS, empty="No queues found.")


def _list_dlq(client: Client, opts: argparse.Namespace) -> None:
    rows = client.list_dlq(
        kind=opts.kind,
        queue=opts.queue,
        tag=opts.tag,
        before_id=opts.before_id,
        before_dlq_at=opts.before_dlq_at,
        limit=opts.limit,
    )
    _table(rows, DLQ_COLUMNS, empty="DLQ is empty (no matching rows).", footer="{count} rows.")
    if rows:
        last = rows[-1]
        print(f"Next page: --before-id {last.job.id} --before-dlq-at {last.dlq_at.isoformat()}")


def _dlq_depth(client: Client, opts: argparse.Namespace) -> None:
    if opts.queue:
        print(f"{opts.queue}: {client.dlq_depth(queue=opts.queue)}")
        return
    print(f"Total: {client.dlq_depth()}")
    for queue, count in client.dlq_depth_by_queue():
        print(f"  {queue}: {count}")


def _retry_from_dlq(client: Client, opts: argparse.Namespace) -> None:
    job = client.retry_from_dlq(opts.id)
    if job is None:
        print(f"No DLQ row with id {opts.id}")
    else:
        print(f"Retried DLQ job {opts.id} → job state {job.state}")


def _list_cron(client: Client, opts: argparse.Namespace) -> None:
    schedules = client.list_cron_jobs()
    _table(
        schedules,
        CRON_COLUMNS,
        empty="No cron job schedules found.",
        footer="{count} schedules listed.",
    )


def _remove_cron(client: Client, opts: argparse.Namespace) -> None:
    if client.delete_cron_job(opts.name):
        print(f"Removed cron schedule '{opts.name}'")
    else:
        print(f"No cron schedule found with name '{opts.name}'")


def _said(
    call: Callable[[Client, argparse.Namespace], object], line: str
) -> Callable[[Client, argparse.Namespace], None]:
    """A command that prints ``line``, formatted with its options and the call's result."""

    def command(client: Client, opts: argparse.Namespace) -> None:
        print(line.format(opts=opts, result=call(client, opts)))

    return command


def _job_found(call: Callable[[Client, int], object], line: str) -> Callable[..., int]:
    """A command on one job: ``line`` when it acted, else the SDK's "job not found" error
    and status 1 (awa-fast's cancel and retry return nothing for a job they cannot act on,
    where the SDK raises)."""

    def command(client: Client, opts: argparse.Namespace) -> int:
        if call(client, opts.id) in (None, False):
            print(f"job not found, or not in a state that allows it: {opts.id}", file=sys.stderr)
            return 1
        print(line.format(opts=opts))
        return 0

    return command


Command = Callable[[Client, argparse.Namespace], int | None]
COMMANDS: dict[tuple[str, str], Command] = {
    ("job", "dump"): _said(lambda c, o: c.dump_job(o.id), "{result}"),
    ("job", "dump-run"): _said(lambda c, o: c.dump_run(o.id, o.attempt), "{result}"),
    ("job", "retry"): _job_found(Client.retry, "Retried job {opts.id}"),
    ("job", "cancel"): _job_found(Client.cancel, "Cancelled job {opts.id}"),
    ("job", "retry-failed"): _retry_failed,
    ("job", "discard"): _said(
        lambda c, o: c.discard_failed(o.kind),
        "Discarded {result} failed jobs of kind '{opts.kind}'",
    ),
    ("job", "list"): _list_jobs,
    ("queue", "pause"): _said(
        lambda c, o: c.pause_queue(o.queue, paused_by="cli"), "Paused queue '{opts.queue}'"
    ),
    ("queue", "resume"): _said(
        lambda c, o: c.resume_queue(o.queue), "Resumed queue '{opts.queue}'"
    ),
    ("queue", "drain"): _said(
        lambda c, o: c.drain_queue(o.queue), "Drained {result} jobs from queue '{opts.queue}'"
    ),
    ("queue", "stats"): _queue_stats,
    ("dlq", "list"): _list_dlq,
    ("dlq", "depth"): _dlq_depth,
    ("dlq", "retry"): _retry_from_dlq,
    ("dlq", "retry-all"): _said(
        lambda c, o: c.bulk_retry_from_dlq(
            kind=o.kind, queue=o.queue, tag=o.tag, allow_all=o.allow_all
        ),
        "Retried {result} DLQ rows.",
    ),
    ("dlq", "purge"): _said(
        lambda c, o: c.purge_dlq(kind=o.kind, queue=o.queue, tag=o.tag, allow_all=o.allow_all),
        "Purged {result} DLQ rows.",
    ),
    ("cron", "list"): _list_cron,
    ("cron", "remove"): _remove_cron,
    ("storage", "status"): _said(lambda c, o: c.storage_status(), "{result}"),
}
