"""Forward-only, versioned schema migrations.

Migrations are the numbered files in ``awa_fast/db/migrations`` (``0001_init.sql`` …). They run
inside one transaction under a transaction-scoped advisory lock, so several processes may
migrate the same database at once: the first applies, the others wait and then find nothing
left to do.

Each migration's SQL, as :func:`migrations` gives it, is whole: applied in order by a tool of
the user's own (as the Awa SDK's ``migrations()`` are), each once, from the version
``awa_fast.schema_version`` holds, it records its version there as :func:`migrate` does, so
either way of migrating can follow the other.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from importlib import resources
from typing import Any, NamedTuple

import psycopg

from awa_fast.db.dsn import for_writes
from awa_fast.errors import SchemaNotMigrated

SCHEMA = "awa_fast"
_LOCK_KEY = 0x617761_6661_7374  # "awafast": one lock per database for migrations
_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
# Where the versions are kept; every migration's SQL records its own, and the first creates
# this too, so the bookkeeping needs nothing outside the migrations themselves.
_BOOKKEEPING = f"""CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


class Migration(NamedTuple):
    """One schema version: the SDK's ``(version, description, sql)`` triple."""

    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every bundled migration in version order, each SQL whole (see the module's doc)."""
    found = []
    for entry in resources.files("awa_fast.db").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            version, name = int(match[1]), match[2]
            sql = entry.read_text(encoding="utf-8")
            found.append(Migration(version, name, _recorded(version, name, sql)))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration versions must be 1..n without gaps, found {versions}")
    return found


def migrations_range(from_version: int, to_version: int) -> list[Migration]:
    """The migrations that take a database at ``from_version`` to ``to_version`` (versions
    above the one and up to the other; none when the database is already there or past it,
    as the SDK's ``migrations_range``)."""
    for name, value in (("from_version", from_version), ("to_version", to_version)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    return [m for m in migrations() if from_version < m.version <= to_version]


def schema_patches() -> list[tuple[str, str, str]]:
    """The Awa SDK's repeatable schema patches, ``(name, description, sql)`` to apply after
    the latest version's migration: none here, ever. Every awa-fast schema change is a
    numbered migration, so a migration tool ported from the SDK that applies these after
    :func:`migrations` applies nothing more, and misses nothing."""
    return []


def _recorded(version: int, name: str, sql: str) -> str:
    """``sql`` followed by the row that records it (and, for the first, preceded by the
    schema and table that hold that row)."""
    record = (
        f"INSERT INTO {SCHEMA}.schema_version (version, name) "
        f"VALUES ({version}, '{name}') ON CONFLICT (version) DO NOTHING;\n"
    )
    return f"{_BOOKKEEPING if version == 1 else ''}{sql.rstrip()}\n\n{record}"


def current_migration_version() -> int:
    """The schema version this code migrates to (the Awa SDK's name for it)."""
    return migrations()[-1].version


class Applied(list[int]):
    """The versions a migration applied, in order. Awaitable as well: the Awa SDK's
    ``migrate(url)`` is a coroutine function, so code ported from it says ``await
    awa.migrate(url)``; the migration has run by then, on the calling thread (as a
    program's start-up step, it blocks its event loop for that moment)."""

    def __await__(self) -> Generator[None, None, Applied]:
        return self._done().__await__()

    async def _done(self) -> Applied:
        return self


def migrate(dsn: str) -> Applied:
    """Bring the database at ``dsn`` to the latest schema; returns the versions applied.
    A URL that names several hosts migrates the primary among them."""
    with psycopg.connect(for_writes(dsn), autocommit=True) as conn:
        return Applied(migrate_connection(conn))


def migrate_connection(conn: psycopg.Connection[Any]) -> list[int]:
    """Migrate over an open connection (in its own transaction)."""
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(_BOOKKEEPING)
        row = conn.execute(
            f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.schema_version"
        ).fetchone()
        current = int(row[0]) if row else 0
        for migration in migrations_range(current, current_migration_version()):
            conn.execute(migration.sql.encode())
            applied.append(migration.version)
    return applied


def current_version(conn: psycopg.Connection[Any]) -> int:
    """The schema version of the connected database (0 when never migrated)."""
    row = conn.execute(f"SELECT to_regclass('{SCHEMA}.schema_version') IS NOT NULL").fetchone()
    if not (row and row[0]):
        return 0
    row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.schema_version").fetchone()
    return int(row[0]) if row else 0


def require_migrated(dsn: str) -> None:
    """Raise :class:`SchemaNotMigrated` unless the database holds every bundled migration:
    a runner on an older schema would otherwise fail later, statement by statement, with
    errors that name a missing table or column instead of the cause."""
    with psycopg.connect(dsn, autocommit=True, application_name="awa-fast schema check") as conn:
        current = current_version(conn)
    needed = len(migrations())
    if current < needed:
        raise SchemaNotMigrated(current, needed)
