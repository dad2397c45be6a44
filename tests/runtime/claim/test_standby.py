"""A runner's standby claims: a job inserted into an idle queue starts without a claim of
its own, on this host, and nothing about the job changes but that."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.queries import Q
from awa_fast.runtime.runner import Runner
from tests.helpers import await_until, job, listening, run


@dataclass
class Mark:
    label: str


def waiting_claims(dsn: str, runner: Runner) -> int:
    """The runner's standby claims that wait for a job."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM awa_fast.standby_claims WHERE host_id = %s AND job_id IS NULL",
            (runner.host.id,),
        ).fetchone()
        assert row is not None
        return int(row[0])


async def run_one(client: awa_fast.AsyncClient, dsn: str, label: str) -> int:
    """Insert a Mark and wait until it has completed; its id."""
    job_id = (await client.insert(Mark(label))).id
    await await_until(lambda: job(dsn, job_id)["state"] == "completed", what=f"job {label}")
    return job_id


async def start_with_claim(
    client: awa_fast.AsyncClient, dsn: str, queues: dict[str, int], **options: Any
) -> Runner:
    """Start ``client``'s runner and wait until its standby claim waits, and its listener
    listens."""
    runner = await client.start(queues, **options)
    await await_until(lambda: waiting_claims(dsn, runner) == 1, what="a standby claim")
    await await_until(lambda: listening(dsn), what="the listener")
    return runner


def truncate_claims(dsn: str) -> None:
    """Empty standby_claims, as a crash does (the table is UNLOGGED)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("TRUNCATE awa_fast.standby_claims")


def all_claims(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM awa_fast.standby_claims").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("processes", [None, 2])
def test_a_job_inserted_into_an_idle_queue_starts_on_a_standby_claim(
    dsn: str, processes: int | None
) -> None:
    """With the poll an hour away, no claim statement runs for the job: it starts on the
    runner's standby claim, completes once, and the runner offers a claim again. Stopping
    withdraws it."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)

    async def main() -> None:
        async with client:
            runner = await start_with_claim(
                client, dsn, {"default": 4}, processes=processes, poll_interval=3600.0
            )
            job_id = await run_one(client, dsn, "one")
            assert job(dsn, job_id)["attempt"] == 1
            assert (
                runner.claimer.standby is not None
                and runner.claimer.standby.started_by_queue == [1]
            )
            await await_until(lambda: waiting_claims(dsn, runner) == 1, what="a claim again")
            await client.shutdown()

    run(main())
    assert all_claims(dsn) == 0


def test_no_standby_claims_when_turned_off(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)

    async def main() -> None:
        async with client:
            runner = await client.start({"default": 4}, standby=False)
            assert runner.claimer.standby is None
            await run_one(client, dsn, "one")
            assert all_claims(dsn) == 0
            await client.shutdown()

    run(main())


