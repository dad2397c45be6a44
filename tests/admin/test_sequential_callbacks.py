"""Sequential callbacks end to end: a handler waits in ``job.wait_for_callback`` (its job in
waiting_external, its host still heartbeating it) until ``resume_external`` hands it a
payload, or until its job is decided without it (resolved, timed out, cancelled)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast import LeaseLost, RetryAfter
from tests.factories import insert_job
from tests.helpers import await_until, leading, lock_waiters, run
from tests.helpers import job as row_of
from tests.maintenance.support import maintenance as build_maintenance

PROCESSES = pytest.mark.parametrize("processes", [None, 2], ids=["in-process", "forked"])


@dataclass
class Order:
    n: int


def _waiting_on(dsn: str, job_id: int, *, other_than: str | None = None) -> str | None:
    """The callback id the job's handler waits on (one other than ``other_than``), if any."""
    row = row_of(dsn, job_id)
    callback_id = None if row["callback_id"] is None else str(row["callback_id"])
    waiting = row["state"] == "waiting_external" and callback_id != other_than
    return callback_id if waiting else None


async def _callback_awaited(dsn: str, job_id: int, *, other_than: str | None = None) -> str:
    await await_until(
        lambda: _waiting_on(dsn, job_id, other_than=other_than), what="the handler to wait"
    )
    callback_id = _waiting_on(dsn, job_id, other_than=other_than)
    assert callback_id is not None
    return callback_id


@PROCESSES
def test_a_handler_resumed_twice_runs_on_and_completes(dsn: str, processes: int | None) -> None:
    """Two waits in one attempt; the host heartbeats the waiting attempt, so no cancel flag
    is ever set; an answered callback id answers nothing again."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Order)
    async def two_steps(job: awa_fast.Job[Order]) -> None:
        first = await job.wait_for_callback(await job.register_callback(timeout_seconds=600))
        second = await job.wait_for_callback(await job.register_callback(timeout_seconds=600))
        job.update_metadata({"payloads": [first, second], "cancelled": job.is_cancelled()})

    async def main() -> int:
        async with client:
            row = await client.insert(Order(1))
            await client.start({"default": 2}, processes=processes, heartbeat_interval=0.05)
            try:
                first = await _callback_awaited(dsn, row.id)
                beat = row_of(dsn, row.id)["heartbeat_at"]
                await await_until(
                    lambda: (row_of(dsn, row.id)["heartbeat_at"] or beat) > beat,
                    what="a heartbeat of the waiting attempt",
                )
                assert row_of(dsn, row.id)["state"] == "waiting_external"
                resumed = await client.resume_external(first, {"step": 1})
                assert (resumed.state, resumed.attempt, resumed.run_lease) == ("running", 1, 1)
                assert (resumed.callback_id, resumed.callback_result) == (None, {"step": 1})
                with pytest.raises(awa_fast.CallbackNotFound) as spent:
                    await client.resume_external(first, {"step": "again"})
                assert spent.value.callback_id == first
                second = await _callback_awaited(dsn, row.id, other_than=first)
                await client.resume_external(second)  # no payload: the handler gets None
                await await_until(lambda: row_of(dsn, row.id)["state"] == "completed")
            finally:
                await client.shutdown()
            return row.id

    final = row_of(dsn, run(main()))
    assert final["metadata"] == {"payloads": [{"step": 1}, None], "cancelled": False}
    assert (final["attempt"], final["errors"]) == (1, [])


def test_a_resume_before_the_handler_waits_is_not_lost(dsn: str) -> None:
    """The external system answers between register_callback and wait_for_callback: the
    wait returns the payload at once."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Order)
    async def quick(job: awa_fast.Job[Order]) -> None:
        token = await job.register_callback(timeout_seconds=600)
        await await_until(lambda: row_of(dsn, job.id)["callback_id"] is None, what="the resume")
        job.update_metadata({"payload": await job.wait_for_callback(token)})

    async def main() -> int:
        async with client:
            row = await client.insert(Order(2))
            await client.start({"default": 1})
            try:
                await await_until(lambda: row_of(dsn, row.id)["callback_id"] is not None)
                early = await client.resume_external(
                    str(row_of(dsn, row.id)["callback_id"]), {"early": True}
                )
                assert early.state == "running"
                await await_until(lambda: row_of(dsn, row.id)["state"] == "completed")
            finally:
                await client.shutdown()
            return row.id

    assert row_of(dsn, run(main()))["metadata"] == {"payload": {"early": True}}


