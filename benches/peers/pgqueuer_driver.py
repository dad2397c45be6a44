"""PgQueuer peer driver (runs in the pgqueuer venv: pgqueuer + asyncpg).

Settings and why:
* Schema: ``Queries.install()`` -- what ``pgq install`` runs; default
  durability ``durable`` (all tables LOGGED), so no durability shortcut.
* Insert: one ``Queries.enqueue(list, list, list)`` call per 10k jobs -- the
  documented batch form (lists => a single INSERT ... SELECT unnest(...)).
* Worker: ``PgQueuer(AsyncpgDriver(conn))`` on one asyncpg connection, as in
  PgQueuer's README, run with ``batch_size=BATCH_SIZE`` (each dequeue claims up
  to that many jobs; completions are logged through a JobStatusLogBuffer of the
  same size, i.e. one DELETE+log INSERT per batch) and ``max_concurrent_tasks``
  left unlimited. PgQueuer's throughput advice is to raise batch_size; 500 was
  the brief's setting (override with PGQ_BATCH_SIZE).
* ``--concurrency n`` (a share of the queue's N = n x ``--processes``): the entrypoint's
  ``concurrency_limit=N``, which PgQueuer's concurrency and tuning guides give for capping
  a job type: "at most N jobs run across your entire fleet", enforced in the dequeue SQL
  (every worker declares the same N). Not ``run(max_concurrent_tasks=)``: the guides call
  it a per-process safety ceiling, and it must be at least twice the batch size, so it
  cannot say 1 a process. The batch shrinks to ``max(1, n // 2)`` (at most
  PGQ_BATCH_SIZE): a seat stays taken until the completion log buffer (flushed at
  batch_size entries or every 0.1 s) deletes the job, so a batch beyond the worker's
  share would leave seats held by finished jobs until the timer; half the share lets one
  half's completions flush while the other half runs, PgQueuer's own two-batches rule.
* ``latency``: the producer calls ``Queries.enqueue(entrypoint, payload)`` once per
  job (one INSERT, autocommit; PgQueuer's insert trigger NOTIFYs the worker). The
  payload is the job's sequence number.
* ``retry``: the handler raises ``pgqueuer.RetryRequested(delay=timedelta(0))`` when
  ``job.attempts == 0`` -- PgQueuer's database-level retry (re-queued with a bumped
  ``execute_after`` and ``attempts``); 0 is the smallest delay it takes.
* ``scheduled``: one ``enqueue`` call per 10k jobs with ``execute_after`` = the time
  left until the due moment (PgQueuer adds it to the database's ``now()``).
* Completion: PgQueuer deletes a job from ``pgqueuer`` when it succeeds
  (``log_jobs``), so the harness counts ``N - count(*) FROM pgqueuer``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common
import asyncpg
from pgqueuer import PgQueuer, RetryRequested
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries

BATCH_SIZE = int(os.environ.get("PGQ_BATCH_SIZE", "500"))
ENTRYPOINT = "bench"


def limits(args) -> tuple[int, int]:
    """``(concurrency_limit, batch_size)`` for the run: 0 (unlimited) and BATCH_SIZE unless
    ``--concurrency`` asks for a limit."""
    if not args.concurrency:
        return 0, BATCH_SIZE
    return args.concurrency * args.processes, min(BATCH_SIZE, max(1, args.concurrency // 2))


async def insert_bulk(q: Queries, jobs: int, due: float | None = None) -> None:
    chunk = 10_000
    for start in range(0, jobs, chunk):
        n = min(chunk, jobs - start)
        payloads = [str(start + i).encode() for i in range(n)]
        after = None
        if due is not None:
            after = [dt.timedelta(seconds=max(0.0, due - time.time()))] * n
        await q.enqueue([ENTRYPOINT] * n, payloads, [0] * n, after)


async def produce(args) -> None:
    conn = await asyncpg.connect(args.database_url)
    try:
        q = Queries(AsyncpgDriver(conn))

        async def insert_one(seq: int) -> None:
            await q.enqueue(ENTRYPOINT, str(seq).encode())

        await _common.produce_one_by_one(insert_one, args.rate, args.jobs)
    finally:
        await conn.close()


async def schedule(args) -> None:
    conn = await asyncpg.connect(args.database_url)
    try:
        t0 = time.perf_counter()
        await insert_bulk(Queries(AsyncpgDriver(conn)), args.jobs, due=args.due)
        t1 = time.perf_counter()
    finally:
        await conn.close()
    _common.emit({"event": "schedule", "insert_s": t1 - t0})


async def setup(args) -> None:
    limit, batch_size = limits(args)
    config = {"batch_size": batch_size, "driver": "asyncpg, 1 connection"}
    if limit:
        config["concurrency_limit"] = limit
    conn = await asyncpg.connect(args.database_url)
    try:
        q = Queries(AsyncpgDriver(conn))
        t0 = time.perf_counter()
        await q.install()
        t1 = time.perf_counter()
        await insert_bulk(q, args.jobs)
        t2 = time.perf_counter()
    finally:
        await conn.close()
    _common.emit(
        {
            "event": "setup",
            "version": _common.version_of("pgqueuer"),
            "install_s": t1 - t0,
            "insert_s": t2 - t1,
            "config": config,
        }
    )


async def work(args) -> None:
    ctl = _common.Control()
    conn = await asyncpg.connect(args.database_url)
    pgq = PgQueuer(AsyncpgDriver(conn))
    bench_body = _common.Bench(args)
    limit, batch_size = limits(args)

    @pgq.entrypoint(ENTRYPOINT, concurrency_limit=limit)
    async def bench(job) -> None:
        if bench_body.fail_first(job.attempts == 0):
            raise RetryRequested(delay=dt.timedelta(0), reason="first attempt fails")
        await bench_body.run(int(job.payload) if job.payload else None)

    _common.emit({"event": "ready"})
    await ctl.go.wait()
    if not ctl.stop.is_set():
        runner = asyncio.create_task(pgq.run(batch_size=batch_size))
        await ctl.stop.wait()
        pgq.shutdown.set()  # graceful: finish in-flight jobs, flush the log buffer
        try:
            await asyncio.wait_for(runner, 30)
        except Exception as exc:  # pragma: no cover - reported, not fatal
            print(f"pgqueuer shutdown: {exc!r}", file=sys.stderr)
    await conn.close()
    _common.emit({"event": "work", **bench_body.report(), **_common.pid_info()})


def main() -> None:
    _common.run_phase({"setup": setup, "work": work, "produce": produce, "schedule": schedule})


if __name__ == "__main__":
    main()
