"""What a handler is given: the job's metadata, tags and the errors of earlier attempts,
in forked worker processes and in-process alike."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

import awa_fast
from tests.helpers import job, run, run_until, states


@dataclass
class Look:
    fail_first: bool


@pytest.mark.parametrize("processes", [None, 2])
def test_a_handler_sees_metadata_tags_and_earlier_errors(dsn: str, processes: int | None) -> None:
    """Each attempt writes what it saw into the job's metadata, which is saved with its
    outcome (a retry included) wherever the handler ran."""

    async def main() -> tuple[int, int]:
        client = awa_fast.AsyncClient(dsn)

        @client.task(Look)
        async def look(job: awa_fast.Job[Look]) -> None:
            saw = {"metadata": dict(job.metadata), "tags": job.tags}
            saw["errors"] = [e["error"] for e in job.errors]
            job.update_metadata({f"attempt {job.attempt} saw": saw})
            if job.args.fail_first and job.attempt == 1:
                raise ValueError("first try")

        async with client:
            plain = await client.insert(Look(fail_first=False))
            tagged = await client.insert(
                Look(fail_first=True), metadata={"team": "ops"}, tags=["a", "b"]
            )
            await run_until(
                client,
                {"default": 4},
                lambda: states(dsn) == {"completed": 2},
                processes=processes,
                backoff=awa_fast.Backoff(base=0.01),
            )
        return plain.id, tagged.id

    plain, tagged = run(main())
    assert job(dsn, plain)["metadata"] == {
        "attempt 1 saw": {"metadata": {}, "tags": [], "errors": []}
    }
    first = {"metadata": {"team": "ops"}, "tags": ["a", "b"], "errors": []}
    assert job(dsn, tagged)["metadata"] == {
        "team": "ops",
        "attempt 1 saw": first,
        "attempt 2 saw": {
            "metadata": {"team": "ops", "attempt 1 saw": first},
            "tags": ["a", "b"],
            "errors": ["ValueError: first try"],
        },
    }


@pytest.mark.parametrize("processes", [None, 2])
def test_a_handler_sees_the_stored_timestamps_and_numbers(dsn: str, processes: int | None) -> None:
    """A claimed row (loaded in binary format) reaches the handler as stored: timestamps
    at the row's instants, in UTC whatever the server's TimeZone (in-process as in worker
    processes), small integers exact."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET TimeZone = 'America/New_York'").format(
                sql.Identifier(conn.info.dbname)
            )
        )

    async def main() -> int:
        client = awa_fast.AsyncClient(dsn)

        @client.task(Look)
        async def look(job: awa_fast.Job[Look]) -> None:
            times = job.datetimes
            offsets = [str(at.utcoffset()) for at in (times.run_at, times.created_at)]
            saw = {"run_at": times.run_at.timestamp(), "created_at": times.created_at.timestamp()}
            saw |= {"offsets": offsets, "priority": job.priority, "max_attempts": job.max_attempts}
            job.update_metadata({"saw": saw})

        async with client:
            earlier = datetime.now(UTC) - timedelta(minutes=5)
            inserted = await client.insert(Look(False), priority=1, max_attempts=7, run_at=earlier)
            await run_until(
                client, {"default": 2}, lambda: states(dsn) == {"completed": 1}, processes=processes
            )
        return inserted.id

    stored = job(dsn, run(main()))
    assert stored["metadata"]["saw"] == {
        "run_at": stored["run_at"].timestamp(),
        "created_at": stored["created_at"].timestamp(),
        "offsets": ["0:00:00", "0:00:00"],
        "priority": 1,
        "max_attempts": 7,
    }


@pytest.mark.parametrize("processes", [None, 2])
def test_an_integer_beyond_64_bits_reaches_the_handler_exact(
    dsn: str, processes: int | None
) -> None:
    """jsonb keeps any integer, and so does the way to the handler: args without a type
    (a dict) and a dataclass's int field alike, from insert and insert_many."""
    big = 2**70 + 1

    @dataclass
    class Big:
        n: int

    async def main() -> list[int]:
        client = awa_fast.AsyncClient(dsn)

        @client.task(kind="untyped")
        async def untyped(job: awa_fast.Job[dict[str, int]]) -> None:
            job.update_metadata({"exact": job.args["n"] == big})

        @client.task(Big)
        async def typed(job: awa_fast.Job[Big]) -> None:
            job.update_metadata({"exact": job.args.n == big})

        async with client:
            ids = [(await client.insert({"n": big}, kind="untyped")).id]
            ids += await client.insert_many([{"n": big}], kind="untyped")
            ids += [(await client.insert(Big(big))).id]
            await run_until(
                client,
                {"default": 2},
                lambda: states(dsn) == {"completed": 3},
                processes=processes,
            )
        return ids

    for job_id in run(main()):
        stored = job(dsn, job_id)
        assert stored["args"] == {"n": big}
        assert stored["metadata"] == {"exact": True}
