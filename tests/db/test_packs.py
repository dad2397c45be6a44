"""Uniform batches stored as packs (migration 0016): a row per up to 512 jobs until a claim
starts them. Their jobs are available jobs in every way a user can see: listed, counted,
claimed in order beside jobs_hot's rows, cancelled, drained, worked by the test client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.queries import Q
from awa_fast.producer import PACK_MIN_JOBS
from awa_fast.testing import AwaTestClient
from tests.helpers import blocked_call, run


@dataclass
class Ping:
    n: int


@dataclass
class Pong:
    n: int


def _packs(conn: psycopg.Connection[Any]) -> list[tuple[int, int]]:
    """Each pack's (job count, taken), in id order."""
    rows = conn.execute(
        "SELECT cardinality(ids), taken FROM awa_fast.job_packs ORDER BY id"
    ).fetchall()
    return [(int(n), int(taken)) for n, taken in rows]


def _claim(conn: psycopg.Connection[Any], limit: int, queue: str = "default") -> list[int]:
    params = {"queue": queue, "limit": limit, "deadline_s": 60.0, "host_id": None}
    return [row[0] for row in conn.execute(Q.job_claim_batch, params).fetchall()]


def test_a_uniform_batch_is_stored_as_even_packs_and_reads_as_available_jobs(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    """1,100 jobs become three packs of 366-367 (none under PACK_MIN_JOBS), ids in item
    order; each job reads back as the row a job inserted alone would be."""
    ids = client.insert_many([Ping(n) for n in range(1100)], priority=3, tags=["t"])
    alone = client.insert(Ping(-1), priority=3, tags=["t"])
    assert ids == sorted(ids) and len(set(ids)) == 1100
    assert [n for n, _ in _packs(conn)] == [367, 367, 366]
    packed = client.get_job(ids[500])
    assert packed.args == {"n": 500}
    same = ("kind", "queue", "state", "priority", "attempt", "max_attempts", "tags", "errors")
    assert {k: getattr(packed, k) for k in same} == {k: getattr(alone, k) for k in same}
    assert packed.metadata == alone.metadata and packed.run_lease == alone.run_lease == 0
    assert len(client.list_jobs(state="available", limit=2000)) == 1101
    [stat] = client.queue_stats()
    assert (stat.available, stat.total_queued) == (1101, 1101)


def test_a_small_uniform_batch_stays_rows(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    client.insert_many([Ping(n) for n in range(PACK_MIN_JOBS - 1)])
    assert _packs(conn) == []
    assert len(client.list_jobs(state="available")) == PACK_MIN_JOBS - 1


def test_claims_take_packs_and_rows_in_one_order_each_job_once(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    """Priority first, then run_at, then id, whichever table holds the job; a claim takes
    part of a pack and the next one goes on from there."""
    late_row = client.insert(Ping(0), priority=2).id
    urgent_pack = client.insert_many([Ping(n) for n in range(100)], priority=1)
    urgent_row = client.insert(Ping(0), priority=1).id
    normal_pack = client.insert_many([Ping(n) for n in range(100)], priority=2)
    first = _claim(conn, 60)
    assert first == urgent_pack[:60] and _packs(conn) == [(100, 60), (100, 0)]
    second = _claim(conn, 60)
    assert second == [*urgent_pack[60:], urgent_row, late_row, *normal_pack[:18]]
    rest = _claim(conn, 500)
    assert rest == normal_pack[18:] and _packs(conn) == [] and _claim(conn, 10) == []
    started = client.get_job(urgent_pack[0])
    assert (started.state, started.attempt, started.run_lease) == ("running", 1, 1)


def test_each_job_a_claim_starts_from_a_pack_carries_its_own_args(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    """Claims of every size, each going on from where the last left the pack: every job
    comes out once, with its id's args (migration 0024 slices them by subscript)."""
    ids = client.insert_many([Ping(n) for n in range(300)])
    assert _packs(conn) == [(300, 0)]
    params = {"queue": "default", "deadline_s": 60.0, "host_id": None}
    args_by_id: dict[int, Any] = {}
    for limit in (1, 7, 64, 3, 500):
        rows = conn.execute(Q.job_claim_batch, {**params, "limit": limit}).fetchall()
        assert len(rows) == min(limit, 300 - len(args_by_id))
        args_by_id.update((row[0], row[4]) for row in rows)
    assert args_by_id == {job_id: {"n": n} for n, job_id in enumerate(ids)}
    assert _packs(conn) == []


def test_a_paused_queue_gives_no_packed_job(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    client.insert_many([Ping(n) for n in range(100)])
    client.pause_queue("default")
    assert _claim(conn, 10) == []
    client.resume_queue("default")
    assert len(_claim(conn, 10)) == 10


def test_cancelling_a_packed_job_leaves_its_pack_mates_available_as_they_were(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    ids = client.insert_many([Ping(n) for n in range(100)])
    _claim(conn, 10)
    before = client.get_job(ids[50])
    assert client.cancel(ids[50]) is not None
    assert client.get_job(ids[50]).state == "cancelled"
    assert _packs(conn) == []
    after = client.get_job(ids[51])
    assert (after.state, after.run_at, after.created_at) == (
        "available",
        before.run_at,
        before.created_at,
    )
    assert _claim(conn, 200) == [i for i in ids[10:] if i != ids[50]]


def test_draining_a_queue_cancels_its_packed_jobs(client: awa_fast.Client) -> None:
    ids = client.insert_many([Ping(n) for n in range(100)], queue="q")
    other = client.insert_many([Ping(n) for n in range(100)], queue="other")
    assert client.drain_queue("q") == 100
    assert {client.get_job(i).state for i in ids} == {"cancelled"}
    assert client.get_job(other[0]).state == "available"


def test_a_cancel_waits_for_the_claim_holding_the_pack_and_cancels_what_it_started(
    dsn: str, client: awa_fast.Client
) -> None:
    """The race: a claim holds the pack (its transaction open) while an admin cancels one
    of its jobs. The cancel waits, then finds the job running, and cancels that attempt;
    no job is both started and left available, none is lost."""
    ids = client.insert_many([Ping(n) for n in range(100)])
    with psycopg.connect(dsn) as claimer:
        taken = _claim(claimer, 30)
        with blocked_call(dsn, lambda: client.cancel(ids[10])) as result:
            claimer.commit()
    assert taken == ids[:30]
    cancelled = client.get_job(ids[10])
    assert cancelled is not None and result[0] is not None
    assert (cancelled.state, cancelled.attempt) == ("cancelled", 1)
    with psycopg.connect(dsn) as conn:
        assert _claim(conn, 500) == ids[30:]


def test_a_pack_rolled_back_with_its_transaction_is_gone(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    with pytest.raises(RuntimeError), client.transaction() as tx:
        tx.insert_many([Ping(n) for n in range(100)])
        raise RuntimeError("rolled back")
    assert client.list_jobs() == [] and _packs(conn) == []


def test_the_test_client_works_a_kind_past_packed_jobs_of_another(client: awa_fast.Client) -> None:
    """work_one unpacks the queue, so the jobs of other kinds ahead of the one it wants
    are held as rows are, and stay available."""
    client.insert_many([Ping(n) for n in range(100)])
    pong = client.insert(Pong(7)).id

    async def handle(job: Any) -> None:
        return None

    done = run(AwaTestClient(client).work_one(Pong, handle))
    assert (done.job.id, done.outcome) == (pong, "completed")
    assert len(client.list_jobs(state="available", limit=500)) == 100


def test_list_jobs_gives_the_newest_of_rows_and_packs_together(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    pings = client.insert_many([Ping(n) for n in range(100)])
    row = client.insert(Ping(100)).id
    pongs = client.insert_many([Pong(n) for n in range(100)])
    assert [j.id for j in client.list_jobs(limit=3)] == pongs[:-4:-1]
    assert [j.id for j in client.list_jobs(kind="ping", limit=2)] == [row, pings[-1]]
    assert _claim(conn, 101) == [*pings, row]
    assert client.list_jobs(state="available", kind="ping") == []
    assert [j.id for j in client.list_jobs(state="running", limit=2)] == [row, pings[-1]]
    assert [j.id for j in client.list_jobs(state="available", limit=1)] == [pongs[-1]]
