"""A handler that raises a BaseException (SystemExit, KeyboardInterrupt, one of its own)
fails its attempt at once, with the exception as the error, in a forked pool and in the
in-process runner, async or sync; the jobs its worker had not started yet are not
charged an attempt. Before, such an attempt stayed running until the heartbeat sweep."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import awa_fast
from tests.helpers import job, wait_until
from tests.runtime.work.pool.endings_app import RAISES, End, SyncEnd

APP = "tests.runtime.work.pool.endings_app"
QUEUED = 3  # sync jobs claimed with the ending one, waiting behind it in its worker


def _run_ending(
    serve: Any, dsn: str, args: End | SyncEnd, *serve_args: str, in_process: bool = False
) -> dict[str, Any]:
    """Insert ``args`` (first to run) and QUEUED sync jobs behind it, serve them, and
    return where each ran: {"ending": job row, "raised_on": pid, "others": [pids]}."""
    with awa_fast.Client(dsn) as client:
        ending = client.insert(args, priority=1).id
        others = client.insert_many([SyncEnd("record") for _ in range(QUEUED)])
    serve(*serve_args, app=APP, in_process=in_process)
    # A failure recorded: the handler's own at once, or "heartbeat stale" ~30 s later.
    wait_until(
        lambda: bool(job(dsn, ending)["errors"]),
        timeout=60,
        what="the failure",
        explain=lambda: job(dsn, ending),
    )
    wait_until(
        lambda: all(job(dsn, i)["state"] == "completed" for i in others),
        timeout=60,
        what="the jobs behind it",
    )
    for i in others:
        row = job(dsn, i)
        assert (row["attempt"], row["errors"]) == (1, []), row
    with psycopg.connect(dsn) as conn:
        [(raised_on,)] = conn.execute("SELECT pid FROM calls WHERE note = 'raising'").fetchall()
        ran_on = conn.execute("SELECT pid FROM calls WHERE job_id = ANY(%s)", (others,))
        return {"ending": job(dsn, ending), "raised_on": raised_on, "others": ran_on.fetchall()}


def _assert_failed_attempt(row: dict[str, Any], how: str) -> None:
    """The first attempt failed with the handler's exception (the job may be on its next
    attempt by now)."""
    first = row["errors"][0]
    assert first["attempt"] == 1
    assert first["error"] == f"{RAISES[how].__name__}: {how} from job {row['id']}", first


@pytest.mark.parametrize("args_type", [End, SyncEnd])
@pytest.mark.parametrize("how", ["exit", "interrupt", "halt"])
def test_in_the_pool_a_base_exception_fails_the_attempt_and_charges_no_other(
    serve: Any, dsn: str, how: str, args_type: type[End | SyncEnd]
) -> None:
    """An exit or interrupt retires the worker (its unstarted jobs run on the replacement);
    a BaseException of the handler's own leaves it running them."""
    ran = _run_ending(serve, dsn, args_type(how), "--processes", "1", "--queue", "default=8")
    _assert_failed_attempt(ran["ending"], how)
    pids = {pid for (pid,) in ran["others"]}
    if how == "halt":
        assert pids == {ran["raised_on"]}
    else:
        assert ran["raised_on"] not in pids


@pytest.mark.parametrize("args_type", [End, SyncEnd])
@pytest.mark.parametrize("how", ["exit", "halt"])
def test_in_process_a_base_exception_fails_the_attempt_and_the_runner_carries_on(
    serve: Any, dsn: str, how: str, args_type: type[End | SyncEnd]
) -> None:
    ran = _run_ending(serve, dsn, args_type(how), in_process=True)
    _assert_failed_attempt(ran["ending"], how)
    assert {pid for (pid,) in ran["others"]} == {ran["raised_on"]}


def test_a_worker_that_dies_abruptly_gives_back_the_jobs_it_never_started(
    serve: Any, dsn: str
) -> None:
    """``os._exit`` in a sync handler: its own attempt is lost (and spent), the sync jobs
    queued behind it in the same worker go back unspent and run on the replacement."""
    ran = _run_ending(serve, dsn, SyncEnd("abort"), "--processes", "1", "--queue", "default=8")
    first = ran["ending"]["errors"][0]
    assert first["attempt"] == 1
    assert "exit" in first["error"] or "70" in first["error"], first
    assert ran["raised_on"] not in {pid for (pid,) in ran["others"]}
