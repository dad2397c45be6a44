"""WaitForCallback end to end: park, then resolve from outside by callback id, even when
the callback answers before its handler has returned."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast import RetryAfter, WaitForCallback
from tests.helpers import await_until, job, run, run_until


@dataclass
class Charge:
    cents: int


def _park_three(dsn: str) -> tuple[list[int], list[str], list[int]]:
    client = awa_fast.AsyncClient(dsn)
    tokens: list[str] = []
    attempts: list[int] = []

    @client.task(Charge)
    async def charge(job: awa_fast.Job[Charge]) -> Any:
        attempts.append(job.attempt)
        if job.attempt > 1:
            return None
        token = await job.register_callback(timeout_seconds=600)
        tokens.append(token.id)
        return WaitForCallback(token)

    async def main() -> list[int]:
        async with client:
            ids = [(await client.insert(Charge(c))).id for c in (1, 2, 3)]
            await run_until(
                client,
                {"default": 5},
                lambda: all(job(dsn, i)["state"] == "waiting_external" for i in ids),
            )
            by_id = {str(job(dsn, i)["callback_id"]): i for i in ids}
            done = await client.complete_external(tokens[0], {"receipt": "r-1"})
            assert done is not None and done.state == "completed"
            assert done.callback_result == {"receipt": "r-1"}
            with pytest.raises(awa_fast.CallbackNotFound) as spent:  # already resolved
                await client.complete_external(tokens[0])
            assert spent.value.callback_id == tokens[0]
            failed = await client.fail_external(tokens[1], "card declined")
            assert failed is not None and failed.state == "failed"
            again = await client.retry_external(tokens[2])
            assert again is not None and again.state == "available"
            await run_until(
                client, {"default": 5}, lambda: job(dsn, by_id[tokens[2]])["state"] == "completed"
            )
            return [by_id[t] for t in tokens]

    ordered = run(main())
    return ordered, tokens, attempts


def test_external_complete_fail_and_retry(dsn: str) -> None:
    (completed, failed, retried), _, attempts = _park_three(dsn)
    assert job(dsn, failed)["errors"][-1]["error"] == "callback failed: card declined"
    assert job(dsn, retried)["attempt"] == 2
    assert sorted(attempts) == [1, 1, 1, 2]
    assert job(dsn, completed)["callback_id"] is None


def test_a_bad_callback_id_is_refused(client: awa_fast.Client) -> None:
    with pytest.raises(awa_fast.ValidationError) as err:
        client.complete_external("not-a-uuid")
    assert err.value.field == "callback_id"


async def _holds(conn: psycopg.AsyncConnection[Any], job_id: int, callback_id: str) -> bool:
    """Whether the job still waits on ``callback_id`` (resolving it clears the id)."""
    cur = await conn.execute(
        "SELECT callback_id::text = %s FROM awa_fast.jobs WHERE id = %s", (callback_id, job_id)
    )
    row = await cur.fetchone()
    return row is not None and row[0] is True


Resolve = Callable[[awa_fast.AsyncClient, str], Awaitable[awa_fast.JobRow]]
RESOLUTIONS: dict[str, tuple[Resolve, set[str], str, int]] = {
    # how: (resolve, states the row it returns may be in, final state, final attempt)
    "complete": (
        lambda c, cb: c.complete_external(cb, {"paid": 1}),
        {"completed"},
        "completed",
        1,
    ),
    "fail": (lambda c, cb: c.fail_external(cb, "card declined"), {"failed"}, "failed", 1),
    # A retried job wakes the claimers, which may take it before its row is read back.
    "retry": (lambda c, cb: c.retry_external(cb), {"available", "running"}, "completed", 2),
}


@pytest.mark.parametrize("processes", [None, 2])
@pytest.mark.parametrize("how", sorted(RESOLUTIONS))
def test_a_callback_may_answer_before_its_handler_returns(
    dsn: str, how: str, processes: int | None
) -> None:
    """The external system answers while the handler that registered the id still runs.
    The callback decides; the handler's own WaitForCallback, returned later, is dropped."""
    resolve, resolved_states, final_state, final_attempt = RESOLUTIONS[how]
    returned: list[int] = []

    async def main() -> int:
        client = awa_fast.AsyncClient(dsn)

        @client.task(Charge)
        async def charge(job: awa_fast.Job[Charge]) -> Any:
            if job.attempt > 1:
                return None
            token = await job.register_callback(timeout_seconds=600)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                while await _holds(conn, job.id, token.id):  # until the callback answers
                    await asyncio.sleep(0.01)
            returned.append(job.id)
            return WaitForCallback(token)

        async with client:
            row = await client.insert(Charge(5))
            await client.start({"default": 2}, processes=processes, heartbeat_interval=0.1)
            try:
                await await_until(
                    lambda: job(dsn, row.id)["callback_id"] is not None, what="registration"
                )
                running = job(dsn, row.id)
                assert running["state"] == "running"
                resolved = await resolve(client, str(running["callback_id"]))
                assert resolved is not None and resolved.state in resolved_states
                assert resolved.callback_id is None  # answered: the id is spent
                await await_until(
                    lambda: job(dsn, row.id)["state"] == final_state, what=final_state
                )
            finally:
                await client.shutdown()  # waits for the handler and commits its outcome
            return row.id

    job_id = run(main())
    final = job(dsn, job_id)
    assert (final["state"], final["attempt"], final["callback_id"]) == (
        final_state,
        final_attempt,
        None,
    )
    if how == "complete":
        assert final["callback_result"] == {"paid": 1}
    if how == "fail":
        assert final["errors"][-1]["error"] == "callback failed: card declined"
    if processes is None:
        assert returned == [job_id]  # the handler did return, and its outcome was dropped


