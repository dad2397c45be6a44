"""Which database a command works on: the URL given (by flag, file or environment), else a
local Postgres started, migrated and named on stderr."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psycopg
from psycopg import conninfo

from awa_fast.db.dsn import for_writes
from awa_fast.db.migrate import (
    current_migration_version,
    current_version,
    migrate,
)
from awa_fast.localpg import (
    local_cluster,
    start_local_database,
)

URL_HELP = (
    "Postgres URL (default: $AWA_FAST_DATABASE_URL, $DATABASE_URL, else a local cluster)."
    " Other users of this machine can read a command line in ps: pass a URL with a password"
    " in AWA_FAST_DATABASE_URL or --database-url-file instead"
)


URL_FILE_HELP = "read the Postgres URL from this file (out of sight of ps)"


def database_url(flag: str | None) -> str:
    """The URL given, else a local Postgres started (or reused) and migrated for the user.
    A URL that names several hosts is asked for the primary among them (ConfigError for
    one that cannot be: :func:`awa_fast.db.dsn.for_writes`)."""
    url = flag or os.environ.get("AWA_FAST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    return for_writes(url) if url else _local_url()


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
