"""Durable batch operations against a real database: submitted by a client, applied by the
leader's batch operations service (``BatchOps.run_once``), one transaction per step,
observed in the tables between steps."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.queries import Q
from awa_fast.maintenance.batch_ops import BatchStep
from tests.factories import insert_job
from tests.helpers import await_until, job, leading, lock_waiters, run, wait_until
from tests.maintenance.support import maintenance

LEADER = "awa-fast batch test leader"


@dataclass
class Email:
    to: str


class Leader:
    """The maintenance leader's batch step, on a connection of its own."""

    def __init__(self, dsn: str, *, chunk: int = 1000) -> None:
        self.maintenance = maintenance(dsn, batch_chunk=chunk)
        self.dsn = dsn

    def step(self) -> BatchStep | None:
        async def once() -> BatchStep | None:
            async with (
                leading(self.maintenance) as maintenance,
                await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, application_name=LEADER
                ) as conn,
            ):
                return await maintenance.batch_ops.run_once(conn)

        return run(once())


def _where(dsn: str, ids: list[int]) -> dict[int, tuple[str, int, str]]:
    """Each job's (queue, priority, state)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, queue, priority, state::text FROM awa_fast.jobs WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def _jobs(conn: psycopg.Connection[Any], count: int, **fields: Any) -> list[int]:
    return [insert_job(conn, **fields) for _ in range(count)]


def test_preview_counts_the_queued_jobs_a_filter_selects_and_changes_nothing(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    available = _jobs(conn, 3, queue="a", kind="k")
    scheduled = insert_job(conn, queue="a", kind="k", state="scheduled")
    others = [
        insert_job(conn, queue="a", kind="k", state=state)
        for state in ("retryable", "running", "waiting_external", "completed", "failed")
    ]
    other_queue = insert_job(conn, queue="b", kind="k")
    tagged = client.insert(Email("x"), queue="a", tags=["vip"]).id
    before = _where(dsn, [*available, scheduled, *others, other_queue, tagged])

    preview = client.preview_set_priority(4, filter={"queue": "a"})
    assert preview["total_matched"] == 5  # available and scheduled, as the SDK counts them
    assert [row["id"] for row in preview["sample"]] == sorted([*available, scheduled, tagged])
    assert preview["sample"][0]["queue"] == "a"
    assert isinstance(preview["sample"][0]["created_at"], str)  # RFC 3339, as the SDK's

    def total(**filter: Any) -> int:
        return client.preview_move_queue("c", filter=filter)["total_matched"]

    assert total(state="scheduled") == 1
    assert total(tag="vip") == 1
    assert total(kind="email") == 1
    assert total(ids=[available[0], others[1], 10**12]) == 1
    assert total(ids=[]) == 0
    assert total(queue="a", created_at_gte=datetime.now(UTC) + timedelta(hours=1)) == 0
    assert total(created_at_lt="2999-01-01T00:00:00Z") == 6
    assert client.preview_set_priority(1)["total_matched"] == 6  # no filter: every queued job
    with pytest.raises(awa_fast.ValidationError) as no_such_state:
        client.preview_set_priority(1, filter={"state": "retryable"})
    assert no_such_state.value.field == "filter.state"
    assert _where(dsn, list(before)) == before
    assert client.list_batch_operations() == []  # a preview stores nothing


def test_the_leader_applies_an_operation_in_chunks_with_progress_between(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    hot = _jobs(conn, 20, queue="a")
    deferred = _jobs(conn, 5, queue="a", state="scheduled")
    running = insert_job(conn, queue="a", state="running")
    submitted = client.move_queue("b", priority=1, filter={"queue": "a"}, submitted_by="ops")
    assert submitted["state"] == "pending" and submitted["total_matched"] is None
    assert submitted["spec"] == {"op_kind": "move_queue", "priority": 1, "queue": "b"}
    assert submitted["filter"]["queue"] == "a" and submitted["filter"]["kind"] is None
    leader = Leader(dsn, chunk=10)

    assert leader.step() == BatchStep(submitted["id"], "running")  # the snapshot
    later = insert_job(conn, queue="a")  # after the snapshot: not the operation's
    started = client.get_batch_operation(submitted["id"])
    assert started["total_matched"] == 25 and started["processed"] == 0
    assert started["cursor"] == {"after_job_id": 0, "max_job_id": max(deferred)}
    assert started["runner_instance"] == str(leader.maintenance.instance)
    assert started["started_at"] is not None and started["finalized_at"] is None

    ordered = sorted(hot + deferred)
    for done in (10, 20):
        assert leader.step() == BatchStep(submitted["id"], "running", changed=10)
        progress = client.get_batch_operation(submitted["id"])
        assert (progress["state"], progress["processed"]) == ("running", done)
        assert progress["cursor"] == {"after_job_id": ordered[done - 1], "max_job_id": ordered[-1]}
        where = _where(dsn, ordered)
        assert sorted(i for i, (queue, _, _) in where.items() if queue == "b") == ordered[:done]

    assert leader.step() == BatchStep(submitted["id"], "completed", changed=5)
    finished = client.get_batch_operation(submitted["id"])
    assert (finished["processed"], finished["skipped"], finished["errored"]) == (25, 0, 0)
    assert finished["finalized_at"] is not None and finished["retention_until"] is not None
    where = _where(dsn, [*ordered, running, later])
    assert all(where[i] == ("b", 1, "available") for i in hot)
    assert all(where[i] == ("b", 1, "scheduled") for i in deferred)
    assert where[running] == ("a", 2, "running") and where[later] == ("a", 2, "available")
    assert leader.step() is None
    assert conn.execute("SELECT count(*) FROM awa_fast.batch_operation_items").fetchone() == (0,)


def test_jobs_already_as_asked_or_no_longer_queued_are_skipped(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    changed = insert_job(conn, queue="a", priority=2)
    same = insert_job(conn, queue="a", priority=3)
    gone = insert_job(conn, queue="a", priority=2)
    submitted = client.set_priority(3, filter={"queue": "a"})
    leader = Leader(dsn)
    leader.step()
    client.cancel(gone)  # finished between the snapshot and its chunk
    assert leader.step() == BatchStep(submitted["id"], "completed", changed=1, skipped=2)
    assert _where(dsn, [changed, same, gone]) == {
        changed: ("a", 3, "available"),
        same: ("a", 3, "available"),
        gone: ("a", 2, "cancelled"),
    }


def test_cancel_stops_an_operation_between_chunks(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    ids = _jobs(conn, 25, queue="a")
    submitted = client.set_priority(4, filter={"queue": "a"})
    leader = Leader(dsn, chunk=10)
    leader.step()
    leader.step()
    cancelling = client.cancel_batch_operation(submitted["id"])
    assert cancelling["state"] == "cancelling" and cancelling["processed"] == 10
    assert leader.step() == BatchStep(submitted["id"], "cancelled")
    cancelled = client.get_batch_operation(submitted["id"])
    assert cancelled["state"] == "cancelled" and cancelled["processed"] == 10
    assert cancelled["finalized_at"] is not None
    priorities = sorted(priority for _, priority, _ in _where(dsn, ids).values())
    assert priorities == [2] * 15 + [4] * 10  # the applied chunk stays applied
    assert conn.execute("SELECT count(*) FROM awa_fast.batch_operation_items").fetchone() == (0,)
    with pytest.raises(awa_fast.ValidationError, match="is cancelled and cannot be cancelled"):
        client.cancel_batch_operation(submitted["id"])

    pending = client.set_priority(4, filter={"queue": "a"})
    assert client.cancel_batch_operation(pending["id"])["state"] == "cancelling"
    assert leader.step() == BatchStep(pending["id"], "cancelled")
    assert client.get_batch_operation(pending["id"])["started_at"] is not None
    assert sorted(p for _, p, _ in _where(dsn, ids).values()) == priorities


@pytest.mark.parametrize("filter", [None, {}, {"kind": None}])
def test_an_operation_on_every_queued_job_needs_allow_all(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str, filter: Any
) -> None:
    ids = [insert_job(conn, queue="a"), insert_job(conn, queue="b", state="scheduled")]
    with pytest.raises(awa_fast.ValidationError) as refused:
        client.set_priority(1, filter=filter)
    assert refused.value.field == "allow_all"
    with pytest.raises(awa_fast.ValidationError, match="allow_all"):
        client.move_queue("c", filter=filter)
    assert client.list_batch_operations() == []

    submitted = client.set_priority(1, filter=filter, allow_all=True)
    leader = Leader(dsn)
    leader.step()
    leader.step()
    assert client.get_batch_operation(submitted["id"])["state"] == "completed"
    assert [priority for _, priority, _ in _where(dsn, ids).values()] == [1, 1]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.submit_batch_operation("delete", spec={}, filter={"queue": "a"}), "op_kind"),
        (lambda c: c.preview_batch_operation("purge", spec={}), "op_kind"),
        (lambda c: c.set_priority(0, filter={"queue": "a"}), "priority"),
        (lambda c: c.set_priority(5, filter={"queue": "a"}), "priority"),
        (lambda c: c.set_priority("2", filter={"queue": "a"}), "priority"),
        (lambda c: c.set_priority(True, filter={"queue": "a"}), "priority"),
        (lambda c: c.preview_set_priority(9), "priority"),
        (lambda c: c.move_queue("b", priority=7, filter={"queue": "a"}), "priority"),
        (lambda c: c.move_queue("", filter={"queue": "a"}), "queue"),
        (lambda c: c.preview_move_queue("x" * 129), "queue"),
        (lambda c: c.submit_batch_operation("move_queue", spec={}, allow_all=True), "queue"),
        (lambda c: c.submit_batch_operation("set_priority", spec=[1], allow_all=True), "spec"),
        (
            lambda c: c.submit_batch_operation(
                "set_priority", spec={"priority": 1, "queue": "b"}, allow_all=True
            ),
            "spec",
        ),
        (lambda c: c.set_priority(1, filter={"ids": []}), "allow_all"),  # as the SDK refuses
        (lambda c: c.set_priority(1, filter={"queue": ""}), "filter.queue"),
        (lambda c: c.set_priority(1, filter={"queu": "a"}), "filter"),
        (lambda c: c.set_priority(1, filter={"state": "running"}), "filter.state"),
        (lambda c: c.set_priority(1, filter={"ids": [0]}), "filter.ids"),
        (lambda c: c.set_priority(1, filter={"ids": "12"}), "filter.ids"),
        (
            lambda c: c.set_priority(1, filter={"created_at_lt": "yesterday"}),
            "filter.created_at_lt",
        ),
        (
            lambda c: c.set_priority(1, filter={"created_at_gte": datetime(2024, 1, 1)}),
            "filter.created_at_gte",
        ),
        (lambda c: c.set_priority(1, filter={"queue": "a"}, submitted_by=3), "submitted_by"),
        (lambda c: c.list_batch_operations(state="bogus"), "state"),
        (lambda c: c.list_batch_operations(limit=0), "limit"),
        (lambda c: c.get_batch_operation("nope"), "operation_id"),
        (lambda c: c.get_batch_operation(str(uuid.uuid4())), "operation_id"),
        (lambda c: c.cancel_batch_operation(str(uuid.uuid4())), "operation_id"),
        (lambda c: c.purge_batch_operations(datetime(2024, 1, 1)), "before"),
        (lambda c: c.purge_batch_operations(datetime.now(UTC), limit=0), "limit"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(
    client: awa_fast.Client, call: Any, field: str
) -> None:
    with pytest.raises(awa_fast.ValidationError) as bad:
        call(client)
    assert bad.value.field == field
    assert client.list_batch_operations() == []


def _leader_waits_on_a_lock(dsn: str) -> bool:
    return lock_waiters(dsn, application_name=LEADER) > 0


def test_a_job_a_claim_takes_mid_chunk_keeps_its_queue_and_priority(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """The claim locks the job first, the chunk waits for it, the claim commits: the chunk
    re-checks the row, finds it running, and leaves it alone."""
    claimed, *waiting = _jobs(conn, 3, queue="a")
    submitted = client.move_queue("b", priority=4, filter={"queue": "a"})
    leader = Leader(dsn)
    leader.step()  # the snapshot holds all three
    steps: list[BatchStep | None] = []
    with psycopg.connect(dsn) as claimer:
        claim = {"queue": "a", "limit": 1, "host_id": None, "deadline_s": 60.0}
        assert [row[0] for row in claimer.execute(Q.job_claim_batch, claim)] == [claimed]
        chunk = threading.Thread(target=lambda: steps.append(leader.step()))
        chunk.start()
        wait_until(lambda: _leader_waits_on_a_lock(dsn), timeout=10, what="the chunk to wait")
        claimer.commit()
    chunk.join(timeout=10)
    assert steps == [BatchStep(submitted["id"], "completed", changed=2, skipped=1)]
    where = _where(dsn, [claimed, *waiting])
    assert where[claimed] == ("a", 2, "running")
    assert all(where[i] == ("b", 4, "available") for i in waiting)


def test_a_scheduled_job_promoted_mid_chunk_is_changed_where_it_went(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """Promotion moves a due scheduled job to jobs_hot while the chunk waits on its row in
    jobs_deferred: the chunk's next statement finds it there, available, and changes it."""
    promoted = insert_job(conn, queue="a", state="scheduled")
    submitted = client.set_priority(4, filter={"queue": "a"})
    leader = Leader(dsn)
    leader.step()
    steps: list[BatchStep | None] = []
    with psycopg.connect(dsn) as promoter:
        assert promoter.execute(Q.job_promote_due, {"limit": 10}).fetchall() == [(promoted,)]
        chunk = threading.Thread(target=lambda: steps.append(leader.step()))
        chunk.start()
        wait_until(lambda: _leader_waits_on_a_lock(dsn), timeout=10, what="the chunk to wait")
        promoter.commit()
    chunk.join(timeout=10)
    assert steps == [BatchStep(submitted["id"], "completed", changed=1)]
    assert _where(dsn, [promoted]) == {promoted: ("a", 4, "available")}


