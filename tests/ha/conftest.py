"""A primary and its streaming standby, each a LocalCluster of the test's own, and the
moves of a failover: cutting the standby off, killing the primary, promoting the standby.

The standby is a base backup of the primary (``pg_basebackup -R``: its
``primary_conninfo`` and ``standby.signal``), taken once the test's database is migrated,
so that it starts with the schema. Synchronous replication is asked for afterwards
(``synchronous_standby_names``), and waited for: a commit returns once the standby has it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.dsn import with_database
from awa_fast.localpg import LocalCluster
from tests.ha.app import RUNS
from tests.helpers import wait_until

DATABASE = "awa_ha"


def _query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """The rows ``sql`` returns (none for a statement that returns none)."""
    with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@dataclass
class Replicated:
    primary: LocalCluster
    standby: LocalCluster

    def url_of(self, *clusters: LocalCluster) -> str:
        """The test database's URL naming ``clusters``' servers, in that order (the
        primary, then the standby, if none is named)."""
        named = clusters or (self.primary, self.standby)
        hosts = ",".join(f"127.0.0.1:{cluster.port}" for cluster in named)
        return f"postgresql://postgres@{hosts}/{DATABASE}"

    @property
    def url(self) -> str:
        return self.url_of()

    def query(self, cluster: LocalCluster, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return _query(self.url_of(cluster), sql, *params)

    def synchronous(self) -> None:
        """Commits wait for the standby from now on."""
        self.query(self.primary, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        self.query(self.primary, "SELECT pg_reload_conf()")
        wait_until(
            lambda: (
                self.query(self.primary, "SELECT sync_state FROM pg_stat_replication")
                == [("sync",)]
            ),
            what="the standby to be synchronous",
        )

    def replayed(self) -> bool:
        """Whether the standby has replayed all the primary has written."""
        [(lsn,)] = self.query(self.primary, "SELECT pg_current_wal_lsn()::text")
        [(caught_up,)] = self.query(
            self.standby, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", lsn
        )
        return bool(caught_up)

    def cut_off(self) -> None:
        """The standby receives nothing more: it stops streaming (an empty
        ``primary_conninfo``), and the primary sees no standby."""
        self.query(self.standby, "ALTER SYSTEM SET primary_conninfo = ''")
        self.query(self.standby, "SELECT pg_reload_conf()")
        wait_until(
            lambda: (
                self.query(self.standby, "SELECT count(*) FROM pg_stat_wal_receiver") == [(0,)]
                and self.query(self.primary, "SELECT count(*) FROM pg_stat_replication") == [(0,)]
            ),
            what="the standby to stop streaming",
        )

    def fail_over(self, *, deciding: float = 0.0) -> tuple[float, float]:
        """Kill the primary (``pg_ctl stop -m immediate``) and promote the standby
        ``deciding`` seconds later (the time a failover manager takes to see the primary
        gone: the outage itself, not a wait for anything); the moments (time.time()) the
        kill and the promotion returned."""
        self.primary.pg_ctl("stop", "-m", "immediate")
        killed = time.time()
        time.sleep(deciding)
        self.standby.promote()
        return killed, time.time()


@pytest.fixture
def replicated() -> Iterator[Replicated]:
    """A primary with the test database migrated (and the app's ``runs`` table), and a
    streaming standby of it, asynchronous until :meth:`Replicated.synchronous`."""
    primary = LocalCluster.temporary()
    standby: LocalCluster | None = None
    try:
        server = primary.start()
        _query(server, f"CREATE DATABASE {DATABASE}")
        url = with_database(server, DATABASE)
        awa_fast.migrate(url)
        _query(url, RUNS)
        standby = primary.standby()
        yield Replicated(primary, standby)
    finally:
        for cluster in (standby, primary):
            if cluster is not None:
                cluster.stop(remove=True)
