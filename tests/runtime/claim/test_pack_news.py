"""A runner claims jobs_hot's rows alone until it hears a queue may hold packs
(awa_fast.runtime.claim.packwatch, migration 0017). Each test but the last polls once an hour, so
only news can bring the packed jobs to a claim: without it they would wait for the poll,
and the test times out."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg

import awa_fast
from tests.helpers import await_until, job, listening, run

HOUR = 3600.0


@dataclass
class Tick:
    n: int


def _completed(dsn: str, ids: list[int]) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM awa_fast.jobs WHERE id = ANY(%s) AND state = 'completed'",
            (ids,),
        ).fetchone()
    return row is not None and row[0] == len(ids)


def _client(dsn: str) -> awa_fast.AsyncClient:
    client = awa_fast.AsyncClient(dsn)
    client.task(Tick)(lambda job: None)
    return client


async def _start(
    client: awa_fast.AsyncClient, dsn: str, queues: dict[str, int], **config: Any
) -> None:
    await client.start(queues, **config)
    await await_until(lambda: listening(dsn), what="the listener")


async def _one_job_done(client: awa_fast.AsyncClient, dsn: str, queue: str = "default") -> None:
    """Insert a plain job and wait for it: the runner has claimed since everything before."""
    ran = await client.insert(Tick(-1), queue=queue)
    await await_until(lambda: job(dsn, ran.id)["state"] == "completed", what="the plain job")


def test_packs_inserted_while_claims_read_rows_alone_are_claimed(dsn: str) -> None:
    client = _client(dsn)

    async def main() -> None:
        async with client:
            await _start(client, dsn, {"default": 50}, poll_interval=HOUR)
            await _one_job_done(client, dsn)  # claims found no packs: rows alone from here
            ids = await client.insert_many([Tick(n) for n in range(100)])
            await await_until(lambda: _completed(dsn, ids), timeout=15.0, what="packed jobs")
            await client.shutdown()

    run(main())


def _start_part_of_the_pack(conn: psycopg.Connection[Any]) -> list[int]:
    """Start 10 jobs of the queue's one pack in ``conn``'s open transaction, as a claim
    does, which holds the pack until that transaction ends; their ids."""
    rows = conn.execute(
        "SELECT s.id FROM awa_fast.job_packs p,"
        " awa_fast.start_packed(p.id, 10, NULL, 60.0) s ORDER BY s.id"
    ).fetchall()
    return [row[0] for row in rows]


def test_the_rest_of_a_pack_another_transaction_held_is_news(dsn: str) -> None:
    """A transaction elsewhere holds a pack and starts part of it (as a claim does, though
    claims of one queue take turns, so no claim of this runner waits behind it): this
    runner's claims skip the locked pack and find none. When that transaction commits, the
    rest of the pack is news."""
    client = _client(dsn)
    elsewhere = psycopg.connect(dsn)  # one transaction, open until the commit below

    async def main() -> list[int]:
        async with client:
            ids = await client.insert_many([Tick(n) for n in range(100)])
            assert _start_part_of_the_pack(elsewhere) == ids[:10]
            await _start(client, dsn, {"default": 50}, poll_interval=HOUR)
            await _one_job_done(client, dsn)  # its claims skipped the locked pack
            elsewhere.commit()
            await await_until(lambda: _completed(dsn, ids[10:]), timeout=15.0, what="the rest")
            await client.shutdown()
            return ids

    try:
        ids = run(main())
    finally:
        elsewhere.close()
    assert job(dsn, ids[0])["state"] == "running"  # the other claim's, never this runner's


def test_packs_of_a_resumed_queue_are_claimed(dsn: str) -> None:
    client = _client(dsn)

    async def main() -> None:
        async with client:
            await client.pause_queue("default")
            await _start(client, dsn, {"default": 50, "other": 5}, poll_interval=HOUR)
            ids = await client.insert_many([Tick(n) for n in range(100)])
            await _one_job_done(client, dsn, queue="other")  # the paused queue was looked at
            assert not _completed(dsn, ids[:1])
            await client.resume_queue("default")
            await await_until(lambda: _completed(dsn, ids), timeout=15.0, what="packed jobs")
            await client.shutdown()

    run(main())


def test_a_pack_nothing_announced_is_claimed_within_a_poll_while_rows_keep_coming(
    dsn: str,
) -> None:
    """A transaction elsewhere holds a pack, this runner's claims skip it, and that
    transaction rolls back: no NOTIFY says the pack is there. Jobs inserted one by one keep
    waking the claims before any poll can come, yet once a poll interval a claim looks at
    packs and finds it."""
    client = _client(dsn)
    elsewhere = psycopg.connect(dsn)

    async def main() -> None:
        async with client:
            ids = await client.insert_many([Tick(n) for n in range(100)])
            assert _start_part_of_the_pack(elsewhere) == ids[:10]
            await _start(client, dsn, {"default": 50}, poll_interval=0.5)
            await _one_job_done(client, dsn)  # its claims skipped the locked pack
            elsewhere.rollback()
            for n in range(300):  # a job every 50 ms: a wake ten times a poll interval
                if _completed(dsn, ids):
                    break
                await client.insert(Tick(n))
                await asyncio.sleep(0.05)  # the producer's pace, not a wait for anything
            assert _completed(dsn, ids), "the packed jobs were never claimed"
            await client.shutdown()

    try:
        run(main())
    finally:
        elsewhere.close()