Decide = Callable[[awa_fast.AsyncClient, str, int], Awaitable[object]]
DECISIONS: dict[str, tuple[Decide, str, str]] = {
    # how: (decide the job while its handler waits, final state, what the wait learns)
    "complete": (lambda c, cb, _: c.complete_external(cb, {"paid": 1}), "completed", "completed"),
    "fail": (
        lambda c, cb, _: c.fail_external(cb, "declined"),
        "failed",
        "failed (callback failed: declined)",
    ),
    "cancel": (lambda c, _, job_id: c.cancel(job_id), "cancelled", "cancelled (cancelled: by"),
}


@PROCESSES
@pytest.mark.parametrize("how", sorted(DECISIONS))
def test_a_job_decided_while_its_handler_waits_stays_decided(
    dsn: str, how: str, processes: int | None
) -> None:
    """The wait ends with LeaseLost saying what became of the job; what the handler does
    then (here a RetryAfter, and metadata) is stale and dropped."""
    decide, final_state, learned = DECISIONS[how]
    reasons: list[str | None] = []
    client = awa_fast.AsyncClient(dsn)

    @client.task(Order)
    async def waits(job: awa_fast.Job[Order]) -> Any:
        try:
            await job.wait_for_callback(await job.register_callback(timeout_seconds=600))
        except LeaseLost as lost:
            reasons.append(lost.reason)
            job.update_metadata({"stale": True})
            return RetryAfter(0)
        return None

    async def main() -> int:
        async with client:
            row = await client.insert(Order(3))
            runner = await client.start({"default": 1}, processes=processes)
            try:
                callback_id = await _callback_awaited(dsn, row.id)
                await decide(client, callback_id, row.id)
                assert row_of(dsn, row.id)["state"] == final_state
                await await_until(
                    lambda: runner.snapshot().in_flight == {"default": 0},
                    what="the handler to return",
                )
            finally:
                await client.shutdown()  # flushes the handler's (stale) outcome
            return row.id

    final = row_of(dsn, run(main()))
    assert (final["state"], final["attempt"], final["metadata"]) == (final_state, 1, {})
    if how == "complete":
        assert final["callback_result"] == {"paid": 1}
    if processes is None:
        assert len(reasons) == 1 and reasons[0] is not None
        assert f"the job became {learned}" in reasons[0]


@PROCESSES
def test_a_wait_that_times_out_ends_with_the_rescue(dsn: str, processes: int | None) -> None:
    """The callback timeout bounds the wait: the leader rescues the job (failed, on its last
    attempt) and the handler's wait ends saying so."""
    reasons: list[str | None] = []
    client = awa_fast.AsyncClient(dsn)

    @client.task(Order)
    async def waits(job: awa_fast.Job[Order]) -> None:
        try:
            await job.wait_for_callback(await job.register_callback(timeout_seconds=0.2))
        except LeaseLost as lost:
            reasons.append(lost.reason)
            raise

    async def main() -> int:
        async with client:
            row = await client.insert(Order(4), max_attempts=1)
            runner = await client.start(
                {"default": 1}, processes=processes, rescue_interval=0.05, heartbeat_interval=0.05
            )
            try:
                await await_until(lambda: row_of(dsn, row.id)["state"] == "failed")
                await await_until(lambda: runner.snapshot().in_flight == {"default": 0})
            finally:
                await client.shutdown()
            return row.id

    final = row_of(dsn, run(main()))
    assert [e["error"] for e in final["errors"]] == ["callback timed out"]
    if processes is None:
        assert reasons == [
            f"while it waited for callback {final['callback_id']}, the job became failed "
            "(callback timed out)"
        ]


