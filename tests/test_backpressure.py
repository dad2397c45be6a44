"""Backpressure (awa_fast.backpressure) against a real database: an insert that asks for it
is refused with QueueFull when its jobs would take the queue's available jobs past the
limit, and lets nothing through then (insert_many: the whole call); the depth comes from
the counters, rollup and deltas, never the job rows; an insert that does not ask reads
nothing for it; and the process counts what the checks found."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast import producer_sync
from awa_fast.backpressure import PRESSURE
from awa_fast.db.queries import Q
from awa_fast.errors import QueueFull, ValidationError
from awa_fast.maintenance.counts import Counts, CountsConfig
from awa_fast.maintenance.stats import MaintenanceStats
from awa_fast.producer import prepare
from awa_fast.types import InsertRequest
from tests.helpers import free_port, run, scrape
from tests.maintenance.support import leader, one_pass

Conn = psycopg.Connection[Any]


@dataclass
class Row:
    n: int


def available(conn: Conn, queue: str) -> int:
    """The queue's available jobs, counted from the rows (packed ones included)."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM awa_fast.jobs_hot WHERE queue = %(q)s"
        "        AND state = 'available')"
        " + (SELECT COALESCE(sum(size - taken), 0) FROM awa_fast.job_packs"
        "    WHERE queue = %(q)s)",
        {"q": queue},
    ).fetchone()
    assert row is not None
    return int(row[0])


