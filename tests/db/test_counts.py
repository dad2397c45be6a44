"""The counters (migration 0025) against a full count of the job rows: after a mixed run
through every path that moves jobs, a TRUNCATE, and a statement that moves nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import awa_fast
from awa_fast import RetryAfter, TerminalError, WaitForCallback, producer_sync
from awa_fast.lifecycle.transitions import Backoff
from awa_fast.types import InsertRequest
from tests.factories import JOB_TABLES, insert_job
from tests.helpers import (
    COUNTED,
    assert_counts_exact,
    await_until,
    counts,
    fresh_database,
    migrated_to,
    run,
)


@dataclass
class Step:
    do: str


def _client(dsn: str, parked: list[str]) -> awa_fast.AsyncClient:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Step, kind="step", queue="mixed")
    async def step(job: awa_fast.Job[Step]) -> Any:
        match job.args.do:
            case "ok":
                return None
            case "flaky":  # retried once, through jobs_deferred and a promotion
                return RetryAfter(0.05) if job.attempt == 1 else None
            case "doomed":
                raise TerminalError("doomed")
            case "block":  # runs until an admin cancels it; its own outcome is then stale
                while not job.is_cancelled():
                    await asyncio.sleep(0.01)
                return None
            case "park":
                token = await job.register_callback(timeout_seconds=3600)
                parked.append(token.id)
                return WaitForCallback(token)
        raise AssertionError(job.args.do)

    return client


def _ids(conn: psycopg.Connection[Any], where: str) -> list[int]:
    return [row[0] for row in conn.execute(f"SELECT id FROM awa_fast.jobs WHERE {where}")]


def _count(conn: psycopg.Connection[Any], where: str) -> int:
    return len(_ids(conn, where))


def test_the_counts_are_exact_after_a_mixed_run(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Packs (one statement, and split in the server), COPY, single inserts and standby
    starts; claims, completions, retries, promotions, a failure and a dead-lettering by the
    committer; callbacks parked and resolved; cancels of an available, a packed and a
    running job; a dead host's attempts rescued; a dead-letter move and retries; a batch
    operation moving jobs between queues; a job retried by an admin; and retention. The
    leader folds the counts mid-run, and not after: the counters are the rollup and the
    deltas since."""
    parked: list[str] = []
    client = _client(dsn, parked)
    soon = datetime.now(UTC) + timedelta(seconds=0.3)
    later = datetime.now(UTC) + timedelta(days=1)

    async def main() -> None:
        await client.insert_many([Step("ok") for _ in range(600)], queue="mixed")  # packs
        idle_pack = await client.insert_many([Step("ok") for _ in range(100)], queue="idle")
        await client.insert_many([Step("ok") for _ in range(70)], queue="kept")  # stays packed
        await client.insert_many(  # not uniform: COPY, into jobs_hot and jobs_deferred
            [InsertRequest(Step("ok"), queue="mixed", priority=1 + i % 4) for i in range(20)]
            + [InsertRequest(Step("ok"), queue="mixed", run_at=soon) for _ in range(5)]
        )
        for do, queue, n in (("flaky", "mixed", 10), ("doomed", "mixed", 3), ("doomed", "dead", 3)):
            await client.insert_many([Step(do) for _ in range(n)], queue=queue)
        blocked = [(await client.insert(Step("block"), queue="mixed")).id for _ in range(2)]
        await client.insert_many([Step("park") for _ in range(3)], queue="mixed")
        await client.insert_many([Step("ok") for _ in range(3)], queue="idle", run_at=later)
        cancelled = (await client.insert(Step("ok"), queue="idle")).id
        assert await client.cancel(cancelled)
        assert await client.cancel(idle_pack[50])  # unpacks its pack, then cancels
        host = conn.execute(
            "INSERT INTO awa_fast.hosts (name, heartbeat_at)"
            " VALUES ('gone', now() - interval '1 hour') RETURNING id"
        ).fetchone()
        for _ in range(2):  # a dead host's attempts
            lost = insert_job(conn, kind="step", queue="mixed", args={"do": "ok"}, state="running")
            conn.execute(
                "UPDATE awa_fast.jobs_hot SET attempt = 1, run_lease = 1, host_id = %s"
                " WHERE id = %s",
                (host[0] if host else None, lost),
            )

        runner = await client.start(
            {"mixed": 50, "dead": 5},
            dlq_queues={"dead": True},
            backoff=Backoff(base=0.05, max=0.1, jitter=0.0),
            poll_interval=0.1,
            promote_interval=0.05,
            rescue_interval=0.1,
            # the dead host is taken once the leader has been up a staleness window
            heartbeat_interval=0.5,
            heartbeat_staleness=3.0,
            batch_interval=0.1,
            count_interval=3600.0,  # the leader folds once at its start; the test folds next
            cleanup_interval=3600.0,  # retention runs when the test says
        )
        try:
            await await_until(
                lambda: (
                    _count(conn, "queue = 'mixed' AND state = 'completed'") == 637
                    and _count(conn, "queue = 'mixed' AND state = 'running'") == 2
                    and len(parked) == 3
                    and _count(conn, "state = 'waiting_external'") == 3
                    and _count(conn, "state = 'failed'") == 3
                    and _count(conn, "queue = 'dead'") == 0
                ),
                what="the first phase",
            )
            for job_id in blocked:
                assert await client.cancel(job_id)
            await await_until(lambda: runner.maintenance.leader.is_leader, what="a leader")
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
                first = await runner.maintenance.counts.run_once(c)  # seals, maybe folds
                second = await runner.maintenance.counts.run_once(c)
                assert (first or 0) + (second or 0) > 0

            await client.complete_external(parked[0], {"ok": True})
            [failed] = _ids(conn, "queue = 'mixed' AND state = 'failed' LIMIT 1")
            assert await client.move_failed_to_dlq(failed, "by hand")
            [first_dead, second_dead, *_] = [e.job.id for e in await client.list_dlq(queue="dead")]
            assert await client.retry_from_dlq(first_dead, queue="idle")
            assert await client.retry_from_dlq(second_dead, run_at=later)
            operation = await client.move_queue("moved", filter={"queue": "idle"})
            await await_until(
                lambda: (
                    conn.execute(
                        "SELECT state FROM awa_fast.batch_operations WHERE id = %s",
                        (operation["id"],),
                    ).fetchone()
                    == ("completed",)
                ),
                what="the batch operation",
            )
            conn.execute(  # past retention, in a sealed partition: freed by the cleaner below
                "UPDATE awa_fast.jobs_done SET finalized_at = now() - interval '4 days',"
                " slot = (awa_fast.done_slot() + 4) % 8"
                " WHERE id IN (SELECT id FROM awa_fast.jobs_done WHERE queue = 'mixed'"
                " ORDER BY id LIMIT 100)"
            )
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
                assert await runner.maintenance.cleaner.run_once(c) == 100
            await client.insert_many([Step("ok") for _ in range(5)], queue="mixed")  # standby
            for _ in range(5):
                await client.insert(Step("ok"), queue="mixed")
            assert await client.retry(cancelled)
            await await_until(
                lambda: _count(conn, "queue = 'mixed' AND state IN ('available', 'running')") == 0,
                what="the second phase",
            )
        finally:
            await client.shutdown()
        await client.close()

    run(main())
    deltas = conn.execute("SELECT count(*) FROM awa_fast.count_deltas").fetchone()
    rolled = conn.execute("SELECT count(*) FROM awa_fast.count_rollup").fetchone()
    assert deltas and deltas[0] > 0 and rolled and rolled[0] > 0  # both count
    assert_counts_exact(conn)
    for table in JOB_TABLES:  # every table holds jobs at the end
        assert conn.execute(f"SELECT EXISTS (SELECT 1 FROM awa_fast.{table})").fetchone() == (
            True,
        ), table


