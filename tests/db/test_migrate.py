from __future__ import annotations

import json
import threading

import psycopg
import pytest

import awa_fast
from awa_fast.db.migrate import current_version, migrations
from awa_fast.db.queries import Q
from tests.helpers import assert_counts_exact, fresh_database, migrated_to, run


def test_migrate_is_idempotent(server_url: str) -> None:
    url = fresh_database(server_url, "awa_fast_migrate_once")
    latest = len(migrations())
    assert awa_fast.migrate(url) == list(range(1, latest + 1))
    assert awa_fast.migrate(url) == []
    with psycopg.connect(url) as conn:
        assert current_version(conn) == latest


def test_concurrent_migrations_apply_each_version_once(server_url: str) -> None:
    url = fresh_database(server_url, "awa_fast_migrate_race")
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


@pytest.mark.parametrize("version", [0, 5])
def test_start_on_an_older_schema_names_the_cause(server_url: str, version: int) -> None:
    """A runner refuses to start on a database without every migration (none, or an older
    release's), saying so, instead of failing later on a missing table or column; once
    migrated, it starts."""
    url = fresh_database(server_url, f"awa_fast_migrate_behind_{version}")
    if version:
        migrated_to(url, version)
    with psycopg.connect(url) as conn:
        assert current_version(conn) == version
    latest = len(migrations())

    async def main() -> None:
        client = awa_fast.AsyncClient(url)
        client.task(dict, kind="noop")(lambda job: None)
        try:
            with pytest.raises(
                awa_fast.SchemaNotMigrated,
                match=f"schema is at version {version}, this awa-fast needs {latest}: run",
            ):
                await client.start({"default": 1})
            assert await client.migrate() == list(range(version + 1, latest + 1))
            await client.start({"default": 1})
        finally:
            await client.close()

    run(main())


def test_migrations_are_whole_for_a_tool_of_ones_own(server_url: str) -> None:
    """The SDK's ``migrations()`` / ``migrations_range()``: (version, name, sql) in order,
    each SQL recording its own version, so a database migrated by running them is one
    ``migrate`` finds complete, and one ``migrate`` left behind takes the rest."""
    latest = awa_fast.current_migration_version()
    listed = awa_fast.migrations()
    assert [m.version for m in listed] == list(range(1, latest + 1))
    assert [tuple(m) for m in listed[:1]] == [(1, "init", listed[0].sql)]
    assert [m.version for m in awa_fast.migrations_range(3, 6)] == [4, 5, 6]
    assert awa_fast.migrations_range(latest, latest) == []
    assert awa_fast.migrations_range(6, 3) == []
    with pytest.raises(TypeError, match="from_version must be an int"):
        awa_fast.migrations_range("3", 6)  # type: ignore[arg-type]
    url = fresh_database(server_url, "awa_fast_migrate_by_hand")
    migrated_to(url, 5)
    assert awa_fast.migrate(url) == list(range(6, latest + 1))
    assert awa_fast.migrate(url) == []
    with psycopg.connect(url) as conn:
        names = conn.execute("SELECT version, name FROM awa_fast.schema_version ORDER BY 1")
        assert names.fetchall() == [(m.version, m.name) for m in listed]


def test_the_sdks_migration_loop_with_its_schema_patches_leaves_nothing_to_migrate(
    server_url: str,
) -> None:
    """The SDK's own migration tool applies ``migrations_range`` and then, at the latest
    version, ``schema_patches``: here that loop reaches a schema ``migrate`` finds complete,
    and a client can start on it."""
    url = fresh_database(server_url, "awa_fast_migrate_sdk_loop")
    latest = awa_fast.current_migration_version()
    with psycopg.connect(url) as conn:
        for _version, _description, sql in awa_fast.migrations_range(0, latest):
            conn.execute(sql.encode())
        for _name, _description, sql in awa_fast.schema_patches():
            conn.execute(sql.encode())
    assert awa_fast.migrate(url) == []
    client = awa_fast.Client(url)
    try:
        assert client.insert({"n": 1}, kind="k").state == awa_fast.JobState.Available
    finally:
        client.close()


