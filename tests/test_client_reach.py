"""A client's calls when its database is out of reach: DatabaseUnreachable, naming the
server and never a password, within ``connect_timeout``; a pool merely busy is not an
outage."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg import conninfo
from psycopg_pool import PoolTimeout

import awa_fast
from tests.helpers import free_port


def _nowhere() -> str:
    """A URL with a password, to a loopback port nothing listens on."""
    return f"postgresql://app:s3cret-pw@127.0.0.1:{free_port()}/app"


def test_a_database_out_of_reach_raises_database_unreachable_naming_it() -> None:
    url = _nowhere()
    port = conninfo.conninfo_to_dict(url)["port"]
    with (
        awa_fast.Client(url, connect_timeout=2) as client,
        pytest.raises(awa_fast.DatabaseError) as raised,
    ):
        client.insert({"n": 1}, kind="k")
    assert isinstance(raised.value, awa_fast.DatabaseUnreachable)
    assert isinstance(raised.value, awa_fast.AwaError)
    message = str(raised.value)
    assert message.startswith(f"database unreachable at 127.0.0.1:{port}: ")
    assert "s3cret-pw" not in message


def test_the_async_client_raises_it_too() -> None:
    async def insert() -> None:
        async with awa_fast.AsyncClient(_nowhere(), connect_timeout=2) as client:
            await client.insert({"n": 1}, kind="k")

    unreachable = r"^database unreachable at 127\.0\.0\.1:"
    with pytest.raises(awa_fast.DatabaseUnreachable, match=unreachable):
        asyncio.run(insert())


def test_a_refusal_is_not_an_outage(dsn: str) -> None:
    """The server answered, and said no: psycopg's error, as it was."""
    wrong = conninfo.make_conninfo(dsn, dbname="no_such_database")
    with (
        awa_fast.Client(wrong, connect_timeout=2) as client,
        pytest.raises(psycopg.OperationalError) as raised,
    ):
        client.insert({"n": 1}, kind="k")
    assert not isinstance(raised.value, awa_fast.DatabaseUnreachable)


def test_a_pool_merely_busy_is_not_an_outage(dsn: str) -> None:
    """Every connection of the pool in use past connect_timeout: the pool's own timeout,
    not a database said to be unreachable."""
    with awa_fast.Client(dsn, max_connections=1, connect_timeout=1) as client:
        client.insert({"n": 1}, kind="k")
        with client.transaction(), pytest.raises(PoolTimeout) as raised:
            client.insert({"n": 2}, kind="k")
    assert not isinstance(raised.value, awa_fast.DatabaseUnreachable)


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), "5", True])
def test_connect_timeout_must_be_a_positive_number_of_seconds(seconds: object) -> None:
    with pytest.raises(awa_fast.ConfigError, match="connect_timeout must be a positive"):
        awa_fast.Client("postgresql:///app", connect_timeout=seconds)  # type: ignore[arg-type]