def test_a_callback_heartbeat_moves_the_timeout_and_the_deadline_waits(dsn: str) -> None:
    """heartbeat_callback pushes callback_timeout_at; the attempt's deadline does not run
    while it waits: a resume gives back the running time it had left."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Order)
    async def waits(job: awa_fast.Job[Order]) -> None:
        await job.wait_for_callback(await job.register_callback(timeout_seconds=60))

    async def main() -> None:
        async with client:
            row = await client.insert(Order(5), deadline=300)
            await client.start({"default": 1})
            try:
                callback_id = await _callback_awaited(dsn, row.id)
                before = row_of(dsn, row.id)
                left = before["deadline_at"] - before["callback_timeout_at"]
                assert 290 < left.total_seconds() <= 300
                beat = await client.heartbeat_callback(callback_id, timeout_seconds=7200)
                assert beat.state == "waiting_external" and beat.callback_timeout_at is not None
                times = beat.datetimes
                assert times.callback_timeout_at is not None and times.deadline_at is not None
                moved = times.callback_timeout_at - before["callback_timeout_at"]
                assert 7100 < moved.total_seconds() <= 7200
                assert times.deadline_at == before["deadline_at"] + moved
                # The resumed row, as the resume left it: the handler may finish the job
                # (and clear its deadline) before a read of it here could run.
                resumed = await client.resume_external(callback_id)
                resumed_deadline = resumed.datetimes.deadline_at
                assert resumed_deadline is not None
                remaining = resumed_deadline - datetime.now(UTC)
                assert 280 < remaining.total_seconds() <= left.total_seconds()
                await await_until(lambda: row_of(dsn, row.id)["state"] == "completed")
            finally:
                await client.shutdown()

    run(main())


def test_callback_calls_refuse_unknown_ids_and_bad_input(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    parked = insert_job(conn, state="waiting_external", attempt=1, run_lease=1)
    callback_id = str(uuid.uuid4())
    conn.execute(
        "UPDATE awa_fast.jobs_hot SET callback_id = %s,"
        " callback_timeout_at = now() + interval '1 hour' WHERE id = %s",
        (callback_id, parked),
    )
    assert client.heartbeat_callback(callback_id, 60).callback_timeout_at is not None
    assert row_of(client.dsn, parked)["state"] == "waiting_external"
    unknown = str(uuid.uuid4())
    for call in (
        lambda: client.resume_external(unknown),
        lambda: client.heartbeat_callback(unknown),
        lambda: client.fail_external(unknown, "no"),
        lambda: client.retry_external(unknown),
    ):
        with pytest.raises(awa_fast.CallbackNotFound):
            call()
    with pytest.raises(awa_fast.ValidationError) as bad:
        client.resume_external("not-a-uuid")
    assert bad.value.field == "callback_id"
    with pytest.raises(awa_fast.ValidationError) as bad:
        client.heartbeat_callback(callback_id, timeout_seconds=0)
    assert bad.value.field == "timeout_seconds"
    with pytest.raises(awa_fast.ValidationError) as bad:
        client.resume_external(callback_id, {"not json": object()})
    assert bad.value.field == "payload"


def test_a_wait_on_a_callback_this_attempt_did_not_register_is_refused(dsn: str) -> None:
    """A wait on a callback this attempt did not register (or already waited on) is refused
    with a clear error naming the token."""
    fields: list[str] = []
    client = awa_fast.AsyncClient(dsn)

    @client.task(Order)
    async def asks(job: awa_fast.Job[Order]) -> None:
        with pytest.raises(awa_fast.ValidationError) as stranger:
            await job.wait_for_callback(str(uuid.uuid4()))
        fields.append(stranger.value.field)

    async def main() -> int:
        async with client:
            row = await client.insert(Order(6))
            await client.start({"default": 1})
            try:
                await await_until(lambda: row_of(dsn, row.id)["state"] == "completed")
            finally:
                await client.shutdown()
            return row.id

    assert row_of(dsn, run(main()))["callback_id"] is None
    assert fields == ["token"]


def test_a_wait_cut_short_by_shutdown_leaves_the_job_parked(dsn: str) -> None:
    """Shut down while its handler waits, the job stays on its callback as if the handler
    had returned WaitForCallback: no heartbeat, no deadline; the callback still decides it."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Order)
    async def waits(job: awa_fast.Job[Order]) -> None:
        await job.wait_for_callback(await job.register_callback(timeout_seconds=600))

    async def main() -> tuple[int, str]:
        async with client:
            row = await client.insert(Order(7))
            await client.start({"default": 1})
            try:
                callback_id = await _callback_awaited(dsn, row.id)
            finally:
                await client.shutdown(timeout=0.1)
            parked = row_of(dsn, row.id)
            assert (parked["state"], str(parked["callback_id"])) == (
                "waiting_external",
                callback_id,
            )
            assert (parked["heartbeat_at"], parked["deadline_at"]) == (None, None)
            done = await client.complete_external(callback_id, {"late": True})
            assert done.state == "completed"
            return row.id, callback_id

    job_id, _ = run(main())
    assert row_of(dsn, job_id)["callback_result"] == {"late": True}