def test_finished_jobs_move_out_of_jobs_hot_on_upgrade(server_url: str) -> None:
    """Version 6 moves the finished jobs an older schema kept in jobs_hot into jobs_done,
    every column intact, and leaves the unfinished ones where they can run."""
    url = fresh_database(server_url, "awa_fast_migrate_done")
    migrated_to(url, 5)
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO awa_fast.jobs_hot (kind, queue, state, attempt, finalized_at, errors)"
            " SELECT 'k', 'q', s::awa_fast.job_state, 2,"
            "  CASE WHEN s IN ('completed', 'failed', 'cancelled') THEN now() END,"
            '  \'[{"error": "x"}]\''
            " FROM unnest(ARRAY['available', 'running', 'waiting_external', 'completed',"
            "  'failed', 'cancelled']) AS s"
        )
        cur = conn.execute("SELECT * FROM awa_fast.jobs ORDER BY id")
        before = cur.fetchall()
        # Later versions append columns; those of version 5 must hold what they held.
        columns = ", ".join(column.name for column in cur.description or ())
    assert awa_fast.migrate(url)[0] == 6
    with psycopg.connect(url) as conn:
        after = conn.execute(f"SELECT {columns} FROM awa_fast.jobs ORDER BY id").fetchall()
        assert after == before

        def states_in(table: str) -> list[str]:
            rows = conn.execute(f"SELECT state::text FROM awa_fast.{table} ORDER BY id")
            return [r[0] for r in rows]

        assert states_in("jobs_hot") == ["available", "running", "waiting_external"]
        assert states_in("jobs_done") == ["completed", "failed", "cancelled"]
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE awa_fast.jobs_hot SET state = 'completed'")


def test_available_jobs_from_before_window_claims_are_claimed(server_url: str) -> None:
    """Version 27 stamps the available rows an older schema holds, so that the first
    window claim of their queue covers them; running ones stay as they were."""
    url = fresh_database(server_url, "awa_fast_migrate_windows")
    migrated_to(url, 26)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "INSERT INTO awa_fast.jobs_hot (kind, queue, state, priority)"
            " SELECT 'k', 'q', s::awa_fast.job_state, p"
            " FROM unnest(ARRAY['available', 'running']) AS s, generate_series(1, 4) AS p"
            " RETURNING id, state::text"
        ).fetchall()
    assert awa_fast.migrate(url)[0] == 27
    available = {id_ for id_, state in rows if state == "available"}
    params = {"queue": "q", "limit": 10, "deadline_s": 60.0, "host_id": None}
    with psycopg.connect(url, autocommit=True) as conn:
        claimed = conn.execute(Q.job_claim_batch, params).fetchall()
        assert {row[0] for row in claimed} == available
        assert [row[7] for row in claimed] == [1, 2, 3, 4]  # in claim order
        assert conn.execute(Q.job_claim_batch, params).fetchall() == []
        running = conn.execute(
            "SELECT count(*) FROM awa_fast.jobs_hot WHERE state = 'running'"
        ).fetchone()
    assert running == (8,)


def test_standby_claims_and_the_ledger_carry_over_into_their_rings(server_url: str) -> None:
    """Version 28 moves both tables into partitions: every standby claim keeps its id and
    its job, new ones are numbered after them, and each lane keeps its newest window."""
    url = fresh_database(server_url, "awa_fast_migrate_rings")
    migrated_to(url, 27)
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO awa_fast.standby_claims (queue, host_id, deadline_s, job_id, run_lease)"
            " VALUES ('q', 7, 60, NULL, NULL), ('q', 7, 60, 41, 1)"
        )
        conn.execute(
            "INSERT INTO awa_fast.claim_windows"
            " SELECT 'q', p, n, '1:1:', '5:5:', '4', n FROM generate_series(1, 2) AS p,"
            " generate_series(1, 3) AS n"
        )
        claims = conn.execute("SELECT * FROM awa_fast.standby_claims ORDER BY id").fetchall()
    assert awa_fast.migrate(url)[0] == 28
    with psycopg.connect(url) as conn:
        kept = conn.execute(
            "SELECT id, queue, host_id, deadline_s, job_id, run_lease"
            " FROM awa_fast.standby_claims ORDER BY id"
        ).fetchall()
        assert kept == claims
        [(new,)] = conn.execute(
            "INSERT INTO awa_fast.standby_claims (queue, host_id, deadline_s)"
            " VALUES ('q', 7, 60) RETURNING id"
        ).fetchall()
        assert new > max(claim[0] for claim in claims)
        lanes = conn.execute(
            "SELECT priority, n, pos_id FROM awa_fast.claim_windows ORDER BY priority"
        ).fetchall()
        assert lanes == [(1, 3, 3), (2, 3, 3)]


