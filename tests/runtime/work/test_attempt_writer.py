"""The attempt writer against a real database: the writes a running attempt makes to its
own row before its outcome (a callback id, flushed progress) land on the row of exactly
that attempt and are refused to one that no longer owns it; a wait for a callback returns
its payload once resumed, even one that answered first, and ends with LeaseLost when the
job is decided without it. Handlers reach these only through a runner, where a write on
the wrong row or a wait that never ends shows up far from its cause."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import pytest

import awa_fast
from awa_fast import LeaseLost
from awa_fast.db.connections import Database
from awa_fast.runtime.work.attempt_writer import AttemptWriter
from tests.factories import insert_job
from tests.helpers import await_until, job, run, sessions

T = TypeVar("T")
Answer = Callable[[awa_fast.AsyncClient, str], Awaitable[object]]
OURS = "application_name = 'awa-fast attempt writes'"


def with_writer(dsn: str, use: Callable[[AttemptWriter], Awaitable[T]]) -> T:
    """What ``use`` returns of a new writer, closed after on the same loop."""

    async def main() -> T:
        writer = AttemptWriter(Database(dsn))
        try:
            return await use(writer)
        finally:
            await writer.close()

    return run(main())


@pytest.fixture
def running(conn: psycopg.Connection[Any]) -> int:
    """A job whose attempt with run_lease 2 runs, with metadata of its own."""
    job_id = insert_job(conn, state="running", attempt=1, run_lease=2)
    conn.execute(
        'UPDATE awa_fast.jobs_hot SET metadata = \'{"team": "ops"}\' WHERE id = %s', (job_id,)
    )
    return job_id


def callback_of(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    """(callback id, its rules, seconds until it times out) on the job's row."""
    row = conn.execute(
        "SELECT callback_id::text, callback_rules,"
        " extract(epoch FROM callback_timeout_at - now())::float"
        " FROM awa_fast.jobs_hot WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_register_callback_writes_the_id_on_that_attempts_row(
    dsn: str, conn: psycopg.Connection[Any], running: int
) -> None:
    other = insert_job(conn, state="running", attempt=1, run_lease=2)
    rules = {"filter": "payload.ok"}
    callback_id = with_writer(dsn, lambda w: w.register_callback(running, 2, 600, rules=rules))
    assert uuid.UUID(callback_id).version == 4
    stored, stored_rules, timeout = callback_of(conn, running)
    assert (stored, stored_rules) == (callback_id, rules)
    assert 590 < timeout <= 600
    assert callback_of(conn, other) == (None, None, None)


@pytest.mark.parametrize(("lease", "state"), [(1, "running"), (3, "running"), (2, "available")])
def test_register_callback_refuses_an_attempt_that_does_not_own_the_job(
    dsn: str, conn: psycopg.Connection[Any], lease: int, state: str
) -> None:
    job_id = insert_job(conn, state=state, attempt=1, run_lease=2)
    with pytest.raises(LeaseLost) as lost:
        with_writer(dsn, lambda w: w.register_callback(job_id, lease, 600))
    assert (lost.value.job_id, lost.value.run_lease) == (job_id, lease)
    assert callback_of(conn, job_id) == (None, None, None)


def save(
    how: str, job_id: int, lease: int, progress: object, metadata: dict[str, Any]
) -> Callable[[AttemptWriter], Awaitable[None]]:
    """A save of progress by attempt (``job_id``, ``lease``): from an async handler, or from
    a sync one on its thread."""
    if how == "async":
        return lambda w: w.save_progress(job_id, lease, progress, metadata)
    return lambda w: asyncio.to_thread(w.save_progress_sync, job_id, lease, progress, metadata)


@pytest.mark.parametrize("how", ["async", "sync"])
def test_saved_progress_and_metadata_are_on_the_row(dsn: str, running: int, how: str) -> None:
    progress = {"percent": 40, "message": "reading"}
    with_writer(dsn, save(how, running, 2, progress, {"rows": 400}))
    row = job(dsn, running)
    assert (row["progress"], row["metadata"]) == (progress, {"team": "ops", "rows": 400})


