"""The app the pool tests serve: handlers that record each call (job, pid, attempt) in the
test database, so tests count real handler executions across processes."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from dataclasses import dataclass
from typing import Any

import psycopg

import awa_fast

client = awa_fast.AsyncClient(os.environ.get("AWA_FAST_TEST_APP_DSN", "postgresql:///unset"))
_conn: psycopg.Connection[tuple[object, ...]] | None = None
# The task that runs the "first" job, once it has started: the worker pushes a job's
# outcome before that task ends.
_first_task: asyncio.Future[asyncio.Task[Any]] | None = None


@dataclass
class Step:
    do: str
    seconds: float = 0.0


def record(job: awa_fast.Job[Any], note: str = "done") -> None:
    """One row per call, on this process's own connection (opened after the fork, and
    reopened once if the server restarted under it)."""
    global _conn
    for attempt in range(2):
        try:
            if _conn is None or _conn.closed:
                _conn = psycopg.connect(client.dsn, autocommit=True)
            _conn.execute(
                "INSERT INTO calls (job_id, pid, attempt, note) VALUES (%s, %s, %s, %s)",
                (job.id, os.getpid(), job.attempt, note),
            )
            return
        except psycopg.OperationalError:
            _conn = None
            if attempt:
                raise


def _first_task_started() -> asyncio.Future[asyncio.Task[Any]]:
    global _first_task
    if _first_task is None:
        _first_task = asyncio.get_running_loop().create_future()
    return _first_task


@client.task(Step)
async def step(job: awa_fast.Job[Step]) -> None:
    match job.args.do:
        case "record":
            pass
        case "sleep":
            record(job, "started")
            await asyncio.sleep(job.args.seconds)
        case "hang_once" if job.attempt == 1:
            record(job, "started")
            await asyncio.sleep(3600)
        case "exit_once" if job.attempt == 1:
            record(job, "exiting")
            os._exit(1)
        case "collector":  # as the process running this handler collects garbage
            record(job, f"young {gc.get_threshold()[0]}, frozen {gc.get_freeze_count() > 0}")
            return
        case "first":
            task = asyncio.current_task()
            assert task is not None
            _first_task_started().set_result(task)
        case "die_after_first" if job.attempt == 1:
            await asyncio.wait([await _first_task_started()])  # its outcome is pushed
            record(job, "exiting")
            os._exit(1)
    record(job)


@dataclass
class Burn:
    ms: float


@client.task(Burn)
def burn(job: awa_fast.Job[Burn]) -> None:
    """Pure-Python CPU for ``ms`` milliseconds (a sync handler: runs inline)."""
    until = time.perf_counter() + job.args.ms / 1000
    while time.perf_counter() < until:
        pass
    record(job)


@dataclass
class Spin:
    seconds: float


@client.task(Spin)
def spin(job: awa_fast.Job[Spin]) -> None:
    """A sync handler stuck in a CPU loop on its first attempt, ignoring cancellation
    (it records once that it saw its cancel flag, and carries on)."""
    if job.attempt == 1:
        record(job, "started")
        until = time.perf_counter() + job.args.seconds
        seen = False
        while time.perf_counter() < until:
            if not seen and job.is_cancelled():
                record(job, "flagged")
                seen = True
    record(job)