def test_a_callback_id_answers_only_for_the_attempt_that_registered_it(dsn: str) -> None:
    """An id registered by attempt 1 resolves nothing once attempt 2 runs; a registration
    by an attempt that no longer owns its job raises LeaseLost; a timeout must be > 0."""
    client = awa_fast.AsyncClient(dsn)
    errors: list[Exception] = []

    @client.task(Charge)
    async def charge(job: awa_fast.Job[Charge]) -> Any:
        if job.attempt == 1:
            for timeout in (0, float("nan"), 1e12, "soon"):
                with pytest.raises(awa_fast.ValidationError) as bad:
                    await job.register_callback(timeout_seconds=timeout)  # type: ignore[arg-type]
                errors.append(bad.value)
            token = await job.register_callback(timeout_seconds=600)
            job.update_metadata({"first_callback": token.id})
            return RetryAfter(0)
        while not job.is_cancelled():
            await asyncio.sleep(0.01)
        with pytest.raises(awa_fast.LeaseLost) as lost:
            await job.register_callback()
        errors.append(lost.value)
        return None

    async def main() -> int:
        async with client:
            row = await client.insert(Charge(7))
            await client.start({"default": 1}, heartbeat_interval=0.1, promote_interval=0.05)
            try:
                await await_until(
                    lambda: (
                        (job(dsn, row.id)["attempt"], job(dsn, row.id)["state"]) == (2, "running")
                    ),
                    what="attempt 2",
                )
                first = job(dsn, row.id)["metadata"]["first_callback"]
                with pytest.raises(awa_fast.CallbackNotFound):
                    await client.complete_external(first)
                assert job(dsn, row.id)["state"] == "running"
                cancelled = await client.cancel(row.id)
                assert cancelled is not None and cancelled.state == "cancelled"
                await await_until(lambda: len(errors) == 5, what="attempt 2 to try registering")
            finally:
                await client.shutdown()
            return row.id

    job_id = run(main())
    assert job(dsn, job_id)["state"] == "cancelled"
    *invalid, lost = errors
    assert [(type(e), getattr(e, "field", None)) for e in invalid] == [
        (awa_fast.ValidationError, "timeout_seconds")
    ] * 4
    assert isinstance(lost, awa_fast.LeaseLost) and (lost.job_id, lost.run_lease) == (job_id, 2)


def test_retry_revives_a_parked_job_and_spends_its_callback(dsn: str) -> None:
    """As the Awa SDK's retry: a job parked on a callback goes back to available, its
    attempts reset and its callback cleared (an answer to it finds no job), its errors and
    run lease as they were; the next claim runs it afresh."""
    client = awa_fast.AsyncClient(dsn)
    tokens: list[str] = []

    @client.task(Charge)
    async def charge(job: awa_fast.Job[Charge]) -> Any:
        if tokens:
            return None
        token = await job.register_callback(timeout_seconds=600, filter="true")
        tokens.append(token.id)
        return WaitForCallback(token)

    async def main() -> int:
        async with client:
            parked = await client.insert(Charge(1))
            await run_until(
                client, {"default": 1}, lambda: job(dsn, parked.id)["state"] == "waiting_external"
            )
            before = job(dsn, parked.id)
            assert _rules(dsn, parked.id) is not None
            retried = await client.retry(parked.id)
            assert retried is not None
            assert (retried.id, retried.state, retried.attempt) == (parked.id, "available", 0)
            row = job(dsn, parked.id)
            assert row["run_at"] > before["run_at"]
            assert {k: row[k] for k in ("run_lease", "errors", "attempted_at")} == {
                k: before[k] for k in ("run_lease", "errors", "attempted_at")
            }
            cleared = ("callback_id", "callback_timeout_at", "heartbeat_at", "deadline_at")
            assert before["callback_id"] is not None
            assert {k: row[k] for k in cleared} == dict.fromkeys(cleared)
            assert _rules(dsn, parked.id) is None  # register_callback's filter went too
            with pytest.raises(awa_fast.CallbackNotFound):
                await client.complete_external(tokens[0], {"late": True})
            assert await client.retry(parked.id) is None  # available: nothing to revive
            await run_until(
                client, {"default": 1}, lambda: job(dsn, parked.id)["state"] == "completed"
            )
            return parked.id

    job_id = run(main())
    done = job(dsn, job_id)
    assert (done["attempt"], done["run_lease"], done["errors"], len(tokens)) == (1, 2, [], 1)


def _rules(dsn: str, job_id: int) -> object:
    """A hot row's callback expressions (the jobs view leaves the column out)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT callback_rules FROM awa_fast.jobs_hot WHERE id = %s", (job_id,)
        ).fetchone()
    assert row is not None
    return row[0]
