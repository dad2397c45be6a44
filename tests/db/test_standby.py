"""Standby claims in SQL (migration 0018): a job inserted into a queue with a waiting claim
starts in its inserting transaction, and its host collects it with one read.

Each race here is forced, not hoped for: the transaction that holds a claim is left open
while the other one runs.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from awa_fast.db.connections import Database
from awa_fast.db.queries import Q
from awa_fast.runtime.claim.claimer import connect_claimer
from awa_fast.runtime.claim.standby import Standby
from tests.factories import insert_job
from tests.helpers import run

Conn = psycopg.Connection[Any]


def host(conn: Conn) -> int:
    row = conn.execute(Q.host_register, {"name": "test", "queues": Jsonb({})}).fetchone()
    assert row is not None
    return int(row[0])


def offer(conn: Conn, host_id: int, *queues: str, deadline: float = 60.0) -> None:
    conn.execute(
        Q.standby_offer,
        {"host_id": host_id, "queues": list(queues), "deadlines": [deadline] * len(queues)},
    )


def claims(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT queue, host_id, job_id, run_lease FROM awa_fast.standby_claims ORDER BY id"
    ).fetchall()


def started(conn: Conn, job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT state::text, attempt, run_lease, host_id,"
        " round(extract(epoch FROM deadline_at - attempted_at)),"
        " heartbeat_at IS NOT NULL FROM awa_fast.jobs_hot WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row


def notes(conn: Conn, listener: Conn) -> list[tuple[str, str]]:
    """What the listener heard of ``conn``'s statements, in order: up to a marker that
    ``conn`` sends now (one session's notifications arrive in the order sent)."""
    conn.execute("NOTIFY awa_fast_jobs, 'end of test'")
    heard = []
    for note in listener.notifies(timeout=10):
        if note.payload == "end of test":
            return heard
        heard.append((note.channel, note.payload))
    raise AssertionError(f"no marker after {heard}")


@pytest.fixture
def listener(dsn: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN awa_fast_jobs")
        conn.execute("LISTEN awa_fast_standby")
        yield conn


def test_an_insert_starts_on_a_waiting_claim(conn: Conn, listener: Conn) -> None:
    me = host(conn)
    offer(conn, me, "default", deadline=90)
    job_id = insert_job(conn)
    assert started(conn, job_id) == ("running", 1, 1, me, 90, True)
    assert claims(conn) == [("default", me, job_id, 1)]
    assert [(channel, note.split(" ")[0]) for channel, note in notes(conn, listener)] == [
        ("awa_fast_standby", str(me))
    ]


def test_jobs_beyond_the_claims_stay_available_and_are_announced(
    conn: Conn, listener: Conn
) -> None:
    me = host(conn)
    offer(conn, me, "default")
    ids = [
        row[0]
        for row in conn.execute(
            "INSERT INTO awa_fast.jobs_hot (kind, queue, priority)"
            " SELECT 'noop', 'default', p FROM unnest(ARRAY[3, 1, 2]) AS p RETURNING id"
        ).fetchall()
    ]
    states = dict(
        conn.execute(
            "SELECT priority, state::text FROM awa_fast.jobs_hot WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    )
    assert states == {1: "running", 2: "available", 3: "available"}  # claim order first
    assert [(channel, note.split(" ")[0]) for channel, note in notes(conn, listener)] == [
        ("awa_fast_standby", str(me)),
        ("awa_fast_jobs", "default"),
    ]


def test_no_start_in_another_queue_or_a_paused_one(conn: Conn, listener: Conn) -> None:
    me = host(conn)
    offer(conn, me, "other", "paused")
    conn.execute("INSERT INTO awa_fast.queue_meta (queue, paused) VALUES ('paused', true)")
    for queue in ("default", "paused"):
        job_id = insert_job(conn, queue=queue)
        assert started(conn, job_id)[0] == "available"
    assert [job for _, _, job, _ in claims(conn)] == [None, None]
    assert notes(conn, listener) == [("awa_fast_jobs", "default"), ("awa_fast_jobs", "paused")]


def test_a_rolled_back_insert_leaves_the_claim_waiting(dsn: str, conn: Conn) -> None:
    me = host(conn)
    offer(conn, me, "default")
    with psycopg.connect(dsn) as producer:
        insert_job(producer)
        producer.rollback()
    assert claims(conn) == [("default", me, None, None)]
    job_id = insert_job(conn)
    assert started(conn, job_id)[0] == "running"


def test_a_claim_another_insert_holds_is_skipped_not_waited_for(dsn: str, conn: Conn) -> None:
    me = host(conn)
    offer(conn, me, "default")
    with psycopg.connect(dsn) as first:
        first_id = insert_job(first)  # holds the claim until it commits
        second_id = insert_job(conn)  # autocommit: would hang here if it waited
        assert started(conn, second_id)[0] == "available"
        first.commit()
    assert started(conn, first_id)[0] == "running"
    assert claims(conn) == [("default", me, first_id, 1)]


def test_no_start_on_the_claim_of_a_host_gone_and_the_leader_drops_it(conn: Conn) -> None:
    gone, other = host(conn), host(conn)
    offer(conn, gone, "default")
    offer(conn, other, "default")
    conn.execute(Q.host_forget, {"id": gone})
    job_id = insert_job(conn)
    assert started(conn, job_id)[3] == other
    assert [h for _, h, _, _ in claims(conn)] == [gone, other]
    conn.execute(Q.standby_drop_orphans)
    assert [h for _, h, _, _ in claims(conn)] == [other]


def collect(dsn: str, host_id: int) -> list[tuple[Any, ...]]:
    """standby_collect as the runner runs it, then standby_forget of the spent claims it
    read; its rows (without the claim's id), whose columns after the first two are a
    claim's, column for column."""
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.execute(Q.standby_collect, {"host_id": host_id})
        claim = c.execute(
            Q.job_claim_rows, {"queue": "none", "limit": 1, "deadline_s": 1.0, "host_id": host_id}
        )
        assert cur.description is not None and claim.description is not None
        assert [d.name for d in cur.description][3:] == [d.name for d in claim.description]
        rows = cur.fetchall()
        c.execute(Q.standby_forget, {"ids": [row[2] for row in rows if not row[1]]})
        return [(queue, waiting, *job) for queue, waiting, _, *job in rows]


def test_collect_returns_started_jobs_and_spent_claims_are_forgotten(dsn: str, conn: Conn) -> None:
    me = host(conn)
    offer(conn, me, "default", "idle")
    job_id = insert_job(conn, args={"n": 7})
    rows = collect(dsn, me)
    assert [(queue, waiting, row[0], row[1], row[4]) for queue, waiting, *row in rows] == [
        ("default", False, job_id, 1, {"n": 7}),
        ("idle", True, None, None, None),
    ]
    assert claims(conn) == [("idle", me, None, None)]
    assert [row[:2] for row in collect(dsn, me)] == [("idle", True)]


def test_collect_passes_over_a_job_no_longer_running_on_that_attempt(dsn: str, conn: Conn) -> None:
    me = host(conn)
    offer(conn, me, "default")
    job_id = insert_job(conn)
    conn.execute(Q.job_cancel, {"id": job_id, "reason": "before collect"})
    assert [(queue, waiting, job[0]) for queue, waiting, *job in collect(dsn, me)] == [
        ("default", False, None)
    ]
    assert claims(conn) == []


def test_withdraw_deletes_waiting_claims_only(dsn: str, conn: Conn) -> None:
    me = host(conn)
    offer(conn, me, "default", "idle")
    job_id = insert_job(conn)
    conn.execute(Q.standby_withdraw, {"host_id": me})
    assert claims(conn) == [("default", me, job_id, 1)]


def test_withdraw_skips_a_claim_an_insert_holds_and_its_job_is_collected_after(
    dsn: str, conn: Conn
) -> None:
    """A runner stopping while a producer's transaction holds its claim: the withdraw
    neither waits nor deletes it, and the job, once committed, is collected."""
    me = host(conn)
    offer(conn, me, "default")
    with psycopg.connect(dsn) as producer:
        job_id = insert_job(producer)
        conn.execute(Q.standby_withdraw, {"host_id": me})  # autocommit: would hang if it waited
        assert [row[:2] for row in collect(dsn, me)] == [("default", True)]  # not committed
        producer.commit()
    assert [(row[2], row[3]) for row in collect(dsn, me)] == [(job_id, 1)]
    assert claims(conn) == []


def test_jobs_started_on_one_hosts_claims_together_are_announced_once_by_its_id(
    conn: Conn, listener: Conn
) -> None:
    """The note names the host alone, whatever the jobs hold (anyone may LISTEN): one
    note for the jobs a statement started on that host's claims, which one collect
    starts."""
    me = host(conn)
    offer(conn, me, "default", "default")
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue, args)"
        " SELECT 'k', 'default', jsonb_build_object('secret', n) FROM generate_series(1, 2) n"
    )
    assert notes(conn, listener) == [("awa_fast_standby", str(me))]
    assert [row[:2] for row in claims(conn)] == [("default", me)] * 2
    assert all(job is not None for _, _, job, _ in claims(conn))


async def collect_twice_first_forget_blocked(dsn: str, host_id: int, blocker: Conn) -> list[int]:
    """Standby.collect twice on one claim connection, the first one's forget failing on a
    row lock ``blocker`` holds (lock_timeout), the second after ``blocker`` rolls back: the
    ids of the jobs handed to start."""
    standby = Standby(["default"], deadlines=[60.0], recheck=1.0)
    started: list[int] = []

    def start(_: int, rows: list[tuple[Any, ...]]) -> None:
        started.extend(row[0] for row in rows)

    conn = await connect_claimer(Database(dsn), application_name="test")
    async with conn:
        await conn.execute("SET lock_timeout = '50ms'")
        cur = conn.cursor(binary=True)
        with pytest.raises(psycopg.errors.LockNotAvailable):
            await standby.collect(cur, host_id=host_id, now=0.0, start=start)
        blocker.rollback()
        await standby.collect(cur, host_id=host_id, now=1.0, start=start)
    return started


def test_a_job_whose_claim_was_not_forgotten_is_not_started_again(dsn: str, conn: Conn) -> None:
    me = host(conn)
    offer(conn, me, "default")
    job_id = insert_job(conn)
    with psycopg.connect(dsn) as blocker:
        blocker.execute("SELECT 1 FROM awa_fast.standby_claims FOR UPDATE")
        assert run(collect_twice_first_forget_blocked(dsn, me, blocker)) == [job_id]
    assert claims(conn) == []
