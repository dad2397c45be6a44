"""TCP keepalives and tcp_user_timeout on every connection a running client holds open,
read back from the sockets themselves: a leader cut off from its server must not keep a
connection that looks alive for the kernel's two hours."""

from __future__ import annotations

import gc
import socket
from dataclasses import dataclass
from typing import Any

import psycopg

import awa_fast
from awa_fast.db.connections import KEEPALIVES, keepalives
from tests.helpers import await_until, run

HELD_OPEN = {
    "awa-fast attempt writes",
    "awa-fast claimer",
    "awa-fast client",
    "awa-fast committer",
    "awa-fast heartbeat",
    "awa-fast leader",
    "awa-fast listener",
    "awa-fast maintenance",
}
# What libpq sets on the socket for each parameter of KEEPALIVES.
EXPECTED = {
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE): 1,
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE): KEEPALIVES["keepalives_idle"],
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL): KEEPALIVES["keepalives_interval"],
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT): KEEPALIVES["keepalives_count"],
    (socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT): KEEPALIVES["tcp_user_timeout"],
}


@dataclass
class Ping:
    n: int


def _open_connections() -> dict[str, list[psycopg.BaseConnection[Any]]]:
    """This process's open connections, by application name."""
    found: dict[str, list[psycopg.BaseConnection[Any]]] = {}
    for obj in gc.get_objects():
        if isinstance(obj, psycopg.BaseConnection) and not obj.closed:
            name = obj.info.get_parameters().get("application_name", "")
            found.setdefault(name, []).append(obj)
    return found


def _socket_options(conn: psycopg.BaseConnection[Any]) -> dict[tuple[int, int], int]:
    with socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM) as sock:
        return {option: sock.getsockopt(*option) for option in EXPECTED}


def test_every_connection_a_running_client_holds_open_is_kept_alive(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Ping)
    async def ping(job: awa_fast.Job[Ping]) -> None:
        job.set_progress(50)
        await job.flush_progress()  # the attempt writer connects

    async def main() -> dict[str, list[dict[tuple[int, int], int]]]:
        async with client:
            await client.insert(Ping(1))  # the committer connects for its first outcome
            await client.start({"default": 2})
            try:
                await await_until(
                    lambda: _open_connections().keys() >= HELD_OPEN, what="every part connected"
                )
                return {
                    name: [_socket_options(conn) for conn in conns]
                    for name, conns in _open_connections().items()
                    if name in HELD_OPEN
                }
            finally:
                await client.shutdown()

    options = run(main())
    assert options.keys() == HELD_OPEN
    for name, each in options.items():
        assert each == [EXPECTED] * len(each), name


def test_keepalives_set_in_the_dsn_stand() -> None:
    """An operator's own keepalive settings in the connection string are not replaced."""
    given = keepalives("postgresql://db.example/awa?keepalives_idle=60&tcp_user_timeout=9000")
    assert given == {
        "keepalives": 1,
        "keepalives_interval": KEEPALIVES["keepalives_interval"],
        "keepalives_count": KEEPALIVES["keepalives_count"],
    }
