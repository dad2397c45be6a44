"""The app of the outage and dead-host tests: each run of a job is a row of the test's
table ``runs`` (job, attempt, run lease, pid), written as its handler starts, waiting out
an outage to be written. Tests count a job's runs from the rows."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import psycopg

import awa_fast

client = awa_fast.AsyncClient(os.environ.get("AWA_FAST_TEST_APP_DSN", "postgresql:///unset"))
RECORD_WITHIN = 120.0  # seconds a run waits for the database to be back to record itself
# Set in a host's environment: every nap there lasts this long (a host whose jobs hang).
NAP = "AWA_FAST_TEST_NAP"


@dataclass
class Nap:
    seconds: float


@dataclass
class Hold:
    """Runs until the test's table ``released`` has a row."""


def record(job: awa_fast.Job[object]) -> None:
    """One row for this run; while the database is out of reach, tried again."""
    given_up = time.monotonic() + RECORD_WITHIN
    while True:
        try:
            with psycopg.connect(client.dsn, autocommit=True, connect_timeout=2) as conn:
                conn.execute(
                    "INSERT INTO runs (job_id, attempt, run_lease, pid) VALUES (%s, %s, %s, %s)",
                    (job.id, job.attempt, job.run_lease, os.getpid()),
                )
            return
        except psycopg.OperationalError:
            if time.monotonic() > given_up:
                raise
            time.sleep(0.2)


@client.task(Nap)
async def nap(job: awa_fast.Job[Nap]) -> None:
    await asyncio.to_thread(record, job)
    await asyncio.sleep(float(os.environ.get(NAP, job.args.seconds)))


@client.task(Hold)
async def hold(job: awa_fast.Job[Hold]) -> None:
    await asyncio.to_thread(record, job)
    async with await psycopg.AsyncConnection.connect(client.dsn, autocommit=True) as conn:
        while True:
            cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM released)")
            if (await cur.fetchone()) == (True,):
                return
            await asyncio.sleep(0.02)