def test_jobs_queued_and_running_carry_over_into_the_hot_ring(server_url: str) -> None:
    """Version 29 moves jobs_hot into partitions: each job keeps its row (its lease, its
    place in its lane's window), is counted once, and is claimed or finished as before."""
    url = fresh_database(server_url, "awa_fast_migrate_hot_ring")
    migrated_to(url, 28)
    columns = "id, kind, queue, state::text, attempt, run_lease, ready_xid, host_id"
    claim = {"queue": "q", "limit": 1, "deadline_s": 60.0, "host_id": None}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa_fast.jobs_hot (kind, queue) SELECT 'k', 'q' FROM generate_series(1, 3)"
        )
        [(running, lease, *_)] = conn.execute(Q.job_claim_batch, claim).fetchall()
        before = conn.execute(f"SELECT {columns} FROM awa_fast.jobs_hot ORDER BY id").fetchall()
    assert awa_fast.migrate(url)[0] == 29
    with psycopg.connect(url, autocommit=True) as conn:
        after = conn.execute(f"SELECT {columns} FROM awa_fast.jobs_hot ORDER BY id").fetchall()
        assert after == before
        assert_counts_exact(conn)
        claimed = [conn.execute(Q.job_claim_batch, claim).fetchall() for _ in range(3)]
        assert [[row[0] for row in rows] for rows in claimed] == [
            [before[1][0]],
            [before[2][0]],
            [],
        ]
        done = conn.execute(
            Q.job_complete_many, {"ids": [running], "leases": json.dumps({str(running): lease})}
        ).fetchall()
        assert len(done) == 1
        assert_counts_exact(conn)


def test_finished_jobs_carry_over_into_the_done_ring(server_url: str) -> None:
    """Version 30 moves jobs_done into eight partitions: each finished job keeps its row in
    partition 0, is counted once, by partition too, and goes when that partition is freed."""
    url = fresh_database(server_url, "awa_fast_migrate_done_ring")
    migrated_to(url, 29)
    columns = "id, kind, queue, state::text, finalized_at, run_lease"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at)"
            " SELECT 'k', 'q', s::awa_fast.job_state, now() - interval '2 days'"
            " FROM unnest(ARRAY['completed', 'completed', 'failed', 'cancelled']) AS s"
        )
        before = conn.execute(f"SELECT {columns} FROM awa_fast.jobs_done ORDER BY id").fetchall()
    assert awa_fast.migrate(url)[0] == 30
    with psycopg.connect(url, autocommit=True) as conn:
        after = conn.execute(
            f"SELECT {columns}, slot FROM awa_fast.jobs_done ORDER BY id"
        ).fetchall()
        assert after == [(*row, 0) for row in before]
        assert_counts_exact(conn)
        parts = conn.execute(
            "SELECT state, part, sum(n) FROM (SELECT state, part, n FROM awa_fast.count_rollup"
            " UNION ALL SELECT state, part, n FROM awa_fast.count_deltas) c"
            " GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1"
        ).fetchall()
        assert parts == [("cancelled", 0, 1), ("completed", 0, 2), ("failed", 0, 1)]
        conn.execute("UPDATE awa_fast.done_turns SET turned_at = now() - interval '1 day'")
        [(freed,)] = conn.execute(
            "SELECT awa_fast.done_free(interval '1 day', interval '1 day', '{}', interval '1 hour')"
        ).fetchall()
        assert freed == 4
        assert conn.execute("SELECT count(*) FROM awa_fast.jobs_done").fetchone() == (0,)
        assert_counts_exact(conn)
