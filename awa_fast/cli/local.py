"""``awa-fast local status | stop``: the zero-config Postgres the other commands start when
they are given no database URL (awa_fast.localpg)."""

from __future__ import annotations

import argparse
import sys

from awa_fast.localpg import LocalCluster, local_cluster, local_database_url


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


def local_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``local status | stop``: the server the commands start when given no URL."""
    local = sub.add_parser("local", help="the local Postgres started when no database URL is given")
    local.set_defaults(database_url=None, database_url_file=None)
    actions = local.add_subparsers(dest="action", required=True)
    for name, help, run in _LOCAL_COMMANDS:
        actions.add_parser(name, help=help, description=help).set_defaults(run=run)
