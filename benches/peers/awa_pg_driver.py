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
* Completion: the ``awa.jobs``/``awa.terminal_jobs`` views are far too slow
  to poll (a count over 20k completed jobs took >100 s), so the harness sums
  the queue-storage receipt tables directly: completed receipts in
  ``awa.receipt_completion_batches`` (minus tombstoned ones) plus rows in
  ``awa.done_entries``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common
import awa

QUEUE = "bench"
MAX_WORKERS = int(os.environ.get("AWA_MAX_WORKERS", "1000"))


@dataclasses.dataclass
class BenchJob:
    seq: int


async def setup(args) -> None:
    client = awa.AsyncClient(args.database_url)
    t0 = time.perf_counter()
    await client.migrate()
    await client.install_queue_storage()
    t1 = time.perf_counter()
    chunk = 10_000
    for start in range(0, args.jobs, chunk):
        n = min(chunk, args.jobs - start)
        await client.enqueue_many_copy([BenchJob(start + i) for i in range(n)], queue=QUEUE)
    t2 = time.perf_counter()
    await client.close()
    _common.emit(
        {
            "event": "setup",
            "version": _common.version_of("awa-pg"),
            "install_s": t1 - t0,
            "insert_s": t2 - t1,
            "config": {"queues": [[QUEUE, MAX_WORKERS]], "engine": "queue_storage"},
        }
    )


async def work(args) -> None:
    ctl = _common.Control()
    client = awa.AsyncClient(args.database_url)
    handled = 0
    iters = args.cpu_iterations if args.scenario == "cpu" else 0

    @client.task(BenchJob, queue=QUEUE)
    async def bench(job) -> None:
        nonlocal handled
        if iters:
            _common.burn_iterations(iters)
        handled += 1

    _common.emit({"event": "ready"})
    await ctl.go.wait()
    if not ctl.stop.is_set():
        await client.start(queues=[(QUEUE, MAX_WORKERS)])
        await ctl.stop.wait()
        try:
            await client.shutdown(timeout_ms=10_000)
        except Exception as exc:  # pragma: no cover
            print(f"awa shutdown: {exc!r}", file=sys.stderr)
    await client.close()
    _common.emit({"event": "work", "handled": handled, **_common.pid_info()})


def main() -> None:
    args = _common.parse_args()
    asyncio.run(setup(args) if args.phase == "setup" else work(args))


if __name__ == "__main__":
    main()
