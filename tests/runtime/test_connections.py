"""What a running client's connections look like from the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import awa_fast
from awa_fast.cli.schema import grant_sql
from awa_fast.db.connections import Database, connect_hot, connect_hot_async
from tests.helpers import await_until, run, wait_until


@dataclass
class Ping:
    n: int


PARTS = {
    "awa-fast client",
    "awa-fast claimer",
    "awa-fast committer",
    "awa-fast heartbeat",
    "awa-fast leader",
    "awa-fast listener",
    "awa-fast maintenance",
}


def application_names(dsn: str) -> list[str]:
    """The application name of every other client session on this database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
    return [name for (name,) in rows]


def test_every_connection_of_a_running_client_says_what_it_is(dsn: str) -> None:
    """An operator reading pg_stat_activity (or a CPU profile by backend) can tell each of
    the pool's sessions apart: every one carries an application name naming its part."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Ping)(lambda job: None)

    async def main() -> list[str]:
        async with client:
            await client.insert(Ping(1))  # the committer connects for its first outcome
            await client.start({"default": 2})
            try:
                await await_until(
                    lambda: set(application_names(dsn)) >= PARTS, what="every part connected"
                )
                return application_names(dsn)
            finally:
                await client.shutdown()

    names = run(main())
    assert set(names) >= PARTS
    assert all(name.startswith("awa-fast ") for name in names), names


class _Refused(Exception):
    pass


class _RefusingCursor(psycopg.Cursor[Any]):
    def execute(self, *args: Any, **kwargs: Any) -> Any:
        raise _Refused


class _RefusingAsyncCursor(psycopg.AsyncCursor[Any]):
    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        raise _Refused


def test_a_hot_connection_whose_settings_fail_is_closed_not_leaked(dsn: str) -> None:
    """The settings statement failing (here its cursor refuses; in life an interrupt or a
    server gone) must not leave a session open on the server until the collector runs."""
    name = "awa-fast refused"
    with pytest.raises(_Refused):
        connect_hot(Database(dsn), application_name=name, cursor_factory=_RefusingCursor)

    async def connect_async() -> None:
        await connect_hot_async(
            Database(dsn), application_name=name, cursor_factory=_RefusingAsyncCursor
        )

    with pytest.raises(_Refused):
        run(connect_async())
    # Closing is synchronous in the client; the server ends the session a moment later.
    wait_until(lambda: name not in application_names(dsn), what="the sessions to end")


def test_a_start_that_fails_leaves_none_of_its_connections_open(
    dsn: str, outsider_dsn: str
) -> None:
    """A role allowed one session gets its first claim connection and is refused the
    second: the start fails, and closes the one it had."""
    role = conninfo.conninfo_to_dict(outsider_dsn)["user"]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(grant_sql(str(role)).encode())
        admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT 1")
    client = awa_fast.AsyncClient(outsider_dsn)
    client.task(Ping)(lambda job: None)

    async def main() -> None:
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            await client.start({"default": 1}, claimers=2)

    run(main())
    with psycopg.connect(dsn, autocommit=True) as admin:
        sessions = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)
        ).fetchone()
    assert sessions == (0,)


@pytest.mark.parametrize(
    ("dsn", "error", "message"),
    [
        (5, awa_fast.ConfigError, "a database URL must be a string, got int"),
        ("", awa_fast.ConfigError, "a database URL is required"),
        ("not a url", awa_fast.ConfigError, 'not a database URL: missing "=" after "not"'),
        (
            "postgresql://app:hunter2@[::1/db",
            awa_fast.ConfigError,
            r'not a database URL: .* IPv6 host address in URI: "<the URL>"',
        ),
        (
            "password='hunter 2' port=5432 host",
            awa_fast.ConfigError,
            'not a database URL: missing "=" after "host"',
        ),
    ],
)
def test_a_client_refuses_a_database_url_it_cannot_use_and_hides_its_password(
    dsn: Any, error: type[Exception], message: str
) -> None:
    """Before, a malformed URL passed until the first connection, as psycopg's error,
    which libpq's parser may make quote the URL whole, password and all."""
    with pytest.raises(error, match=message) as raised:
        awa_fast.Client(dsn)
    assert "hunter" not in str(raised.value)
