"""Chancy peer driver (runs in the chancy venv: chancy + psycopg 3 + psycopg_pool).

Settings and why:
* Schema: ``Chancy.migrate()`` (what ``chancy misc migrate`` runs); the default plugins
  (leadership, pruner, recovery, metrics, workflows) left on, as shipped.
* Queue: ``Queue("bench", executor=Chancy.Executor.Async, concurrency=CONCURRENCY,
  eager_polling=True)``. The handlers are coroutines, which Chancy's docs give the
  AsyncExecutor for ("large numbers of IO-bound jobs ... without the high overhead of new
  processes or threads"). ``concurrency`` (1,000; awa-pg's 1,000 workers) bounds both the
  jobs running at once and each fetch. ``eager_polling``: a worker fetches again as soon
  as a job completes, Chancy's setting for queues "where jobs are expected to be
  continuously available"; without it a worker that has emptied its fetch waits for the
  queue's ``polling_interval`` (5 s, left as shipped) or a push.
  ``--concurrency n`` declares the queue with ``concurrency=n`` in place of 1,000: the
  jobs each worker runs at once (every worker reads the one declaration).
* Insert: ``Chancy.push_many(jobs, batch_size=1000)`` -- one transaction a batch.
* Worker: ``Worker(chancy)``, its other settings as shipped: finished jobs are written in
  batches once a second (``send_outgoing_interval``), so a run's last jobs count as done up
  to a second after they ran. The pool holds up to ``POOL_MAX`` connections (10, as
  shipped).
* ``latency``: the producer calls ``Chancy.push(job)`` once per job (one INSERT in its
  own transaction, with the NOTIFY Chancy sends on a push).
* ``retry``: jobs carry ``max_attempts=2``; the handler raises on its first attempt
  (``job.attempts == 0``). Chancy marks it ``retrying``, due at once, with no retry
  plugin, its smallest delay; eager polling fetches it again.
* ``scheduled``: ``push_many`` of jobs with ``scheduled_at`` = the due moment. The push's
  NOTIFY comes before they are due, so an idle worker finds them at its next poll
  (``polling_interval``, 5 s as shipped) or sooner if a completion wakes it.
* Completion: ``count(*) FROM chancy_jobs WHERE state IN ('succeeded', 'failed')``.

No ``from __future__ import annotations`` here: Chancy hands a job to the parameter
annotated with the ``QueuedJob`` class itself, not with a string.
"""

import datetime as dt
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common
from chancy import Chancy, Job, Queue, QueuedJob, Worker

CONCURRENCY = int(os.environ.get("CHANCY_CONCURRENCY", "1000"))
POOL_MAX = int(os.environ.get("CHANCY_POOL_MAX", "10"))
QUEUE = "bench"
BODY: _common.Bench | None = None  # the work phase's handler body


async def bench(seq: int, *, job: QueuedJob) -> None:
    if BODY is not None:
        if BODY.fail_first(job.attempts == 0):
            raise RuntimeError("the first attempt fails by design")
        await BODY.run(seq)


def make_app(url: str) -> Chancy:
    return Chancy(url, max_connection_pool_size=POOL_MAX)


def bench_job(seq: int, *, scenario: str, due: float | None = None) -> Job:
    job = Job.from_func(bench, queue=QUEUE, kwargs={"seq": seq})
    if scenario == "retry":
        job = job.with_max_attempts(2)
    if due is not None:
        job = job.with_scheduled_at(dt.datetime.fromtimestamp(due, dt.UTC))
    return job


async def insert_bulk(chancy: Chancy, jobs: int, *, scenario: str, due: float | None = None):
    batch = [bench_job(seq, scenario=scenario, due=due) for seq in range(jobs)]
    async for _ in chancy.push_many(batch, batch_size=1000):
        pass


async def produce(args) -> None:
    async with make_app(args.database_url) as chancy:

        async def insert_one(seq: int) -> None:
            await chancy.push(bench_job(seq, scenario=args.scenario))

        await _common.produce_one_by_one(insert_one, args.rate, args.jobs)


async def schedule(args) -> None:
    async with make_app(args.database_url) as chancy:
        t0 = time.perf_counter()
        await insert_bulk(chancy, args.jobs, scenario=args.scenario, due=args.due)
        t1 = time.perf_counter()
    _common.emit({"event": "schedule", "insert_s": t1 - t0})


async def setup(args) -> None:
    async with make_app(args.database_url) as chancy:
        t0 = time.perf_counter()
        await chancy.migrate()
        await chancy.declare(
            Queue(
                QUEUE,
                executor=Chancy.Executor.Async,
                concurrency=args.concurrency or CONCURRENCY,
                eager_polling=True,
            )
        )
        t1 = time.perf_counter()
        await insert_bulk(chancy, args.jobs, scenario=args.scenario)
        t2 = time.perf_counter()
    _common.emit(
        {
            "event": "setup",
            "version": _common.version_of("chancy"),
            "install_s": t1 - t0,
            "insert_s": t2 - t1,
            "config": {
                "executor": "async",
                "concurrency": args.concurrency or CONCURRENCY,
                "eager_polling": True,
                "pool_max": POOL_MAX,
            },
        }
    )


async def work(args) -> None:
    global BODY
    ctl = _common.Control()
    BODY = _common.Bench(args)
    async with make_app(args.database_url) as chancy:
        _common.emit({"event": "ready"})
        await ctl.go.wait()
        if not ctl.stop.is_set():
            worker = Worker(chancy, register_signal_handlers=False)
            await worker.start()
            await ctl.stop.wait()
            if not await worker.stop(timeout=30):
                print("chancy shutdown: executors did not drain in 30 s", file=sys.stderr)
    _common.emit({"event": "work", **BODY.report(), **_common.pid_info()})


def main() -> None:
    _common.run_phase({"setup": setup, "work": work, "produce": produce, "schedule": schedule})


if __name__ == "__main__":
    main()
