"""A handler whose error, progress or metadata jsonb cannot hold still ends its attempt at
once: the text of an error is stored escaped, and progress or metadata that cannot be
stored fail the attempt, naming the field. Before, the outcome never reached the ring and
the job stayed running until the heartbeat sweep. The same holds for a result or an
exception that cannot become an outcome as it is: each ends the attempt, and says why."""

from __future__ import annotations

import inspect
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


def _first_attempt(dsn: str, handle: Callable[[awa_fast.Job[Any]], Any]) -> dict[str, Any]:
    """Run one job through ``handle`` (its result awaited if need be, and returned as the
    handler's) in-process; the job's row once its first attempt left an error."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(kind="odd", queue="odd")
    async def handler(job: awa_fast.Job[Any]) -> Any:
        result = handle(job)
        return await result if inspect.isawaitable(result) else result

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


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


def _raise(exc: BaseException) -> None:
    raise exc


async def _token_with_a_timeout_of_text(job: awa_fast.Job[Any]) -> awa_fast.WaitForCallback:
    token = await job.register_callback()

    class Token:
        id = token.id
        timeout_seconds = "soon"

    return awa_fast.WaitForCallback(Token())  # type: ignore[arg-type]


# how -> (the handler's step, the state its first attempt ends in, the start of its error)
UNUSABLE: dict[str, tuple[Callable[[awa_fast.Job[Any]], Any], str, str]] = {
    "RetryAfter past 31 years": (
        lambda job: awa_fast.RetryAfter(1e15),
        "retryable",
        "ValidationError: RetryAfter.seconds: must be a number of seconds from 0 to below 1e+09",
    ),
    "Snooze past 31 years": (
        lambda job: awa_fast.Snooze(1e15),
        "retryable",
        "ValidationError: Snooze.seconds: must be a number of seconds from 0 to below 1e+09",
    ),
    "Cancel with a reason not text": (
        lambda job: awa_fast.Cancel(None),  # type: ignore[arg-type]
        "retryable",
        "ValidationError: Cancel.reason: must be a string, got None",
    ),
    "an exception whose str() raises": (
        lambda job: _raise(_UnprintableError()),
        "retryable",
        "_UnprintableError: <exception str() failed>",
    ),
    "progress too large for the ring": (
        lambda job: job.set_progress(50, "z" * 9_000_000),
        "retryable",
        "UnstorableOutcome: progress or metadata not storable: payload of",
    ),
    "progress of a percent as text": (
        lambda job: job.set_progress("50"),  # type: ignore[arg-type]
        "retryable",
        "ValidationError: percent: must be a finite number, got '50'",
    ),
    "progress with a message not text": (
        lambda job: job.set_progress(5, 123),  # type: ignore[arg-type]
        "retryable",
        "ValidationError: message: must be a string or None, got 123",
    ),
    "metadata updates not a dict": (
        lambda job: job.update_metadata([("a", 1)]),  # type: ignore[arg-type]
        "retryable",
        "ValidationError: updates: must be a dict, got list",
    ),
    "a callback token whose timeout is text": (
        _token_with_a_timeout_of_text,
        "failed",
        "handler returned an unusable WaitForCallback: ValueError: could not convert string",
    ),
}


@pytest.mark.parametrize("how", list(UNUSABLE))
def test_a_result_or_exception_that_cannot_be_an_outcome_ends_the_attempt(
    dsn: str, how: str
) -> None:
    handle, state, error_start = UNUSABLE[how]
    row = _first_attempt(dsn, handle)
    states = (state, "available") if state == "retryable" else (state,)
    assert row["state"] in states, row
    [error] = row["errors"]
    assert error["error"].startswith(error_start), error


@pytest.mark.parametrize(
    ("handle", "state"),
    [
        (lambda job: _raise(ValueError("y" * 9_000_000)), "retryable"),
        (lambda job: awa_fast.Cancel("x" * 5_000_000), "cancelled"),
    ],
)
def test_an_error_or_reason_of_megabytes_is_kept_cut_short(
    dsn: str, handle: Callable[[awa_fast.Job[Any]], Any], state: str
) -> None:
    """Every attempt's error is kept on its job, so each is cut to its first 4,000
    characters; before, one of 9 MB did not fit in the ring, and the job stayed running."""
    row = _first_attempt(dsn, handle)
    assert row["state"] in (state, "available"), row
    [error] = row["errors"]
    assert error["error"].endswith(" more characters)"), error["error"][-80:]
    assert 4_000 < len(error["error"]) < 4_100
