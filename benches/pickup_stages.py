"""Where a pickup's time goes inside the pool: the ``latency`` scenario (500 jobs at 50/s
into idle workers) with each stage of every job stamped, p50 / p99 in ms per stage.

Stages: the producer's commit returning -> the claim round starting (negative: the NOTIFY
reaches the supervisor before the producer's own process wakes); the claim round -> its
rows back; rows -> the jobs written to the worker's pipe; the pipe -> the worker reading
them; the read -> the job's task starting; the task -> the handler starting. With standby
claims (the default; ``--no-standby`` turns them off) a job mostly starts from the
listener's collect on the NOTIFY of its start, outside any claim round: its round starts,
and ends, when the supervisor has the row.

The stamps are wrapped around the runner's and pool's own methods for this process only
(workers inherit them by fork); nothing in the package is changed. With
``--processes 0`` there is no pipe: the pipe stages read 0.

    PYTHONPATH=. python benches/pickup_stages.py URL --processes 2 --runs 3 [--no-standby]
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from typing import Any

from awa_fast.bench import latency as scenario
from awa_fast.bench.handlers import Board
from awa_fast.bench.measure import fresh_database, percentiles
from awa_fast.bench.run import run_as_served
from awa_fast.runtime.claim import claimer
from awa_fast.runtime.work import local, pool, worker_process

JOBS = 500
STAGES = ("round", "rows", "sent", "read", "task")


class Stamps:
    """One shared board per stage, by job (a fresh database's job n has id n + 1), written
    by the supervisor and, through the fork, the workers."""

    def __init__(self) -> None:
        self.boards = {stage: Board(JOBS) for stage in STAGES}
        self.round_started: float | None = None  # while a claim round runs

    def put(self, stage: str, rows: Any, at: float) -> None:
        for row in rows:
            job_id = row[0] if isinstance(row[0], int) else row[0][0]  # claimed or delivered
            if 0 < job_id <= JOBS:
                self.boards[stage].put(job_id - 1, at)

    def wrap(self) -> None:
        """Stamp each stage from the methods the pickup passes through."""
        claim_round = claimer.Claimer.claim_round
        dispatch = claimer.Claimer._dispatch
        deliver = pool.ForkedWorkers.deliver
        on_message = worker_process.WorkerProcess.on_message
        run_claimed = local.run_claimed

        async def stamped_round(self_: claimer.Claimer, cur: Any) -> claimer.Round:
            self.round_started = time.time()
            try:
                return await claim_round(self_, cur)
            finally:
                self.round_started = None

        def stamped_dispatch(self_: claimer.Claimer, rows: Any, *args: Any) -> None:
            now = time.time()
            self.put("round", rows, now if self.round_started is None else self.round_started)
            self.put("rows", rows, now)
            dispatch(self_, rows, *args)

        def stamped_deliver(self_: pool.ForkedWorkers, worker: int, rows: Any) -> None:
            deliver(self_, worker, rows)
            self.put("sent", rows, time.time())

        def stamped_message(self_: worker_process.WorkerProcess, message: Any) -> None:
            if message[0] == "jobs":
                self.put("read", message[1], time.time())
            on_message(self_, message)

        async def stamped_run(executor: Any, inflight: Any, row: Any, **options: Any) -> None:
            self.put("task", [row], time.time())
            await run_claimed(executor, inflight, row, **options)

        claimer.Claimer.claim_round = stamped_round  # type: ignore[method-assign]
        claimer.Claimer._dispatch = stamped_dispatch  # type: ignore[method-assign]
        pool.ForkedWorkers.deliver = stamped_deliver  # type: ignore[method-assign]
        worker_process.WorkerProcess.on_message = stamped_message  # type: ignore[method-assign]
        worker_process.run_claimed = local.run_claimed = stamped_run


def _capture(into: dict[str, list[float]]) -> None:
    """Keep the scenario's own two stamps: each insert's commit and each handler's start."""
    produce: Callable[..., Any] = scenario.in_producer

    async def producing(*args: Any) -> Any:
        into["committed"] = await produce(*args)
        return into["committed"]

    class StartBoard(Board):
        def read(self) -> list[float]:
            into["started"] = super().read()
            return into["started"]

    scenario.in_producer = producing  # type: ignore[assignment]
    scenario.Board = StartBoard  # type: ignore[misc]


def _ms(before: list[float], after: list[float]) -> str:
    ms = percentiles(
        [(b - a) * 1e3 if a and b else 0.0 for a, b in zip(before, after, strict=True)]
    )
    return f"{ms['p50']:.3f} / {ms['p99']:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a Postgres server URL (a fresh database per run)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-standby", dest="standby", action="store_false")
    args = parser.parse_args()
    stamps, scenario_stamps = Stamps(), {}
    stamps.wrap()
    _capture(scenario_stamps)
    for run in range(args.runs):
        with fresh_database(args.url) as url:
            pickups = scenario.latency(
                url, jobs=JOBS, processes=args.processes or None, standby=args.standby
            )
            run_as_served(pickups)
        at = {stage: board.read() for stage, board in stamps.boards.items()}
        at.update(scenario_stamps)
        if args.processes == 0:  # no pipe: the read is the dispatch
            at["sent"] = at["read"] = at["rows"]
        order = ["committed", *STAGES, "started"]
        spans = "  ".join(f"{a}->{b} {_ms(at[a], at[b])}" for a, b in itertools.pairwise(order))
        print(f"run {run + 1}: total {_ms(at['committed'], at['started'])}  {spans}", flush=True)


if __name__ == "__main__":
    main()