def test_a_claim_passes_over_the_jobs_a_chunk_holds(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """The chunk locks the jobs first: a claim meanwhile takes none of them and does not
    wait for them (SKIP LOCKED), and after the commit they are claimable in their new
    queue, and gone from the old one."""
    ids = _jobs(conn, 3, queue="a")
    client.move_queue("b", filter={"queue": "a"})
    with psycopg.connect(dsn) as chunk:
        change = {"ids": ids, "priority": None, "queue": "b"}
        assert len(chunk.execute(Q.job_batch_apply_hot, change).fetchall()) == 3
        with psycopg.connect(dsn, autocommit=True) as claimer:
            claim = {"queue": "a", "limit": 10, "host_id": None, "deadline_s": 60.0}
            assert claimer.execute(Q.job_claim_batch, claim).fetchall() == []
            chunk.commit()
            assert claimer.execute(Q.job_claim_batch, claim).fetchall() == []
            claim["queue"] = "b"
            assert sorted(row[0] for row in claimer.execute(Q.job_claim_batch, claim)) == ids


def test_list_get_and_purge(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    insert_job(conn, queue="a")
    first = client.set_priority(3, filter={"queue": "a"})
    second = client.move_queue("b", filter={"queue": "a"}, submitted_by="me")
    third = client.set_priority(1, filter={"kind": "noop"})
    listed = client.list_batch_operations()
    assert [op["id"] for op in listed] == [third["id"], second["id"], first["id"]]
    assert listed[1] == client.get_batch_operation(second["id"]) == second
    assert second["submitted_by"] == "me" and isinstance(second["submitted_at"], str)
    assert [op["id"] for op in client.list_batch_operations(limit=1)] == [third["id"]]

    leader = Leader(dsn)
    leader.step()
    leader.step()  # the first completes
    client.cancel_batch_operation(second["id"])
    leader.step()  # the second is cancelled
    assert [op["id"] for op in client.list_batch_operations(state="pending")] == [third["id"]]
    finished = [op["id"] for op in client.list_batch_operations(state="completed")]
    assert finished == [first["id"]]

    assert client.purge_batch_operations(datetime.now(UTC) - timedelta(hours=1)) == 0
    soon = datetime.now(UTC) + timedelta(seconds=5)
    assert client.purge_batch_operations(soon, limit=1) == 1  # the oldest finished first
    assert client.purge_batch_operations(soon) == 1
    assert [op["id"] for op in client.list_batch_operations()] == [third["id"]]
    with pytest.raises(awa_fast.ValidationError, match="no batch operation"):
        client.get_batch_operation(first["id"])


def test_an_operation_whose_statement_fails_is_failed_and_the_next_runs(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """A stored spec the job tables refuse (written past the client's validation) fails
    its operation with the database's error; the operation after it still runs."""
    target = insert_job(conn, queue="a")
    broken = client.set_priority(3, filter={"queue": "a"})
    conn.execute(
        "UPDATE awa_fast.batch_operations SET spec = jsonb_set(spec, '{priority}', '9')"
        " WHERE id = %s",
        (broken["id"],),
    )
    after = client.set_priority(4, filter={"queue": "a"})
    leader = Leader(dsn)
    leader.step()
    assert leader.step() == BatchStep(broken["id"], "failed")
    failed = client.get_batch_operation(broken["id"])
    assert failed["errored"] == 1 and "jobs_hot_priority" in (failed["last_error"] or "")
    assert failed["finalized_at"] is not None
    leader.step()
    assert leader.step() == BatchStep(after["id"], "completed", changed=1)
    assert job(dsn, target)["priority"] == 4


def test_the_running_leader_applies_operations_submitted_through_the_async_client(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    ids = _jobs(conn, 5, queue="parked")

    async def scenario() -> None:
        async with awa_fast.AsyncClient(dsn) as client:
            preview = await client.preview_move_queue("elsewhere", filter={"queue": "parked"})
            assert preview["total_matched"] == 5
            submitted = await client.move_queue("elsewhere", filter={"queue": "parked"})

            @client.task(Email, queue="email")
            async def send(job: Any) -> None:
                return None

            async def done() -> bool:
                op = await client.get_batch_operation(submitted["id"])
                return op["state"] == "completed"

            await client.start({"email": 1}, election_interval=0.05, batch_interval=0.05)
            try:
                await await_until(done, timeout=30, what="the operation to complete")
            finally:
                await client.shutdown()
            listed = await client.list_batch_operations(state="completed")
            assert [op["processed"] for op in listed] == [5]

    run(scenario())
    assert {queue for queue, _, _ in _where(dsn, ids).values()} == {"elsewhere"}


def test_an_operation_moves_jobs_stored_in_packs(
    client: awa_fast.Client, conn: psycopg.Connection[Any], dsn: str
) -> None:
    """Jobs of a uniform batch (stored as packs, migration 0016) are unpacked when the
    operation takes its snapshot, and moved as any available job; a pack in another queue
    stays packed."""
    packed = client.insert_many([Email(f"{n}@example.com") for n in range(100)], queue="a")
    other = client.insert_many([Email(f"{n}@example.com") for n in range(100)], queue="c")
    submitted = client.move_queue("b", filter={"queue": "a"}, submitted_by="ops")
    leader = Leader(dsn)
    assert leader.step() == BatchStep(submitted["id"], "running")
    assert client.get_batch_operation(submitted["id"])["total_matched"] == 100
    assert leader.step() == BatchStep(submitted["id"], "completed", changed=100)
    assert set(_where(dsn, packed).values()) == {("b", 2, "available")}
    assert set(_where(dsn, other).values()) == {("c", 2, "available")}
    assert conn.execute("SELECT queue FROM awa_fast.job_packs").fetchall() == [("c",)]