def test_a_claim_gone_from_the_table_is_offered_again(dsn: str) -> None:
    """A crash empties standby_claims (UNLOGGED); the runner notices at its next collect,
    a poll interval later at most, and offers again."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)

    async def main() -> None:
        async with client:
            runner = await start_with_claim(client, dsn, {"default": 4}, poll_interval=0.2)
            # From a thread: TRUNCATE waits for the leader's rescue transaction, which
            # deletes orphan claims, and that transaction runs on this loop.
            await asyncio.to_thread(truncate_claims, dsn)
            await await_until(lambda: waiting_claims(dsn, runner) == 1, what="an offer again")
            await run_one(client, dsn, "one")
            assert (
                runner.claimer.standby is not None
                and runner.claimer.standby.started_by_queue == [1]
            )
            await client.shutdown()

    run(main())


def test_a_job_started_on_standby_with_its_queue_full_goes_back_unstarted(dsn: str) -> None:
    """A queue's concurrency holds: a job started on a standby claim while the queue's one
    slot is taken goes back to available with its attempt given back, and runs once the
    slot is free. (The claim is offered by hand here: the runner offers one only with
    capacity to spare, which claims since may have taken.)"""
    client = awa_fast.AsyncClient(dsn)
    release = asyncio.Event()
    running: list[str] = []

    @client.task(Mark)
    async def hold(job: awa_fast.Job[Mark]) -> None:
        running.append(job.args.label)
        if job.args.label == "first":
            await release.wait()

    async def main() -> None:
        async with client:
            runner = await client.start({"default": 1}, poll_interval=3600.0, prefetch=0)
            first = await client.insert(Mark("first"))
            await await_until(lambda: running == ["first"], what="the first job")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    Q.standby_offer,
                    {"host_id": runner.host.id, "queues": ["default"], "deadlines": [60.0]},
                )
            second = await client.insert(Mark("second"))
            await await_until(
                lambda: job(dsn, second.id)["state"] == "available", what="given back"
            )
            assert job(dsn, second.id)["attempt"] == 0
            assert running == ["first"]
            release.set()
            await await_until(
                lambda: {job(dsn, j.id)["state"] for j in (first, second)} == {"completed"}
            )
            assert job(dsn, second.id)["attempt"] == 1
            await client.shutdown()

    run(main())
    assert running == ["first", "second"]


def test_a_job_whose_insert_held_a_claim_through_the_stop_goes_back_unstarted(
    dsn: str,
) -> None:
    """The runner stops while a producer's transaction holds its standby claim: the
    withdraw skips the claim, the producer commits while the workers drain, and the job
    the commit started is given back (available, attempt 0) instead of left running on a
    host that is gone, for the backstop to find 30 s later. (The first withdraw, with its
    collect, is watched through a wrapper: nothing in the database tells that it ran.)"""
    client = awa_fast.AsyncClient(dsn)
    release = asyncio.Event()

    @client.task(Mark)
    async def hold(job: awa_fast.Job[Mark]) -> None:
        await release.wait()

    async def main() -> int:
        async with client:
            runner = await client.start({"default": 2}, poll_interval=3600.0)
            await client.insert(Mark("held"))
            await await_until(lambda: runner.snapshot().in_flight == {"default": 1})
            await await_until(lambda: waiting_claims(dsn, runner) == 1, what="a standby claim")
            with psycopg.connect(dsn) as producer:
                row = producer.execute(
                    "INSERT INTO awa_fast.jobs_hot (kind, queue) VALUES ('Mark', 'default')"
                    " RETURNING id"
                ).fetchone()
                assert row is not None
                withdrawn = asyncio.Event()
                withdraw = runner.claimer.withdraw_standby

                async def watched(*, start: bool) -> None:
                    await withdraw(start=start)
                    if start:
                        withdrawn.set()

                runner.claimer.withdraw_standby = watched  # type: ignore[method-assign]
                stopping = asyncio.create_task(client.shutdown())
                await withdrawn.wait()
                producer.commit()
            release.set()
            await stopping
            return int(row[0])

    late = run(main())
    assert (job(dsn, late)["state"], job(dsn, late)["attempt"]) == ("available", 0)
    assert all_claims(dsn) == 0


@pytest.mark.parametrize("processes", [None, 2])
def test_each_job_starts_once_though_the_listener_and_claim_rounds_both_collect(
    dsn: str, processes: int | None
) -> None:
    """Every job started on a standby claim is collected by the listener, on its NOTIFY,
    or by a claim round (for news the listener missed, or at its recheck); it starts once:
    a collect deletes the claims it read before the next one reads."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)

    async def main() -> None:
        async with client:
            runner = await client.start({"default": 4}, processes=processes, poll_interval=3600.0)
            standby = runner.claimer.standby
            assert standby is not None
            for n in range(20):
                await await_until(lambda: waiting_claims(dsn, runner) == 1, what="a claim")
                await run_one(client, dsn, str(n))
                assert standby.started_by_queue == [n + 1]
            await client.shutdown()
            assert runner.claimer.claimed_by_queue == [20]

    run(main())
    with psycopg.connect(dsn) as conn:
        attempts = conn.execute("SELECT attempt, count(*) FROM awa_fast.jobs GROUP BY 1")
        assert attempts.fetchall() == [(1, 20)]
