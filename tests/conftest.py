"""Test databases: one migrated template per session, a fresh copy per test.

Tests commit from several connections (and, in the pool tests, several processes), so a
rolled-back transaction per test is not enough isolation; ``CREATE DATABASE … TEMPLATE``
of a once-migrated database is fast and gives each test a clean schema.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo

import awa_fast
from awa_fast.db.dsn import with_database
from awa_fast.localpg import LocalCluster

# One template per test session: sessions sharing a server (two checkouts, say) must not
# rebuild each other's template mid-run.
TEMPLATE = f"awa_fast_template_{os.getpid()}"
_counter = itertools.count()


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    url = os.environ.get("AWA_FAST_TEST_DATABASE_URL")
    if url:
        yield url
        return
    cluster = LocalCluster.temporary()
    try:
        yield cluster.start()
    finally:
        cluster.stop(remove=True)


def _db_url(server_url: str, name: str) -> str:
    return with_database(server_url, name)


@pytest.fixture(scope="session")
def template_url(server_url: str) -> Iterator[str]:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    url = _db_url(server_url, TEMPLATE)
    awa_fast.migrate(url)
    yield url
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")


@pytest.fixture
def dsn(server_url: str, template_url: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"awa_fast_test_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    yield _db_url(server_url, name)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def client(dsn: str) -> Iterator[awa_fast.Client]:
    with awa_fast.Client(dsn) as c:
        yield c


@pytest.fixture
def outsider_dsn(dsn: str) -> Iterator[str]:
    """``dsn`` as a role with LOGIN and no grant at all: what any other tenant of a shared
    cluster is, and all that NOTIFY and LISTEN need."""
    name = f"awa_fast_outsider_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN")
    yield conninfo.make_conninfo(dsn, user=name)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE {name}")
