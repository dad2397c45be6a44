from __future__ import annotations

import threading

import psycopg

import awa_fast
from awa_fast.db.migrate import current_version, migrations


def _fresh_db(server_url: str, name: str) -> str:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + "/" + name


def test_migrate_is_idempotent(server_url: str) -> None:
    url = _fresh_db(server_url, "awa_fast_migrate_once")
    latest = len(migrations())
    assert awa_fast.migrate(url) == list(range(1, latest + 1))
    assert awa_fast.migrate(url) == []
    with psycopg.connect(url) as conn:
        assert current_version(conn) == latest


def test_concurrent_migrations_apply_each_version_once(server_url: str) -> None:
    url = _fresh_db(server_url, "awa_fast_migrate_race")
    results: list[list[int]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def migrate() -> None:
        start.wait()
        try:
            results.append(awa_fast.migrate(url))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = sorted(v for r in results for v in r)
    assert applied == list(range(1, len(migrations()) + 1))
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT version FROM awa_fast.schema_version ORDER BY 1").fetchall()
        assert [r[0] for r in rows] == applied


def test_client_migrate_reports_nothing_left(dsn: str) -> None:
    with awa_fast.Client(dsn) as client:
        assert client.migrate() == []
