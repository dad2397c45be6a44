"""Every row of the outcome table (docs/architecture.md), observed in the database."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import awa_fast
from awa_fast import Cancel, RetryAfter, Snooze, TerminalError, WaitForCallback
from tests.helpers import job, run, run_until, settled


@dataclass
class Act:
    do: str


def _client(dsn: str) -> awa_fast.AsyncClient:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Act)
    async def act(job: awa_fast.Job[Act]) -> Any:
        match job.args.do:
            case "complete":
                job.set_progress(100, "done")
                return None
            case "retry_after":
                return RetryAfter(60)
            case "snooze":
                return Snooze(60)
            case "cancel":
                return Cancel("not needed")
            case "wait":
                token = await job.register_callback(timeout_seconds=30)
                return WaitForCallback(token)
            case "wait_unregistered":
                return WaitForCallback("made-up")
            case "terminal":
                raise TerminalError("bad input")
            case "raise":
                raise ValueError("boom")
            case "weird":
                return 42
        raise AssertionError(job.args.do)

    return client


def _run_all(dsn: str, dos: list[str], **insert: Any) -> dict[str, dict[str, Any]]:
    async def main() -> dict[str, int]:
        async with _client(dsn) as client:
            ids = {do: (await client.insert(Act(do), **insert)).id for do in dos}
            await run_until(client, {"default": 10}, lambda: settled(dsn))
            return ids

    return {do: job(dsn, job_id) for do, job_id in run(main()).items()}


def _near(when: datetime, seconds: float, slack: float = 10.0) -> bool:
    delta = (when - datetime.now(UTC)).total_seconds()
    return seconds - slack <= delta <= seconds + 1


def test_outcome_table(dsn: str) -> None:
    jobs = _run_all(
        dsn,
        [
            "complete",
            "retry_after",
            "snooze",
            "cancel",
            "wait",
            "wait_unregistered",
            "terminal",
            "raise",
            "weird",
        ],
    )

    done = jobs["complete"]
    assert done["state"] == "completed" and done["finalized_at"] is not None
    assert done["progress"] is None  # a completed job keeps no checkpoint
    assert done["errors"] == []

    retry = jobs["retry_after"]
    assert (retry["state"], retry["attempt"], retry["errors"]) == ("retryable", 1, [])
    assert _near(retry["run_at"], 60)

    snoozed = jobs["snooze"]
    assert (snoozed["state"], snoozed["attempt"]) == ("scheduled", 0)
    assert _near(snoozed["run_at"], 60)

    cancelled = jobs["cancel"]
    assert cancelled["state"] == "cancelled"
    assert cancelled["errors"][-1]["error"] == "cancelled: not needed"

    parked = jobs["wait"]
    assert parked["state"] == "waiting_external"
    assert parked["callback_id"] is not None and parked["heartbeat_at"] is None
    assert _near(parked["callback_timeout_at"], 30)

    unregistered = jobs["wait_unregistered"]
    assert unregistered["state"] == "failed"
    assert "without calling register_callback" in unregistered["errors"][-1]["error"]
    assert unregistered["errors"][-1]["terminal"] is True

    terminal = jobs["terminal"]
    assert terminal["state"] == "failed" and terminal["attempt"] == 1
    entry = terminal["errors"][-1]
    assert entry["error"] == "TerminalError: bad input" and entry["terminal"] is True
    assert entry["attempt"] == 1 and "at" in entry and "traceback" in entry

    raised = jobs["raise"]
    assert raised["state"] == "retryable"
    assert raised["errors"][-1]["error"] == "ValueError: boom"
    assert "terminal" not in raised["errors"][-1]
    assert _near(raised["run_at"], 1.25, slack=3)

    assert jobs["weird"]["state"] == "failed"
    assert "handler returned int" in jobs["weird"]["errors"][-1]["error"]


def test_retry_after_and_errors_on_the_last_attempt_fail(dsn: str) -> None:
    jobs = _run_all(dsn, ["retry_after", "raise"], max_attempts=1)
    assert jobs["retry_after"]["state"] == "failed"
    assert "final attempt" in jobs["retry_after"]["errors"][-1]["error"]
    assert jobs["raise"]["state"] == "failed"
    assert jobs["raise"]["errors"][-1]["error"] == "ValueError: boom"


def test_unknown_kind_and_undecodable_args_fail_terminally(dsn: str) -> None:
    async def main() -> tuple[int, int]:
        async with _client(dsn) as client:
            unknown = await client.insert({"x": 1}, kind="nobody_handles_this")
            bad = await client.insert({"wrong": "shape"}, kind="act")
            await run_until(client, {"default": 10}, lambda: settled(dsn))
            return unknown.id, bad.id

    unknown_id, bad_id = run(main())
    unknown, bad = job(dsn, unknown_id), job(dsn, bad_id)
    assert unknown["state"] == "failed" and unknown["errors"][-1]["terminal"] is True
    assert "unknown job kind: 'nobody_handles_this'" in unknown["errors"][-1]["error"]
    assert bad["state"] == "failed" and bad["errors"][-1]["terminal"] is True
    assert "undecodable args for kind 'act'" in bad["errors"][-1]["error"]


def test_backoff_spacing_and_exhaustion(dsn: str) -> None:
    """A job that always raises runs max_attempts times, waiting base*2**(n-1)*(1..1.25)."""
    base = 0.2
    client = awa_fast.AsyncClient(dsn)
    starts: list[datetime] = []

    @client.task(Act)
    async def act(job: awa_fast.Job[Act]) -> None:
        starts.append(datetime.now(UTC))
        raise ValueError(f"attempt {job.attempt}")

    async def main() -> int:
        async with client:
            row = await client.insert(Act("x"), max_attempts=4)
            await run_until(
                client,
                {"default": 1},
                lambda: job(dsn, row.id)["state"] == "failed",
                backoff=awa_fast.Backoff(base=base, max=10.0, jitter=0.25),
                promote_interval=0.01,
            )
            return row.id

    final = job(dsn, run(main()))
    assert final["attempt"] == 4
    assert [e["attempt"] for e in final["errors"]] == [1, 2, 3, 4]
    assert final["errors"][-1]["error"] == "ValueError: attempt 4"
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    for n, gap in enumerate(gaps, start=1):
        low = base * 2 ** (n - 1)
        assert low <= gap <= low * 1.25 + 0.5, (n, gap, gaps)


def test_snooze_does_not_use_up_attempts(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    seen: list[int] = []

    @client.task(Act)
    async def act(job: awa_fast.Job[Act]) -> Any:
        seen.append(job.attempt)
        return Snooze(0) if len(seen) < 5 else None

    async def main() -> int:
        async with client:
            row = await client.insert(Act("x"), max_attempts=2)
            await run_until(
                client,
                {"default": 1},
                lambda: job(dsn, row.id)["state"] == "completed",
                promote_interval=0.01,
            )
            return row.id

    final = job(dsn, run(main()))
    assert seen == [1, 1, 1, 1, 1]
    assert final["attempt"] == 1


def test_run_at_in_the_past_and_retries_run_again(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Act)
    async def act(job: awa_fast.Job[Act]) -> Any:
        return RetryAfter(0) if job.attempt == 1 else None

    async def main() -> int:
        async with client:
            row = await client.insert(Act("x"), run_at=datetime.now(UTC) - timedelta(seconds=5))
            await run_until(
                client,
                {"default": 1},
                lambda: job(dsn, row.id)["state"] == "completed",
                promote_interval=0.01,
            )
            return row.id

    assert job(dsn, run(main()))["attempt"] == 2