def _some_of_everything(conn: psycopg.Connection[Any]) -> None:
    """Jobs in every state and table: rows, a pack, finished ones of this hour and of
    days ago, and dead-lettered ones."""
    for state in ("available", "running", "waiting_external", "scheduled", "retryable"):
        for queue in ("a", "b"):
            insert_job(conn, queue=queue, state=state)
    producer_sync.insert_many(conn, [Step("ok") for _ in range(100)], queue="a")  # a pack
    for state, ago in (("completed", 0), ("completed", 3), ("failed", 90), ("cancelled", 0)):
        for queue in ("a", "b"):
            conn.execute(
                "INSERT INTO awa_fast.jobs_done (kind, queue, state, finalized_at)"
                " VALUES ('k', %s, %s, now() - make_interval(mins => %s))",
                (queue, state, ago * 24 * 60 if state == "failed" else ago),
            )
    conn.execute(
        "INSERT INTO awa_fast.dlq (kind, queue, state, finalized_at, dlq_reason)"
        " VALUES ('k', 'b', 'failed', now(), 'x')"
    )


def test_the_migration_counts_the_jobs_already_there(server_url: str) -> None:
    """A database with jobs in every table, migrated in place: its counts are exact from
    the migration on, and stay so."""
    url = fresh_database(server_url, "awa_fast_counts_upgrade")
    migrated_to(url, 24)
    with psycopg.connect(url, autocommit=True) as conn:
        _some_of_everything(conn)
    assert awa_fast.migrate(url)[0] == 25  # and any later ones
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM awa_fast.count_deltas").fetchone() == (0,)
        assert_counts_exact(conn)
        _some_of_everything(conn)
        assert_counts_exact(conn)


def test_a_truncate_takes_its_tables_counts_away(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _some_of_everything(conn)
    conn.execute("TRUNCATE awa_fast.jobs_hot, awa_fast.job_packs")
    assert_counts_exact(conn)
    for table in JOB_TABLES:
        conn.execute(f"TRUNCATE awa_fast.{table}")
    assert_counts_exact(conn)
    assert counts(conn, COUNTED) == {}


def test_a_statement_that_moves_no_job_appends_nothing(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Heartbeats and progress saves rewrite running rows in place: no count changes, so
    no delta is written for them."""
    for _ in range(3):
        insert_job(conn, state="running", run_lease=1)
    before = conn.execute("SELECT count(*) FROM awa_fast.count_deltas").fetchone()
    conn.execute("UPDATE awa_fast.jobs_hot SET heartbeat_at = now()")
    conn.execute("UPDATE awa_fast.jobs_hot SET progress = '{\"done\": 1}'")
    conn.execute("UPDATE awa_fast.jobs_hot SET state = 'running' WHERE false")
    assert conn.execute("SELECT count(*) FROM awa_fast.count_deltas").fetchone() == before
    assert_counts_exact(conn)
