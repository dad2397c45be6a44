"""A handler that completes its job in its own transaction (``job.complete_in``): its rows
and the completion commit together or not at all, the completion is guarded by the
attempt's lease, follow-ups ride in the same transaction, and the runtime writes no
outcome of its own for the attempt."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.errors import LeaseLost
from awa_fast.lifecycle.followups import FollowupRegistry
from awa_fast.runtime.work.completion import InTransaction
from tests.factories import insert_job
from tests.helpers import await_until, run


@dataclass
class Pay:
    order: int
    fail_first: bool = False


@dataclass
class Receipt:
    order: int


def _ledger(dsn: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT order_id, job_id FROM ledger ORDER BY order_id").fetchall()


def _job(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(
            "SELECT state::text, attempt, errors FROM awa_fast.jobs WHERE id = %s", (job_id,)
        )
        state, attempt, errors = cur.fetchone() or (None, None, None)
    return {"state": state, "attempt": attempt, "errors": errors or []}


@pytest.fixture
def ledger(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ledger (order_id int PRIMARY KEY, job_id bigint)")
    return dsn


def _paying_client(dsn: str, *, attempts: dict[int, int]) -> awa_fast.AsyncClient:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Pay, completes_in_transaction=True)
    async def pay(job: awa_fast.Job[Pay]) -> None:
        attempts[job.id] = job.attempt
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO ledger (order_id, job_id) VALUES (%s, %s)",
                (job.args.order, job.id),
            )
            await job.complete_in(conn)
            if job.args.fail_first and job.attempt == 1:
                raise RuntimeError("rolled back after completing")

    client.on_completed_enqueue(Pay, lambda args, row, ctx: Receipt(args.order))
    return client


def test_rows_completion_and_follow_ups_commit_together(ledger: str) -> None:
    attempts: dict[int, int] = {}
    client = _paying_client(ledger, attempts=attempts)

    async def main() -> list[int]:
        async with client:
            ids = [(await client.insert(Pay(n))).id for n in (1, 2, 3)]
            await client.start({"default": 4})
            await await_until(lambda: len(_ledger(ledger)) == 3, what="three ledger rows")
            await await_until(
                lambda: all(_job(ledger, i)["state"] == "completed" for i in ids),
                what="the three jobs completed",
            )
            await client.shutdown()
            return ids

    ids = run(main())
    assert _ledger(ledger) == [(1, ids[0]), (2, ids[1]), (3, ids[2])]
    assert [_job(ledger, i)["attempt"] for i in ids] == [1, 1, 1]
    with psycopg.connect(ledger) as conn:
        followups = conn.execute(
            "SELECT parent_id FROM awa_fast.jobs WHERE kind = 'receipt' ORDER BY parent_id"
        ).fetchall()
    assert followups == [(i,) for i in ids]


def test_a_rolled_back_completion_is_rescued_and_retried_once(ledger: str) -> None:
    """The first attempt completes and then rolls back: no row, no follow-up, and nothing
    written by the runtime; the rescuer retries the silent attempt, whose second run
    commits."""
    attempts: dict[int, int] = {}
    client = _paying_client(ledger, attempts=attempts)

    async def main() -> int:
        async with client:
            job_id = (await client.insert(Pay(9, fail_first=True))).id
            await client.start(
                {"default": 1}, heartbeat_staleness=1.0, rescue_interval=0.2, backstop_interval=0.2
            )
            await await_until(
                lambda: _job(ledger, job_id)["state"] == "completed",
                timeout=60,
                what="the retried job completed",
            )
            await client.shutdown()
            return job_id

    job_id = run(main())
    job = _job(ledger, job_id)
    assert job["attempt"] == 2
    assert len(job["errors"]) == 1  # the rescue's, for the silent first attempt
    assert _ledger(ledger) == [(9, job_id)]
    with psycopg.connect(ledger) as conn:
        [(receipts,)] = conn.execute(
            "SELECT count(*) FROM awa_fast.jobs WHERE kind = 'receipt'"
        ).fetchall()
    assert receipts == 1


def test_returning_without_completing_fails_the_job_at_once(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Pay, completes_in_transaction=True)
    async def forgets(job: awa_fast.Job[Pay]) -> None:
        return None

    async def main() -> int:
        async with client:
            job_id = (await client.insert(Pay(1))).id
            await client.start({"default": 1})
            await await_until(lambda: _job(dsn, job_id)["state"] == "failed", what="failed")
            await client.shutdown()
            return job_id

    job = _job(dsn, run(main()))
    assert job["attempt"] == 1
    assert "without completing the job in its transaction" in job["errors"][-1]["error"]
    assert job["errors"][-1]["terminal"] is True


def _running_job(dsn: str, *, lease: int, state: str = "running") -> awa_fast.Job[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = insert_job(conn, kind="pay", state=state, attempt=1, run_lease=lease)
    return awa_fast.Job(
        id=job_id, run_lease=1, kind="pay", queue="default", args=Pay(1), attempt=1,
        max_attempts=25, priority=2, tags=[], metadata={}, errors=[], progress=None,
        run_at_us=0, created_at_us=0, deadline_at_us=None, cancelled=lambda: False,
        writer=None,  # type: ignore[arg-type]  # complete_in writes through completion only
        completion=InTransaction(FollowupRegistry()),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("lease", "state"),
    [(2, "running"), (1, "cancelled"), (1, "retryable")],
    ids=["rescued and claimed again", "cancelled", "rescued"],
)
def test_an_attempt_that_no_longer_owns_its_job_raises_and_rolls_back(
    ledger: str, lease: int, state: str
) -> None:
    job = _running_job(ledger, lease=lease, state=state)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(ledger) as conn:
            with pytest.raises(LeaseLost, match="rescued, cancelled or decided first"):
                async with conn.transaction():
                    await conn.execute("INSERT INTO ledger VALUES (1, %s)", (job.id,))
                    await job.complete_in(conn)

    run(main())
    assert _ledger(ledger) == []
    assert _job(ledger, job.id)["state"] == state
    assert job.completed_in_transaction is False


def test_the_sync_form_completes_on_a_sync_connection(ledger: str) -> None:
    job = _running_job(ledger, lease=1)
    with psycopg.connect(ledger) as conn, conn.transaction():
        conn.execute("INSERT INTO ledger VALUES (1, %s)", (job.id,))
        job.complete_in_sync(conn)
    assert _job(ledger, job.id)["state"] == "completed"
    assert _ledger(ledger) == [(1, job.id)]
    assert job.completed_in_transaction is True


def test_a_connection_that_would_commit_the_completion_alone_is_refused(dsn: str) -> None:
    job = _running_job(dsn, lease=1)
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        pytest.raises(ValueError, match="needs a transaction the handler commits"),
    ):
        job.complete_in_sync(conn)
    with pytest.raises(TypeError, match="takes a psycopg connection"):
        asyncio.run(job.complete_in("postgresql://nowhere"))  # type: ignore[arg-type]
    assert _job(dsn, job.id)["state"] == "running"


def test_registering_the_flag_takes_a_bool_only(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    with pytest.raises(awa_fast.ConfigError, match="completes_in_transaction must be True"):
        client.task(Pay, completes_in_transaction="yes")(lambda job: None)  # type: ignore[arg-type]
