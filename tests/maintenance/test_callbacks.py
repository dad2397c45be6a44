"""WaitForCallback end to end: park, then resolve from outside by callback id."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import awa_fast
from awa_fast import WaitForCallback
from tests.helpers import job, run, run_until


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
            assert await client.complete_external(tokens[0]) is None  # already resolved
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
