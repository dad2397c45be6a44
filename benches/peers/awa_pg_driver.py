"""Awa (PyPI ``awa-pg``, ``import awa``) peer driver (runs in the awa-pg venv).

Settings and why:
* Schema: ``client.migrate()`` then ``client.install_queue_storage()``. A fresh
  ``migrate()`` in 0.6.9 leaves ``awa.storage_transition_state`` on the
  ``canonical`` engine; Awa's README describes the queue-storage engine as the
  0.6 engine (append-only ready entries, batched receipts) and
  ``install_queue_storage`` as the "explicit queue-storage-only setup" path, so
  we activate it. Its fast COPY path requires it.
* Insert: ``enqueue_many_copy`` -- the README's high-volume COPY ingestion
  surface for queue storage (``insert_many_copy`` is the canonical-storage
  compatibility path).
* Worker: ``AsyncClient(url)`` (default pool, max_connections=10) and
  ``start(queues=[("bench", 1000)])`` -- one queue with ~1000 max workers so
  the Rust runtime always has claimable capacity; other knobs at defaults.
* ``--concurrency n``: ``start(queues=[("bench", n)])``, the queue's max workers in
  this process (Awa's per-queue concurrency, counted per client), in place of 1000.
* ``latency``: the producer calls ``client.insert(BenchJob(seq), queue=...)`` once
  per job (one transaction each, the single-job insert of the SDK).
* ``retry``: the handler returns ``awa.RetryAfter(RETRY_AFTER_S)`` on attempt 1.
  The retried job is parked as ``retryable`` and comes back when the maintenance
  leader promotes it, so the worker runs with ``promote_interval_ms=
  RETRY_PROMOTE_MS`` (50, as awa-fast's own retry scenario uses).
* ``scheduled``: ``enqueue_many_copy(..., run_at=due)``; default start options, so
  promotion runs at Awa's default interval.
* Completion: the ``awa.jobs``/``awa.terminal_jobs`` views are far too slow
  to poll, so the harness sums the queue-storage receipt tables directly:
  completed receipts in ``awa.receipt_completion_batches`` (minus tombstoned
  ones), rows in ``awa.done_entries``, and the counts Awa's maintenance moved to
  ``awa.queue_terminal_rollups`` when it pruned a ring slot (the queue ring moves
  to a new slot every second and TRUNCATEs a sealed slot once all its jobs are
  finished).
* Known limit (awa-pg 0.6.9): both ``retry`` and ``scheduled`` depend on the
  maintenance leader promoting due jobs out of ``awa.deferred_jobs``, 4,096 per
  statement with 18 bind parameters per job. With more than 3,640 jobs due at once
  that is over Postgres' 65,535 parameters, sqlx refuses the statement, the
  promotion rolls back and is retried on the same rows forever (the error goes to
  ``tracing``, which the Python module does not print). The harness spots this
  through ``Peer.stall_sql`` and reports the run as stalled; see benches/README.md.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common
import awa

QUEUE = "bench"
MAX_WORKERS = int(os.environ.get("AWA_MAX_WORKERS", "1000"))
RETRY_AFTER_S = float(os.environ.get("AWA_RETRY_AFTER_S", "0"))
RETRY_PROMOTE_MS = int(os.environ.get("AWA_RETRY_PROMOTE_MS", "50"))


def max_workers(args) -> int:
    return args.concurrency or MAX_WORKERS


@dataclasses.dataclass
class BenchJob:
    seq: int


async def insert_bulk(client, jobs: int, run_at: dt.datetime | None = None) -> None:
    chunk = 10_000
    for start in range(0, jobs, chunk):
        n = min(chunk, jobs - start)
        batch = [BenchJob(start + i) for i in range(n)]
        await client.enqueue_many_copy(batch, queue=QUEUE, run_at=run_at)


async def produce(args) -> None:
    client = awa.AsyncClient(args.database_url)

    async def insert_one(seq: int) -> None:
        await client.insert(BenchJob(seq), queue=QUEUE)

    try:
        await _common.produce_one_by_one(insert_one, args.rate, args.jobs)
    finally:
        await client.close()


async def schedule(args) -> None:
    client = awa.AsyncClient(args.database_url)
    t0 = time.perf_counter()
    await insert_bulk(client, args.jobs, run_at=dt.datetime.fromtimestamp(args.due, dt.UTC))
    t1 = time.perf_counter()
    await client.close()
    _common.emit({"event": "schedule", "insert_s": t1 - t0})


async def setup(args) -> None:
    client = awa.AsyncClient(args.database_url)
    t0 = time.perf_counter()
    await client.migrate()
    await client.install_queue_storage()
    t1 = time.perf_counter()
    await insert_bulk(client, args.jobs)
    t2 = time.perf_counter()
    await client.close()
    _common.emit(
        {
            "event": "setup",
            "version": _common.version_of("awa-pg"),
            "install_s": t1 - t0,
            "insert_s": t2 - t1,
            "config": {"queues": [[QUEUE, max_workers(args)]], "engine": "queue_storage"},
        }
    )


async def work(args) -> None:
    ctl = _common.Control()
    client = awa.AsyncClient(args.database_url)
    bench_body = _common.Bench(args)
    retry = args.scenario == "retry"
    # AWA_RETRY_PROMOTE_MS=0 leaves promote_interval_ms at Awa's default.
    options = {"promote_interval_ms": RETRY_PROMOTE_MS} if retry and RETRY_PROMOTE_MS else {}

    @client.task(BenchJob, queue=QUEUE)
    async def bench(job):
        if bench_body.fail_first(job.attempt == 1):
            return awa.RetryAfter(RETRY_AFTER_S)
        await bench_body.run(job.args.seq)
        return None

    _common.emit({"event": "ready"})
    await ctl.go.wait()
    if not ctl.stop.is_set():
        await client.start(queues=[(QUEUE, max_workers(args))], **options)
        await ctl.stop.wait()
        try:
            await client.shutdown(timeout_ms=10_000)
        except Exception as exc:  # pragma: no cover
            print(f"awa shutdown: {exc!r}", file=sys.stderr)
    await client.close()
    _common.emit({"event": "work", **bench_body.report(), **_common.pid_info()})


def main() -> None:
    _common.run_phase({"setup": setup, "work": work, "produce": produce, "schedule": schedule})


if __name__ == "__main__":
    main()
