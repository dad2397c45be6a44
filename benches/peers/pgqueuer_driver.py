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
* Completion: PgQueuer deletes a job from ``pgqueuer`` when it succeeds
  (``log_jobs``), so the harness counts ``N - count(*) FROM pgqueuer``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common
import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries

BATCH_SIZE = int(os.environ.get("PGQ_BATCH_SIZE", "500"))
ENTRYPOINT = "bench"


async def setup(args) -> None:
    conn = await asyncpg.connect(args.database_url)
    try:
        q = Queries(AsyncpgDriver(conn))
        t0 = time.perf_counter()
        await q.install()
        t1 = time.perf_counter()
        chunk = 10_000
        for start in range(0, args.jobs, chunk):
            n = min(chunk, args.jobs - start)
            await q.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
        t2 = time.perf_counter()
    finally:
        await conn.close()
    _common.emit(
        {
            "event": "setup",
            "version": _common.version_of("pgqueuer"),
            "install_s": t1 - t0,
            "insert_s": t2 - t1,
            "config": {"batch_size": BATCH_SIZE, "driver": "asyncpg, 1 connection"},
        }
    )


async def work(args) -> None:
    ctl = _common.Control()
    conn = await asyncpg.connect(args.database_url)
    pgq = PgQueuer(AsyncpgDriver(conn))
    handled = 0
    iters = args.cpu_iterations if args.scenario == "cpu" else 0

    @pgq.entrypoint(ENTRYPOINT)
    async def bench(job) -> None:
        nonlocal handled
        if iters:
            _common.burn_iterations(iters)
        handled += 1

    _common.emit({"event": "ready"})
    await ctl.go.wait()
    if not ctl.stop.is_set():
        runner = asyncio.create_task(pgq.run(batch_size=BATCH_SIZE))
        await ctl.stop.wait()
        pgq.shutdown.set()  # graceful: finish in-flight jobs, flush the log buffer
        try:
            await asyncio.wait_for(runner, 30)
        except Exception as exc:  # pragma: no cover - reported, not fatal
            print(f"pgqueuer shutdown: {exc!r}", file=sys.stderr)
    await conn.close()
    _common.emit({"event": "work", "handled": handled, **_common.pid_info()})


def main() -> None:
    args = _common.parse_args()
    asyncio.run(setup(args) if args.phase == "setup" else work(args))


if __name__ == "__main__":
    main()
