"""Procrastinate peer driver (runs in the procrastinate venv: psycopg 3 + pool).

Settings and why:
* Schema: ``app.schema_manager.apply_schema_async()`` (what
  ``procrastinate schema --apply`` runs).
* Insert: ``Task.batch_defer_async`` -- procrastinate's documented bulk defer
  (one multi-row INSERT per call), 1,000 jobs per call.
* Worker: ``app.run_worker_async(concurrency=100, ...)`` -- the brief's ~100
  concurrent async jobs. Procrastinate fetches one job per query, so every job
  needs a pool connection for fetch and one for finish; psycopg_pool's default
  pool (4 connections) would cap throughput, so the connector gets
  ``max_size=POOL_MAX`` (30; two processes stay under max_connections).
  ``listen_notify=True`` (default) and ``delete_jobs="never"`` (default: jobs
  stay with status 'succeeded'). ``wait=True`` and the harness cancels the task
  to stop it, which procrastinate handles as a graceful stop.
* ``--concurrency n``: ``run_worker_async(concurrency=n)``, procrastinate's jobs at once
  per worker, in place of 100 (the pool stays at POOL_MAX).
* ``latency``: the producer calls ``bench.defer_async(seq=...)`` once per job (one
  INSERT; procrastinate's insert trigger NOTIFYs the listening worker).
* ``retry``: the task has ``retry=RetryStrategy(max_attempts=1, wait=0)`` and raises
  when ``context.job.attempts == 0``; ``wait=0`` (re-run as soon as fetched) is the
  smallest delay. A retried job is an UPDATE back to ``todo``, which procrastinate
  does not NOTIFY, so an idle worker only sees it at its next poll
  (``fetch_job_polling_interval``, default 5 s); busy workers fetch again right away.
* ``scheduled``: ``bench.configure(schedule_at=due).batch_defer_async`` per 1,000
  jobs. The insert NOTIFY comes before the jobs are due, so idle workers find them
  at the next poll (default ``fetch_job_polling_interval`` = 5 s, left as shipped).
* Completion: ``count(*) FROM procrastinate_jobs WHERE status IN
  ('todo','doing')`` reaching 0.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common
import procrastinate

CONCURRENCY = int(os.environ.get("PROCRASTINATE_CONCURRENCY", "100"))
POOL_MAX = int(os.environ.get("PROCRASTINATE_POOL_MAX", "30"))
QUEUE = "bench"


def make_app(url: str, body: _common.Bench | None) -> tuple[procrastinate.App, object]:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=url, min_size=min(4, POOL_MAX), max_size=POOL_MAX
        )
    )
    retry = body is not None and body.scenario == "retry"
    strategy = procrastinate.RetryStrategy(max_attempts=1, wait=0) if retry else None

    @app.task(queue=QUEUE, name="bench", pass_context=True, retry=strategy or False)
    async def bench(context, seq: int) -> None:
        if body is not None and body.fail_first(context.job.attempts == 0):
            raise RuntimeError("the first attempt fails by design")
        if body is not None:
            await body.run(seq)

    return app, bench


async def insert_bulk(bench, jobs: int, due: float | None = None) -> None:
    deferrer = bench
    if due is not None:
        deferrer = bench.configure(schedule_at=dt.datetime.fromtimestamp(due, dt.UTC))
    chunk = 1_000
    for start in range(0, jobs, chunk):
        n = min(chunk, jobs - start)
        await deferrer.batch_defer_async(*({"seq": start + i} for i in range(n)))


async def produce(args) -> None:
    app, bench = make_app(args.database_url, None)
    async with app.open_async():

        async def insert_one(seq: int) -> None:
            await bench.defer_async(seq=seq)

        await _common.produce_one_by_one(insert_one, args.rate, args.jobs)


async def schedule(args) -> None:
    app, bench = make_app(args.database_url, None)
    async with app.open_async():
        t0 = time.perf_counter()
        await insert_bulk(bench, args.jobs, due=args.due)
        t1 = time.perf_counter()
    _common.emit({"event": "schedule", "insert_s": t1 - t0})


async def setup(args) -> None:
    app, bench = make_app(args.database_url, None)
    async with app.open_async():
        t0 = time.perf_counter()
        await app.schema_manager.apply_schema_async()
        t1 = time.perf_counter()
        await insert_bulk(bench, args.jobs)
        t2 = time.perf_counter()
    _common.emit(
        {
            "event": "setup",
            "version": _common.version_of("procrastinate"),
            "install_s": t1 - t0,
            "insert_s": t2 - t1,
            "config": {"concurrency": args.concurrency or CONCURRENCY, "pool_max": POOL_MAX},
        }
    )


async def work(args) -> None:
    ctl = _common.Control()
    body = _common.Bench(args)
    app, _ = make_app(args.database_url, body)
    async with app.open_async():
        _common.emit({"event": "ready"})
        await ctl.go.wait()
        if not ctl.stop.is_set():
            runner = asyncio.create_task(
                app.run_worker_async(
                    queues=[QUEUE],
                    concurrency=args.concurrency or CONCURRENCY,
                    wait=True,
                    install_signal_handlers=False,
                )
            )
            await ctl.stop.wait()
            runner.cancel()  # procrastinate turns cancellation into a graceful stop
            try:
                await asyncio.wait_for(runner, 30)
            except (asyncio.CancelledError, Exception) as exc:
                if not isinstance(exc, asyncio.CancelledError):
                    print(f"procrastinate shutdown: {exc!r}", file=sys.stderr)
    _common.emit({"event": "work", **body.report(), **_common.pid_info()})


def main() -> None:
    _common.run_phase({"setup": setup, "work": work, "produce": produce, "schedule": schedule})


if __name__ == "__main__":
    main()
