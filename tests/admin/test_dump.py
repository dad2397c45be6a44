"""dump_job and dump_run (admin/dump.py): a job and its lifecycle, and one attempt of it, in
the Awa SDK's ``awa job dump`` and ``dump-run`` shapes; attempts from a job a real runner
failed once and then completed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest

import awa_fast
from awa_fast.lifecycle.transitions import Backoff
from tests.factories import finish_jobs, insert_followup, insert_job
from tests.helpers import run, run_until, states


@dataclass
class Flaky:
    n: int


@dataclass
class Note:
    text: str


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
        for beyond in (3, 0):  # the SDK's refusal: a later attempt, or the pre-run one
            with pytest.raises(
                awa_fast.ValidationError,
                match=f"attempt {beyond} is not available for job {job_id}; current attempt is 2$",
            ):
                admin.dump_run(job_id, beyond)
        with pytest.raises(awa_fast.ValidationError, match="attempt"):
            admin.dump_run(job_id, -1)
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
    assert current["progress"] is None and current["notes"] == []  # completed
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
        assert orjson.loads(admin.dump_run(job.id, 0)) == snapshot  # the SDK takes 0 too
        with pytest.raises(
            awa_fast.ValidationError,
            match=f"attempt 1 is not present in the recorded error history for job {job.id}$",
        ):
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


def _entry(attempt: int, error: str, **more: object) -> dict[str, object]:
    return {"attempt": attempt, "error": error, "at": f"2026-01-01T00:00:0{attempt}Z", **more}


def test_a_retried_job_dumps_its_earlier_attempts_from_its_error_history(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    """retry resets the attempt counter, not the errors: as the SDK, attempt 0 is the
    pre-run snapshot and each attempt the errors record is still there to dump, the last
    one failed (its entry is terminal), the others retryable."""
    job_id = insert_job(conn, queue="idle", attempt=2, run_lease=2)
    history = [_entry(1, "first try"), _entry(2, "gave up", terminal=True)]
    finish_jobs(conn, "failed", [job_id], errors=history)
    assert client.retry(job_id) is not None
    snapshot = orjson.loads(client.dump_run(job_id, 0))
    first, last = (orjson.loads(client.dump_run(job_id, n)) for n in (1, 2))
    assert orjson.loads(client.dump_run(job_id)) == snapshot
    assert {k: snapshot[k] for k in ("selected_attempt", "current_attempt", "source")} == {
        "selected_attempt": 0,
        "current_attempt": 0,
        "source": "current_job_row",
    }
    assert (snapshot["state"], snapshot["selected_run_lease"]) == ("available", 2)
    for dumped, attempt, state in ((first, 1, "retryable"), (last, 2, "failed")):
        assert {k: dumped[k] for k in ("selected_attempt", "current_attempt", "source")} == {
            "selected_attempt": attempt,
            "current_attempt": 0,
            "source": "error_history",
        }
        assert (dumped["state"], dumped["selected_run_lease"]) == (state, None)
        assert dumped["raw_error_entry"] == history[attempt - 1]
        assert dumped["error"] == history[attempt - 1]["error"]
        assert dumped["terminal"] is (state == "failed")
    with pytest.raises(
        awa_fast.ValidationError,
        match=f"attempt 3 is not present in the recorded error history for job {job_id}$",
    ):
        client.dump_run(job_id, 3)


def test_an_earlier_attempt_that_recorded_no_error_cannot_be_dumped(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    """errors[] is all the history there is: an attempt with no entry there (given back by
    retry_external, say) is refused as the SDK refuses it, not dumped empty."""
    job_id = insert_job(conn, state="running", attempt=2, run_lease=2)
    with pytest.raises(
        awa_fast.ValidationError,
        match=f"attempt 1 is not present in the recorded error history for job {job_id}$",
    ):
        client.dump_run(job_id, 1)
    assert orjson.loads(client.dump_run(job_id, 2))["state"] == "running"


def test_dump_job_shows_the_job_and_its_lifecycle(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    row = client.insert(Note("dump"), tags=["t"], unique={"by_args": True})
    start = datetime.now(UTC)
    error = {"error": "boom", "attempt": 1, "at": (start + timedelta(seconds=1)).isoformat()}
    finish_jobs(
        conn,
        "failed",
        [row.id],
        attempt=1,
        attempted_at=start.isoformat(),
        finalized_at=(start + timedelta(seconds=2)).isoformat(),
        errors=[error],
    )
    dump = json.loads(client.dump_job(row.id))
    assert (dump["job"]["id"], dump["job"]["state"], dump["job"]["tags"]) == (
        row.id,
        "failed",
        ["t"],
    )
    assert dump["job"]["args"] == {"text": "dump"} and dump["job"]["created_at"].endswith("Z")
    assert isinstance(dump["job"]["unique_key"], str)
    assert dump["summary"] == {
        "original_priority": 2,
        "can_retry": True,
        "can_cancel": False,
        "error_count": 1,
        "latest_error": error,
    }
    assert [e["label"] for e in dump["timeline"]] == [
        "Created",
        "Attempt 1 started",
        "Attempt 1 failed",
        "Failed after 1 attempt",
    ]
    assert dump["timeline"][2] | {"timestamp": None} == {
        "timestamp": None,
        "label": "Attempt 1 failed",
        "state": "failed",
        "detail": "boom",
        "is_error": True,
    }
    assert "dlq" not in dump

    client.move_failed_to_dlq(row.id, "bad data")
    dead = json.loads(client.dump_job(row.id))
    assert dead["dlq"]["reason"] == "bad data" and dead["dlq"]["original_run_lease"] == 0
    assert dead["summary"]["can_retry"] is False and dead["job"]["id"] == row.id
    with pytest.raises(awa_fast.JobNotFound, match=r"^job not found: 999999$"):
        client.dump_job(999999)


def test_dump_job_names_a_followups_parent_alive_or_dead_lettered(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    parent = insert_job(conn)
    child = insert_followup(conn, parent)
    assert json.loads(client.dump_job(parent))["job"]["parent_id"] is None
    assert json.loads(client.dump_job(child))["job"]["parent_id"] == parent
    finish_jobs(conn, "failed", [child])
    client.move_failed_to_dlq(child, "gave up")
    assert json.loads(client.dump_job(child))["job"]["parent_id"] == parent
