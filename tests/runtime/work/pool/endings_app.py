"""Handlers whose attempts end in ways a handler should not end them: a BaseException
(``SystemExit``, ``KeyboardInterrupt``, one of its own) on their first attempt, async or
sync; and a sync handler that holds a lot of memory until the test lets it go."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psycopg

import awa_fast
from tests.runtime.work.pool.app import record

client = awa_fast.AsyncClient(os.environ.get("AWA_FAST_TEST_APP_DSN", "postgresql:///unset"))


class Halt(BaseException):
    """A BaseException of a handler's own, neither an exit nor an interrupt."""


RAISES: dict[str, type[BaseException]] = {
    "exit": SystemExit,
    "interrupt": KeyboardInterrupt,
    "halt": Halt,
}


@dataclass
class End:
    how: str  # a key of RAISES raised, or "abort", on the first attempt; "record": just record


@dataclass
class SyncEnd:
    how: str


def _end(job: awa_fast.Job[Any]) -> None:
    if job.args.how == "abort" and job.attempt == 1:
        record(job, "raising")
        os._exit(70)  # the worker dies with no outcome reported: as a segfault would
    if job.args.how in RAISES and job.attempt == 1:
        record(job, "raising")
        raise RAISES[job.args.how](f"{job.args.how} from job {job.id}")
    record(job)


@client.task(End)
async def end(job: awa_fast.Job[End]) -> None:
    _end(job)


@client.task(SyncEnd)
def sync_end(job: awa_fast.Job[SyncEnd]) -> None:
    _end(job)


@dataclass
class Hog:
    mb: int


@client.task(Hog)
def hog(job: awa_fast.Job[Hog]) -> None:
    """Hold ``mb`` MB (written, so resident) until the test records 'release' for this
    job: the worker's loop is blocked meanwhile, as any sync handler blocks it."""
    held = b"x" * (job.args.mb << 20)
    record(job, "holding")
    with psycopg.connect(client.dsn, autocommit=True) as conn:
        query = "SELECT 1 FROM calls WHERE job_id = %s AND note = 'release'"
        while conn.execute(query, (job.id,)).fetchone() is None:
            conn.execute("SELECT pg_sleep(0.05)")
    del held
    record(job)
