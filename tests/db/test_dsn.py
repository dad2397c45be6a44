"""Naming another database on the user's server keeps the rest of what the user gave: its
host (a Unix socket directory included), port and parameters."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import conninfo

from awa_fast.bench.measure import fresh_database
from awa_fast.db.dsn import database_of, with_database


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
