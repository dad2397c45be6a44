"""A runner's standby claims (migration 0018): jobs that start without a claim of their own.

A claim must be durable before its handler may start, and from idle that durable write is
most of a pickup (benches/RESULTS.md, "Pickup latency"). So when a runner's claim finds a
queue drained and capacity to spare, it leaves a standby claim for that queue: the next
job inserted there
starts in its inserting transaction, and the NOTIFY on ``awa_fast_standby`` at its commit
names the claim's host. That note is only a hint (anyone may send one, and hear it:
migration 0019): the host then collects its spent claims (:meth:`Standby.collect`), reads
their jobs, starts them and deletes the claims, writing nothing that is flushed. A note
unheard is made up for by the collect that claim rounds run at least every poll interval
while a claim waits. One claim waits per queue and host; a busy queue, whose claims come
back full, offers none.

What the runner believes of its claims is only what its last collect read: a claim wiped
by a crash (the table is UNLOGGED), or left behind when its host was taken for dead and
registered again under a new id, is offered again after the next collect, which runs on
news and at least every poll interval while a claim waits.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.runtime.claimed import Claimed


class Standby:
    """The standby claims of one runner, by queue index (the runner's queue order)."""

    def __init__(self, queues: list[str], *, deadlines: list[float | None], recheck: float) -> None:
        self.queues = queues
        self._index = {queue: index for index, queue in enumerate(queues)}
        self._deadlines = deadlines
        self._recheck = recheck
        self.waiting = [False] * len(queues)  # a claim of ours waits there, as last read
        self.started_by_queue = [0] * len(queues)  # jobs started on our claims, run here
        self._news = True  # collect at the first claim round: claims may have outlived us
        self._next_check = 0.0
        self._spent: set[int] = set()  # claims whose jobs started here, not yet deleted
        # Collects and offers one at a time (claimers and the listener run them at once): a
        # collect reads every claim an offer before it committed, and no spent claim is
        # read by two collects (each deletes what it read before the next starts).
        self._lock = asyncio.Lock()

    def heard(self) -> None:
        """A job may have started on one of our claims: a NOTIFY said so, or one may
        have gone unheard."""
        self._news = True

    def due(self, now: float) -> bool:
        """Collect now: there is news, or a claim has waited a poll interval unchecked."""
        return self._news or (any(self.waiting) and now >= self._next_check)

    async def collect(
        self,
        cur: psycopg.AsyncCursor[Any],
        *,
        host_id: int,
        now: float,
        start: Callable[[int, list[Claimed]], None],
    ) -> None:
        """Read our claims: hand the jobs started on them to ``start`` (a queue index, and
        its claimed jobs), note which queues still have a claim of ours waiting,
        then delete the spent claims. Under the lock, no other collect reads a claim
        between; one whose delete failed is remembered, its job not started again."""
        async with self._lock:
            self._news = False
            self._next_check = now + self._recheck
            await cur.execute(Q.standby_collect, {"host_id": host_id})
            rows = await cur.fetchall()
            waiting = [False] * len(self.queues)
            started: dict[int, list[Claimed]] = defaultdict(list)
            for queue, is_waiting, claim, *job in rows:
                index = self._index[queue]
                if is_waiting:
                    waiting[index] = True
                elif claim not in self._spent:
                    self._spent.add(claim)
                    if job[0] is not None:  # None: cancelled or rescued before this read
                        started[index].append(Claimed._make(job))
            self.waiting = waiting
            for index, jobs in started.items():
                start(index, jobs)
            if self._spent:
                await cur.execute(Q.standby_forget, {"ids": list(self._spent)})
                self._spent.clear()

    async def offer(
        self, cur: psycopg.AsyncCursor[Any], drained: list[int], *, host_id: int
    ) -> None:
        """A claim for each drained queue that has none of ours waiting. A queue whose
        attempts have no deadline gets none: a claim carries the deadline it starts its
        job with (migration 0018). Its jobs are claimed the usual way."""
        async with self._lock:
            wanted = [
                index
                for index in drained
                if not self.waiting[index] and self._deadlines[index] is not None
            ]
            if not wanted:
                return
            await cur.execute(
                Q.standby_offer,
                {
                    "host_id": host_id,
                    "queues": [self.queues[index] for index in wanted],
                    "deadlines": [self._deadlines[index] for index in wanted],
                },
            )
            for index in wanted:
                self.waiting[index] = True

    async def withdraw(self, cur: psycopg.AsyncCursor[Any], *, host_id: int) -> None:
        """Delete our waiting claims (as the runner stops); one an inserting transaction
        holds stays, and its job, once committed, is collected like any other."""
        async with self._lock:
            await cur.execute(Q.standby_withdraw, {"host_id": host_id})
            self.waiting = [False] * len(self.queues)
