"""10,000 jobs, two runner processes (each with its concurrent claimers) claiming at once:
each job's handler runs once."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psycopg

import awa_fast
from tests.helpers import run, run_until, settled, states


@dataclass
class Count:
    n: int


def _runner_process(dsn: str) -> None:
    """Run until the database is drained, then record every handler call in `calls`."""
    calls: list[int] = []
    client = awa_fast.AsyncClient(dsn)

    @client.task(Count)
    async def count(job: awa_fast.Job[Count]) -> None:
        calls.append(job.id)

    async def main() -> None:
        async with client:
            await run_until(client, {"default": 200}, lambda: settled(dsn), timeout=90)

    run(main())
    with (
        psycopg.connect(dsn) as conn,
        conn.cursor() as cur,
        cur.copy("COPY calls (job_id, pid) FROM STDIN") as copy,
    ):
        for job_id in calls:
            copy.write_row((job_id, os.getpid()))


def test_ten_thousand_jobs_two_claimers_each_once(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE calls (job_id bigint, pid int)")
    with awa_fast.Client(dsn) as client:
        client.insert_many([Count(i) for i in range(10_000)])
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _runner_process(dsn)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    assert states(dsn) == {"completed": 10_000}
    with psycopg.connect(dsn) as conn:
        total, distinct, processes = conn.execute(
            "SELECT count(*), count(DISTINCT job_id), count(DISTINCT pid) FROM calls"
        ).fetchone()
    assert (total, distinct) == (10_000, 10_000)
    assert processes == 2
