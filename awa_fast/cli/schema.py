"""The schema commands: ``migrate`` (or its SQL, for a migration tool of one's own) and
``grants`` (what an application role needs)."""

from __future__ import annotations

import argparse
import os
import sys

import psycopg

from awa_fast.cli.urls import database_url
from awa_fast.db.migrate import (
    SCHEMA,
    current_migration_version,
    current_version,
    migrate,
    migrations_range,
)


def cmd_migrate(opts: argparse.Namespace) -> int:
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


def cmd_grants(opts: argparse.Namespace) -> int:
    print(grant_sql(opts.role), end="")
    return 0
