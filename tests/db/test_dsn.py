"""Naming another database on the user's server keeps the rest of what the user gave: its
host (a Unix socket directory included), port and parameters. A URL that names several
hosts asks for the primary among them, or is refused when it cannot reach one."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest
from psycopg import conninfo

import awa_fast
from awa_fast.bench.measure import fresh_database
from awa_fast.db.dsn import database_of, for_reads, for_writes, servers_of, with_database
from awa_fast.errors import ConfigError
from tests.helpers import free_port


@dataclass
class Pinged:
    n: int = 0


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("postgresql://u@h:5432/postgres", "postgresql://u@h:5432/other"),
        (
            "postgresql://u@h/postgres?sslmode=require&application_name=a",
            "postgresql://u@h/other?sslmode=require&application_name=a",
        ),
        (
            "postgresql://u@/postgres?host=/run/pg&port=5433",
            "postgresql://u@/other?host=/run/pg&port=5433",
        ),
        ("postgres://u@h:5432", "postgres://u@h:5432/other"),
        ("postgresql://u@h/postgres?dbname=postgres", "postgresql://u@h/other?dbname=other"),
    ],
)
def test_a_url_names_the_other_database_and_keeps_the_rest(dsn: str, expected: str) -> None:
    assert with_database(dsn, "other") == expected
    assert database_of(expected) == "other"


def test_a_key_value_string_gets_dbname() -> None:
    named = with_database("host=/run/pg port=5433 dbname=postgres sslmode=disable", "other")
    assert conninfo.conninfo_to_dict(named) == {
        "host": "/run/pg",
        "port": "5433",
        "dbname": "other",
        "sslmode": "disable",
    }


def test_a_string_that_names_no_database_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="names no database"):
        database_of("postgresql://u@h:5432")


def test_a_bench_database_on_a_unix_socket_url_keeps_its_parameters(server_url: str) -> None:
    """The benchmark's fresh database, reached through the server's Unix socket with a
    parameter of the user's: cutting the URL at its last '/' cut the socket directory."""
    with psycopg.connect(server_url) as conn:
        socket_dir = str(conn.execute("SHOW unix_socket_directories").fetchone()[0])  # type: ignore[index]
        port = str(conn.execute("SHOW port").fetchone()[0])  # type: ignore[index]
    user = conninfo.conninfo_to_dict(server_url).get("user", "postgres")
    socket_dir = socket_dir.split(",")[0].strip()
    socket_url = (
        f"postgresql://{user}@/postgres?host={socket_dir}&port={port}&application_name=dsn-probe"
    )
    with fresh_database(socket_url) as url, psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT current_database(), current_setting('application_name'),"
            " inet_server_addr() IS NULL"
        ).fetchone()
    assert row == (database_of(url), "dsn-probe", True)
    assert database_of(url).startswith("awa_fast_bench_")
    with psycopg.connect(server_url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname = %s", (database_of(url),)
        ).fetchone()
    assert left == (0,)


@pytest.mark.parametrize(
    ("dsn", "servers", "for_writing"),
    [
        (
            "postgresql://u@a:5432,b:5433/db",
            ["a:5432", "b:5433"],
            "postgresql://u@a:5432,b:5433/db?target_session_attrs=read-write",
        ),
        (
            "postgresql://u@a,b/db?sslmode=require",
            ["a:5432", "b:5432"],
            "postgresql://u@a,b/db?sslmode=require&target_session_attrs=read-write",
        ),
        (
            "host=a,b port=1,2 dbname=db",
            ["a:1", "b:2"],
            "dbname=db host=a,b port=1,2 target_session_attrs=read-write",
        ),
        ("postgresql://a,b/db?target_session_attrs=primary", ["a:5432", "b:5432"], None),
        ("postgresql://u@h/db", ["h:5432"], None),  # one server: as given
        ("postgresql://u@/db?host=/run/pg&port=5433", ["/run/pg:5433"], None),
        ("postgresql://a/db?target_session_attrs=any", ["a:5432"], None),
    ],
)
def test_a_url_naming_several_hosts_asks_for_the_primary(
    dsn: str, servers: list[str], for_writing: str | None
) -> None:
    """libpq's default, any, takes the first server that answers: a standby, perhaps."""
    assert servers_of(dsn) == servers
    assert for_writes(dsn) == (for_writing or dsn)
    assert for_reads(dsn) == dsn  # reads go wherever the URL says


@pytest.mark.parametrize(
    ("dsn", "refusal"),
    [
        ("postgresql://a:1,b:2,c:3/db?port=1,2", "names 3 hosts and 2 ports"),
        ("host=a,b port=1,2,3", "names 2 hosts and 3 ports"),
        ("host=a,b hostaddr=10.0.0.1", "names 2 hosts and 1 hostaddrs"),
        ("postgresql://a,b/db?target_session_attrs=standby", "target_session_attrs=standby lets"),
        ("postgresql://a,b/db?target_session_attrs=any", "target_session_attrs=any lets"),
        ("postgresql://a/db?target_session_attrs=read-only", "target_session_attrs=read-only"),
        ("postgresql://a/db?target_session_attrs=bogus", "not one libpq knows"),
    ],
)
def test_a_url_that_cannot_reach_a_primary_is_refused_by_name(dsn: str, refusal: str) -> None:
    with pytest.raises(ConfigError, match=refusal):
        for_writes(dsn)
    with pytest.raises(ConfigError, match=refusal):
        awa_fast.Client(dsn)  # where a URL is given


def test_the_environments_hosts_count_where_the_url_names_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libpq reads PGHOST when the URL names no host: several there are several hosts."""
    monkeypatch.setenv("PGHOST", "a,b")
    assert for_writes("dbname=db") == "dbname=db target_session_attrs=read-write"
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "primary")
    assert for_writes("dbname=db") == "dbname=db"


def test_a_client_on_two_hosts_whose_first_refuses_connects_to_the_second(dsn: str) -> None:
    """The first server named is down (nothing listens on its port): libpq goes on to the
    next, and so does every connection of the client's."""
    given = conninfo.conninfo_to_dict(dsn)
    both = conninfo.make_conninfo(
        dsn, host=f"127.0.0.1,{given['host']}", port=f"{free_port()},{given['port']}"
    )
    with awa_fast.Client(both) as client:
        assert client.insert(Pinged()).state == "available"
        assert [stat.queue for stat in client.queue_stats()] == ["default"]
