"""A handler whose error, progress or metadata jsonb cannot hold still ends its attempt at
once: the text of an error is stored escaped, and progress or metadata that cannot be
stored fail the attempt, naming the field. Before, the outcome never reached the ring and
the job stayed running until the heartbeat sweep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import awa_fast
from tests.helpers import await_until, job, run

UNSTORABLE: dict[str, Callable[[awa_fast.Job[Any]], None]] = {
    "a set in metadata": lambda job: job.update_metadata({"tags": {1, 2}}),
    "NaN in metadata": lambda job: job.update_metadata({"score": float("nan")}),
    "a lone surrogate in progress": lambda job: job.set_progress(10, "\ud800"),
}


def _first_attempt(dsn: str, handle: Callable[[awa_fast.Job[Any]], None]) -> dict[str, Any]:
    """Run one job through ``handle`` in-process; its row once its first attempt failed."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(kind="odd", queue="odd")
    async def handler(job: awa_fast.Job[Any]) -> None:
        handle(job)

    async def main() -> int:
        inserted = await client.insert({}, kind="odd", queue="odd")
        await client.start({"odd": 1})
        try:
            await await_until(lambda: job(dsn, inserted.id)["errors"], what="the failure")
        finally:
            await client.close()
        return inserted.id

    return job(dsn, run(main()))


@pytest.mark.parametrize("how", list(UNSTORABLE))
def test_an_unstorable_progress_or_metadata_fails_the_attempt(dsn: str, how: str) -> None:
    row = _first_attempt(dsn, UNSTORABLE[how])
    assert row["state"] in ("retryable", "available"), row
    [error] = row["errors"]
    assert error["attempt"] == 1
    assert "progress or metadata not storable" in error["error"], error


def test_a_nul_or_lone_surrogate_in_an_error_is_stored_escaped(dsn: str) -> None:
    def handle(job: awa_fast.Job[Any]) -> None:
        raise ValueError("nul\x00 surrogate\ud800")

    [error] = _first_attempt(dsn, handle)["errors"]
    assert error["error"] == "ValueError: nul\\x00 surrogate\\ud800"