def test_the_rescues_leave_a_waiting_handler_alone(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Stale heartbeat and passed deadline are sweeps of running attempts: a handler waiting
    on a callback that has not timed out is neither."""
    waiting = _waiting_job(conn, timeout="1 hour")
    conn.execute(
        "UPDATE awa_fast.jobs_hot SET heartbeat_at = now() - interval '1 hour',"
        " deadline_at = now() - interval '1 hour' WHERE id = %s",
        (waiting,),
    )
    maintenance = build_maintenance(dsn, heartbeat_staleness=1.0, deadline_grace=1.0)

    async def rescue() -> dict[str, int]:
        async with (
            leading(maintenance),
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn,
        ):
            return await maintenance.rescuer.run_once(aconn, backstop=True)

    assert run(rescue()) == {}
    assert row_of(dsn, waiting)["state"] == "waiting_external"


def _waiting_job(conn: psycopg.Connection[Any], *, timeout: str) -> int:
    """A job whose handler waits on a callback (held: heartbeat and deadline set)."""
    job_id = insert_job(conn, state="waiting_external", attempt=1, max_attempts=1, run_lease=1)
    conn.execute(
        "UPDATE awa_fast.jobs_hot SET callback_id = %s, heartbeat_at = now(),"
        " callback_timeout_at = now() + %s::interval,"
        " deadline_at = now() + %s::interval + interval '5 minutes' WHERE id = %s",
        (str(uuid.uuid4()), timeout, timeout, job_id),
    )
    return job_id


async def _won(step: Awaitable[object]) -> bool:
    """Whether a callback call (or a rescue, by its count) decided the job."""
    try:
        result = await step
    except awa_fast.CallbackNotFound:
        return False
    return result != {"job_select_callback_expired": 0} if isinstance(result, dict) else True


@pytest.mark.parametrize("first", ["resume", "rival"])
@pytest.mark.parametrize("rival", ["timeout rescue", "complete_external"])
def test_resume_races_its_rivals_and_exactly_one_wins(
    dsn: str, conn: psycopg.Connection[Any], rival: str, first: str
) -> None:
    """resume_external and a rival (the timeout sweep of a callback that has just timed
    out, or another caller completing it), both blocked on the row's lock, then released
    at once: the one queued first wins, the other finds the job decided and changes
    nothing."""
    job_id = _waiting_job(conn, timeout="-1 second")  # timed out, not swept yet
    callback_id = str(row_of(dsn, job_id)["callback_id"])
    maintenance = build_maintenance(dsn)

    async def race() -> dict[str, bool]:
        async with (
            leading(maintenance),
            awa_fast.AsyncClient(dsn) as client,
            await psycopg.AsyncConnection.connect(dsn) as locker,
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as sweeper,
        ):
            await locker.execute(
                "SELECT 1 FROM awa_fast.jobs_hot WHERE id = %s FOR UPDATE", (job_id,)
            )
            steps: dict[str, Awaitable[object]] = {
                "resume": client.resume_external(callback_id, {"by": "resume"}),
                "rival": (
                    maintenance.rescuer.run_once(sweeper, backstop=False)
                    if rival == "timeout rescue"
                    else client.complete_external(callback_id, {"by": "rival"})
                ),
            }
            order = sorted(steps, key=lambda name: name != first)
            tasks = {}
            for queued, name in enumerate(order, start=1):
                tasks[name] = asyncio.create_task(_won(steps[name]))
                await await_until(
                    lambda queued=queued: lock_waiters(dsn) == queued,
                    what=f"{name} to queue on the row's lock",
                )
            await locker.commit()
            return {name: await task for name, task in tasks.items()}

    won = run(race())
    assert won == {"resume": first == "resume", "rival": first == "rival"}
    final = row_of(dsn, job_id)
    if first == "resume":
        assert (final["state"], final["callback_result"]) == ("running", {"by": "resume"})
    elif rival == "timeout rescue":
        assert final["state"] == "failed"
        assert [e["error"] for e in final["errors"]] == ["callback timed out"]
    else:
        assert (final["state"], final["callback_result"]) == ("completed", {"by": "rival"})
