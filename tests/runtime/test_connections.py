"""What a running client's connections look like from the server."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

import awa_fast
from tests.helpers import await_until, run


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
