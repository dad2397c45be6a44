"""dump_run: one attempt of a job, the Awa SDK's ``awa job dump-run`` shape, from a job a
real runner failed once and then completed."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest

import awa_fast
from awa_fast.db.transitions import Backoff
from tests.helpers import run, run_until, states


@dataclass
class Flaky:
    n: int


def test_the_current_attempt_comes_from_the_row_and_an_earlier_one_from_its_error(
    dsn: str,
) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Flaky)
    async def flaky(job: awa_fast.Job[Flaky]) -> None:
        if job.attempt == 1:
            raise RuntimeError("first try")
        job.set_progress(100, "done")

    async def main() -> int:
        async with client:
            job = await client.insert(Flaky(1))
            await run_until(
                client,
                {"default": 1},
                lambda: states(dsn) == {"completed": 1},
                backoff=Backoff(base=0.01, jitter=0.0),
                promote_interval=0.02,
            )
            return job.id

    job_id = run(main())
    with awa_fast.Client(dsn) as admin:
        current = orjson.loads(admin.dump_run(job_id))
        first = orjson.loads(admin.dump_run(job_id, 1))
        with pytest.raises(awa_fast.ValidationError, match="has made 2 attempt"):
            admin.dump_run(job_id, 3)
        with pytest.raises(awa_fast.ValidationError, match="attempt"):
            admin.dump_run(job_id, 0)
        with pytest.raises(awa_fast.JobNotFound, match=f"^job not found: {job_id + 1}$"):
            admin.dump_run(job_id + 1)
    assert {k: current[k] for k in ("selected_attempt", "current_attempt", "source", "state")} == {
        "selected_attempt": 2,
        "current_attempt": 2,
        "source": "current_job_row",
        "state": "completed",
    }
    assert current["selected_run_lease"] == current["current_run_lease"] == 2
    assert current["started_at"] <= current["finished_at"] and current["error"] is None
    assert current["progress"]["percent"] == 100 and current["notes"] == []
    assert (first["source"], first["state"], first["selected_run_lease"]) == (
        "error_history",
        "retryable",
        None,
    )
    assert first["error"] == "RuntimeError: first try" == first["raw_error_entry"]["error"]
    assert first["finished_at"] == first["raw_error_entry"]["at"] and first["notes"]


def test_a_job_not_yet_run_dumps_its_pre_run_snapshot(dsn: str) -> None:
    with awa_fast.Client(dsn) as admin:
        job = admin.insert(Flaky(2), queue="idle")
        snapshot = orjson.loads(admin.dump_run(job.id))
        with pytest.raises(awa_fast.ValidationError, match="has not run yet, so no attempt 1"):
            admin.dump_run(job.id, 1)
    assert (snapshot["selected_attempt"], snapshot["source"], snapshot["state"]) == (
        0,
        "current_job_row",
        "available",
    )
    assert snapshot["error"] is None and snapshot["terminal"] is None
    assert snapshot["notes"] == [
        "The job has not been claimed yet; attempt 0 is the pre-run snapshot."
    ]
