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
* Completion: ``count(*) FROM procrastinate_jobs WHERE status IN
  ('todo','doing')`` reaching 0.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common
import procrastinate

CONCURRENCY = int(os.environ.get("PROCRASTINATE_CONCURRENCY", "100"))
POOL_MAX = int(os.environ.get("PROCRASTINATE_POOL_MAX", "30"))
QUEUE = "bench"


def make_app(url: str, state: dict) -> tuple[procrastinate.App, object]:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=url, min_size=min(4, POOL_MAX), max_size=POOL_MAX
        )
    )

    @app.task(queue=QUEUE, name="bench")
    async def bench(seq: int) -> None:
        if state["iters"]:
            _common.burn_iterations(state["iters"])
        state["handled"] += 1

    return app, bench


async def setup(args) -> None:
    app, bench = make_app(args.database_url, {"iters": 0, "handled": 0})
    async with app.open_async():
        t0 = time.perf_counter()
        await app.schema_manager.apply_schema_async()
        t1 = time.perf_counter()
        chunk = 1_000
        for start in range(0, args.jobs, chunk):
            n = min(chunk, args.jobs - start)
            await bench.batch_defer_async(*({"seq": start + i} for i in range(n)))
        t2 = time.perf_counter()
    _common.emit(
        {
            "event": "setup",
            "version": _common.version_of("procrastinate"),
            "install_s": t1 - t0,
            "insert_s": t2 - t1,
            "config": {"concurrency": CONCURRENCY, "pool_max": POOL_MAX},
        }
    )


async def work(args) -> None:
    ctl = _common.Control()
    state = {"iters": args.cpu_iterations if args.scenario == "cpu" else 0, "handled": 0}
    app, _ = make_app(args.database_url, state)
    async with app.open_async():
        _common.emit({"event": "ready"})
        await ctl.go.wait()
        if not ctl.stop.is_set():
            runner = asyncio.create_task(
                app.run_worker_async(
                    queues=[QUEUE],
                    concurrency=CONCURRENCY,
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
    _common.emit({"event": "work", "handled": state["handled"], **_common.pid_info()})


def main() -> None:
    args = _common.parse_args()
    asyncio.run(setup(args) if args.phase == "setup" else work(args))


if __name__ == "__main__":
    main()
