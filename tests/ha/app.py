"""The app of the failover tests and benchmark: each run of a job records itself in the
table ``runs`` of the database it runs on, on whichever server is the primary by then.

A job's args carry a token, unique to the job, which the producer chose: a job id may be
handed out again after an asynchronous standby's promotion (the ids of inserts it never
received), a token never is. A run records (token, run lease) once, however often the
record is tried again across a failover, and the moment it started by the host's clock.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg

import awa_fast

client = awa_fast.AsyncClient(os.environ.get("AWA_FAST_TEST_APP_DSN", "postgresql:///unset"))
RECORD_WITHIN = 120.0  # seconds a run waits for a primary to record itself on

RUNS = """
CREATE TABLE runs (
    token text NOT NULL,
    run_lease bigint NOT NULL,
    job_id bigint NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    started double precision NOT NULL,
    PRIMARY KEY (token, run_lease)
)
"""


@dataclass
class Work:
    token: str
    seconds: float = 0.0


_lock = threading.Lock()
_conn: list[psycopg.Connection[Any]] = []  # this process's, once made


def record(job: awa_fast.Job[Work], started: float) -> None:
    """This run's row, on one connection per process; while there is no primary, tried
    again on a new one."""
    given_up = time.monotonic() + RECORD_WITHIN
    while True:
        try:
            with _lock:
                if not _conn or _conn[0].closed:
                    _conn[:] = [psycopg.connect(client.dsn, autocommit=True, connect_timeout=2)]
                _conn[0].execute(
                    "INSERT INTO runs (token, run_lease, job_id, attempt, pid, started)"
                    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (job.args.token, job.run_lease, job.id, job.attempt, os.getpid(), started),
                )
            return
        except psycopg.Error:
            with _lock:
                if _conn:
                    _conn.pop().close()
            if time.monotonic() > given_up:
                raise
            time.sleep(0.1)


@client.task(Work)
async def work(job: awa_fast.Job[Work]) -> None:
    await asyncio.to_thread(record, job, time.time())
    if job.args.seconds:
        await asyncio.sleep(job.args.seconds)