@pytest.mark.parametrize("how", ["async", "sync"])
def test_saving_progress_is_refused_to_a_stale_lease(dsn: str, running: int, how: str) -> None:
    with pytest.raises(LeaseLost) as lost:
        with_writer(dsn, save(how, running, 1, {"percent": 90}, {"rows": 1}))
    assert (lost.value.job_id, lost.value.run_lease) == (running, 1)
    row = job(dsn, running)
    assert (row["progress"], row["metadata"]) == (None, {"team": "ops"})


def waiting(dsn: str, job_id: int) -> bool:
    return bool(job(dsn, job_id)["state"] == "waiting_external")


def wait_answered(dsn: str, job_id: int, answer: Answer, *, answer_first: bool = False) -> Any:
    """Register a callback for ``job_id``'s attempt, wait on it, and ``answer`` it by its
    id once the row waits (before the wait begins, with ``answer_first``); what the wait
    returns."""

    async def use(writer: AttemptWriter) -> Any:
        callback_id = await writer.register_callback(job_id, 2, 600)
        async with awa_fast.AsyncClient(dsn) as client:
            if answer_first:
                await answer(client, callback_id)
            wait = writer.wait_for_callback(job_id, 2, callback_id, lambda: False)
            task = asyncio.create_task(wait)
            if not answer_first:
                await await_until(lambda: waiting(dsn, job_id), what="the attempt to wait")
                await answer(client, callback_id)
            return await task

    return with_writer(dsn, use)


@pytest.mark.parametrize("answer_first", [False, True], ids=["while-waiting", "answered-first"])
def test_a_wait_returns_the_payload_once_resumed(
    dsn: str, running: int, answer_first: bool
) -> None:
    def resume(client: awa_fast.AsyncClient, callback_id: str) -> Awaitable[object]:
        return client.resume_external(callback_id, {"paid": 12})

    payload, deadline = wait_answered(dsn, running, resume, answer_first=answer_first)
    assert (payload, deadline) == ({"paid": 12}, None)  # the job has no deadline
    row = job(dsn, running)
    assert (row["state"], row["callback_id"], row["run_lease"]) == ("running", None, 2)


DECIDE: dict[str, Answer] = {
    "completed": lambda client, callback_id: client.complete_external(callback_id, {"x": 1}),
    "failed": lambda client, callback_id: client.fail_external(callback_id, "card declined"),
}


@pytest.mark.parametrize("state", sorted(DECIDE))
def test_a_wait_ends_with_lease_lost_when_the_job_is_decided_without_it(
    dsn: str, running: int, state: str
) -> None:
    with pytest.raises(LeaseLost) as lost:
        wait_answered(dsn, running, DECIDE[state])
    assert (lost.value.job_id, lost.value.run_lease) == (running, 2)
    assert lost.value.reason is not None and f"the job became {state}" in lost.value.reason
    assert job(dsn, running)["state"] == state


def test_a_wait_cut_short_leaves_the_job_parked_on_its_callback(dsn: str, running: int) -> None:
    cut = [False]

    async def use(writer: AttemptWriter) -> str:
        callback_id = await writer.register_callback(running, 2, 600)
        wait = writer.wait_for_callback(running, 2, callback_id, lambda: cut[0])
        task = asyncio.create_task(wait)
        await await_until(lambda: waiting(dsn, running), what="the attempt to wait")
        cut[0] = True
        with pytest.raises(LeaseLost, match="cut short while waiting"):
            await task
        return callback_id

    callback_id = with_writer(dsn, use)
    row = job(dsn, running)
    assert (row["state"], str(row["callback_id"])) == ("waiting_external", callback_id)
    assert row["heartbeat_at"] is None  # parked: no handler heartbeats it now


def test_close_closes_both_of_its_connections(dsn: str, running: int) -> None:
    async def use(writer: AttemptWriter) -> None:
        await writer.save_progress(running, 2, None, {})
        await asyncio.to_thread(writer.save_progress_sync, running, 2, None, {})
        assert sessions(dsn, OURS) == 2  # the async one and the sync handlers' one
        await writer.close()
        await await_until(lambda: sessions(dsn, OURS) == 0, what="its sessions to end")

    with_writer(dsn, use)  # a second close() does nothing
