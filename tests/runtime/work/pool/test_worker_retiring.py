"""A retiring worker starts nothing delivered after it began to retire: the supervisor may
have sent jobs before it saw the worker's capacity go to 0, and a worker recycled at its
job limit, or drained at a stop, that started them would run past its limit or hold up the
stop."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import uvloop

import awa_fast
from awa_fast._core import InFlight, OutcomeRing
from awa_fast.db.connections import Database
from awa_fast.lifecycle import transitions as tr
from awa_fast.runtime.capacity import Capacity
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.work.context import WorkerContext
from awa_fast.runtime.work.worker_process import RECYCLED_EXIT, WorkerProcess


@dataclass
class Ping:
    n: int


def test_jobs_delivered_to_a_retiring_worker_go_back_unstarted(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    ran: list[int] = []
    client.task(Ping)(lambda job: ran.append(job.id))
    capacity = Capacity({"default": 2}, 1, prefetch=2)
    inflight = InFlight(capacity.counters(), capacity.slots() + 8)
    ring = OutcomeRing(1024)
    context = WorkerContext(
        Database(dsn), RunnerConfig(), capacity, client.handlers.registry,
        client.handlers.followups, inflight, ring,
        wake=lambda: None, capacity_freed=lambda: None, flagged_workers=set,
    )  # fmt: skip
    worker = WorkerProcess(context, 0, read_fd=-1)
    # Claimed as the supervisor claims: a capacity unit reserved, a slot taken.
    assert inflight.reserve(0, 1) == 1
    slot = inflight.acquire_slot(41, 1, 0, 0)
    args = b"\x01" + b'{"n": 1}'
    claimed = [41, 1, "ping", "default", args, 1, 5, 2, [], None, None, None, 0, 0, 0]

    async def main() -> list[tuple[int, int, int]]:
        worker.done, worker.pump_wakeup = asyncio.Event(), asyncio.Event()
        worker.retire(RECYCLED_EXIT)  # capacity 0 from here
        worker.on_message(["jobs", [[claimed, slot, 0]]])  # already on its way
        assert worker.done.is_set()  # nothing runs, nothing waits: free to exit
        assert worker.recheck is not None
        worker.recheck.cancel()
        return [(job_id, lease, code) for job_id, lease, code, *_ in ring.drain(16, 0.0)]

    records = uvloop.run(main())
    released_code = tr.record(41, 1, 0, tr.released("any reason"))[2]
    assert records == [(41, 1, released_code)]  # back to available, its attempt unspent
    assert ran == []
    assert inflight.in_flight(0) == 0  # its slot and capacity unit freed