def jobs_in(conn: Conn, queue: str) -> int:
    row = conn.execute("SELECT count(*) FROM awa_fast.jobs WHERE queue = %s", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def refused(call: Any) -> QueueFull:
    with pytest.raises(QueueFull) as caught:
        call()
    return caught.value


def fields(error: QueueFull) -> tuple[str, int, int, int]:
    return error.queue, error.depth, error.limit, error.jobs


def test_an_insert_past_the_limit_is_refused_naming_queue_depth_and_limit(
    client: awa_fast.Client, conn: Conn
) -> None:
    client.insert_many([Row(n) for n in range(3)], queue="q")
    client.insert(Row(3), queue="q", max_queue_depth=4)  # 3 + 1: at the limit, let in
    before = PRESSURE.read()
    error = refused(lambda: client.insert(Row(4), queue="q", max_queue_depth=4))
    assert fields(error) == ("q", 4, 4, 1)
    assert "queue 'q' is full" in str(error) and "max_queue_depth of 4" in str(error)
    request = InsertRequest(Row(5), queue="q", max_queue_depth=2)
    assert fields(refused(lambda: client.insert(request))) == ("q", 4, 2, 1)
    assert jobs_in(conn, "q") == 4  # neither went in
    signalled, refusals = PRESSURE.read()
    assert refusals.get("q", 0) - before[1].get("q", 0) == 2
    assert signalled.get("q", 0) - before[0].get("q", 0) == 2
    client.insert(Row(6), queue="other", max_queue_depth=1)  # another queue: its own depth
    assert jobs_in(conn, "other") == 1


def test_a_refusal_leaves_the_callers_transaction_usable(client: awa_fast.Client) -> None:
    client.insert(Row(0), queue="tx")
    with client.transaction() as tx:
        with pytest.raises(QueueFull):
            tx.insert(Row(1), queue="tx", max_queue_depth=1)
        tx.insert(Row(2), queue="tx")
    assert [job.args["n"] for job in client.list_jobs(queue="tx")] == [2, 0]


def test_the_async_insert_checks_as_the_sync_one_does(dsn: str) -> None:
    async def main() -> QueueFull:
        async with awa_fast.AsyncClient(dsn) as client:
            await client.insert(Row(0), queue="a", max_queue_depth=1)
            with pytest.raises(QueueFull) as caught:
                await client.insert(Row(1), queue="a", max_queue_depth=1)
            assert await client.queue_depth("a") == 1
            return caught.value

    assert fields(run(main())) == ("a", 1, 1, 1)


@pytest.mark.parametrize("size", [3, 100], ids=["rows", "packs"])
def test_insert_many_is_refused_whole_or_let_in_whole(
    client: awa_fast.Client, conn: Conn, size: int
) -> None:
    """Checked with every job the call adds; refused, it writes none (a uniform batch of a
    hundred goes in as packs, the other way in rows)."""
    client.insert_many([Row(n) for n in range(2)], queue="m")
    error = refused(
        lambda: client.insert_many([Row(n) for n in range(size)], queue="m", max_queue_depth=size)
    )
    assert fields(error) == ("m", 2, size, size)
    assert jobs_in(conn, "m") == 2
    ids = client.insert_many([Row(n) for n in range(size)], queue="m", max_queue_depth=size + 2)
    assert len(ids) == size and available(conn, "m") == size + 2


def test_insert_many_over_two_queues_is_refused_for_either(
    client: awa_fast.Client, conn: Conn
) -> None:
    """Items of their own queues (and limits): the full one refuses the whole call, the
    jobs for the queue with room included."""
    client.insert_many([Row(n) for n in range(5)], queue="full")
    items = [
        InsertRequest(Row(0), queue="roomy", max_queue_depth=100),
        InsertRequest(Row(1), queue="full", max_queue_depth=6),
        InsertRequest(Row(2), queue="full"),  # no limit of its own, counted for the queue
    ]
    assert fields(refused(lambda: client.insert_many(items))) == ("full", 5, 6, 2)
    assert (jobs_in(conn, "roomy"), jobs_in(conn, "full")) == (0, 5)


def test_bad_limits_are_refused_by_name(client: awa_fast.Client, conn: Conn) -> None:
    for bad in (0, -1, True, 2.5, "5"):
        with pytest.raises(ValidationError) as caught:
            client.insert(Row(0), queue="v", max_queue_depth=bad)  # type: ignore[arg-type]
        assert caught.value.field == "max_queue_depth"
    with pytest.raises(ValidationError, match="adds 3 jobs to queue 'v', more than its limit"):
        client.insert_many([Row(n) for n in range(3)], queue="v", max_queue_depth=2)
    # A follow-up commits with its transition: refusing it would fail the transition.
    job = prepare(InsertRequest(Row(0), queue="v", max_queue_depth=5))
    with pytest.raises(ValidationError, match="a follow-up commits with the transition"):
        producer_sync.insert_prepared(conn, job, parent_id=1)
    assert jobs_in(conn, "v") == 0


def _counters_read(conn: Conn) -> int:
    """Reads of the counters' tables in this transaction so far."""
    row = conn.execute(
        "SELECT COALESCE(sum(seq_scan + COALESCE(idx_scan, 0)), 0)"
        " FROM pg_stat_xact_user_tables WHERE schemaname = 'awa_fast'"
        " AND relname IN ('count_rollup', 'count_deltas_0', 'count_deltas_1')"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_insert_that_does_not_ask_reads_nothing_for_it(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:  # one transaction: its own statistics
        awa_fast.insert(conn, Row(0), queue="cost")
        awa_fast.insert_many(conn, [Row(n) for n in range(100)], queue="cost")
        awa_fast.insert_many(conn, [InsertRequest(Row(1), queue="cost")])
        assert _counters_read(conn) == 0
        awa_fast.insert(conn, Row(2), queue="cost", max_queue_depth=1000)
        assert _counters_read(conn) > 0
        conn.rollback()


def test_the_depth_is_read_from_the_counters_exact_before_and_after_a_fold(
    dsn: str, client: awa_fast.Client, conn: Conn
) -> None:
    client.insert_many([Row(n) for n in range(70)], queue="d")  # a pack
    client.insert_many([Row(n) for n in range(3)], queue="d")  # rows
    client.insert(Row(0), queue="d", run_at=None)
    conn.execute(  # two claimed: running, no longer available
        "UPDATE awa_fast.jobs_hot SET state = 'running', run_lease = 1"
        " WHERE id IN (SELECT id FROM awa_fast.jobs_hot WHERE queue = 'd' LIMIT 2)"
    )
    assert client.queue_depth("d") == available(conn, "d") == 72
    counter = Counts(leader=leader(dsn), stats=MaintenanceStats(), config=CountsConfig())
    for _ in range(2):  # seal, then fold: the deltas go into the rollup
        run(one_pass(counter.leader, counter.run_once))
    assert conn.execute("SELECT count(*) FROM awa_fast.count_deltas").fetchone() == (0,)
    assert client.queue_depth("d") == 72 and client.queue_depth("never") == 0
    plan = conn.execute(
        "EXPLAIN (FORMAT JSON) " + Q.queue_backlog.replace("%(queues)s", "ARRAY['d']")
    ).fetchone()
    assert plan is not None
    read = set(_relations(plan[0]))
    assert read <= {"count_rollup", "count_rollup_pkey", "count_deltas_0", "count_deltas_1"}


def _relations(node: Any) -> list[str]:
    """Every relation and index a JSON plan reads."""
    if isinstance(node, list):
        return [name for item in node for name in _relations(item)]
    if not isinstance(node, dict):
        return []
    found = [node[key] for key in ("Relation Name", "Index Name") if key in node]
    return found + [name for value in node.values() for name in _relations(value)]


def test_metrics_count_signals_and_refusals_of_the_process(dsn: str) -> None:
    port = free_port()

    async def main() -> dict[str, float]:
        async with awa_fast.AsyncClient(dsn) as client:

            @client.task(Row, queue="served")
            async def row(job: awa_fast.Job[Row]) -> None:
                return None

            await client.start({"served": 1}, metrics_port=port)
            before = await asyncio.to_thread(scrape, port)
            await client.insert_many([Row(n) for n in range(8)], queue="m1", max_queue_depth=10)
            with pytest.raises(QueueFull):
                await client.insert_many([Row(n) for n in range(3)], queue="m1", max_queue_depth=10)
            after = await asyncio.to_thread(scrape, port)
            return {key: after[key] - before.get(key, 0) for key in after}

    grew = run(main())
    # 8 of 10 reaches four fifths: a signal, let in; 8 + 3 passes 10: a signal, refused.
    assert grew['awa_fast_inserts_backpressure_signalled_total{queue="m1"}'] == 2
    assert grew['awa_fast_inserts_backpressure_refused_total{queue="m1"}'] == 1
