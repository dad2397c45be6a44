"""A runner's standby claims (migration 0018): jobs that start without a claim of their own.

A claim must be durable before its handler may start, and from idle that durable write is
most of a pickup (benches/RESULTS.md). So when a runner's claim finds a queue drained and
capacity to spare, it leaves a standby claim for that queue: the next job inserted there
starts in its inserting transaction, and the NOTIFY on ``awa_fast_standby`` at its commit
carries the job's row, which the runner starts from (:meth:`Standby.noted`). The runner
also collects its spent claims, a read that flushes nothing, which deletes them and
returns their jobs: a job whose row was too long for a NOTIFY, or whose NOTIFY went
unheard, starts from there. Each claim's job starts once, by whichever of the two comes
first. One claim waits per queue and host; a busy queue, whose claims come back full,
offers none.

What the runner believes of its claims is only what its last collect read: a claim wiped
by a crash (the table is UNLOGGED), or left behind when its host was taken for dead and
registered again under a new id, is offered again after the next collect, which runs on
news and at least every poll interval while a claim waits.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import orjson
import psycopg

from awa_fast.db.queries import Q
from awa_fast.runtime.executor import (
    ARGS,
    ERRORS,
    JSONB_BINARY_VERSION,
    METADATA,
    PROGRESS,
    QUEUE,
)

Row = tuple[Any, ...]

SEEN_FOR = 600.0  # seconds a started claim's id is kept, against starting its job twice
_JSONB = bytes((JSONB_BINARY_VERSION,))


class Standby:
    """The standby claims of one runner, by queue index (the runner's queue order)."""

    def __init__(self, queues: list[str], *, deadlines: list[float], recheck: float) -> None:
        self.queues = queues
        self._index = {queue: index for index, queue in enumerate(queues)}
        self._deadlines = deadlines
        self._recheck = recheck
        self.waiting = [False] * len(queues)  # a claim of ours waits there, as last read
        self.started_by_queue = [0] * len(queues)  # jobs started on our claims, run here
        self._news = True  # collect at the first claim round: claims may have outlived us
        # Claims whose job started here, by id, when: each is seen at most twice (its
        # NOTIFY, and the collect that deletes it), and its job starts at the first.
        self._seen: dict[int, float] = {}
        self._next_check = 0.0
        # Collects and offers one at a time (claimers run rounds at once): a collect reads
        # every claim an offer before it committed.
        self._lock = asyncio.Lock()

    def heard(self) -> None:
        """A NOTIFY said a job started on one of our claims (or may have, unheard)."""
        self._news = True

    def noted(self, note: str, *, now: float) -> tuple[int, Row] | None:
        """The job a NOTIFY of ours carries (its text after the host's id): its queue
        index and its row as a claim returns it, unless its claim's job started already."""
        claim, *columns = orjson.loads(note)
        if not self._first_sight(claim, now):
            return None
        for at in (ARGS, METADATA, ERRORS, PROGRESS):
            columns[at] = _jsonb(columns[at])
        return self._index[columns[QUEUE]], tuple(columns)

    def _first_sight(self, claim: int, now: float) -> bool:
        """Whether ``claim``'s job is seen here for the first time (and is to start)."""
        if self._seen.pop(claim, None) is not None:
            return False
        self._seen[claim] = now
        return True

    def due(self, now: float) -> bool:
        """Collect now: there is news, or a claim has waited a poll interval unchecked."""
        return self._news or (any(self.waiting) and now >= self._next_check)

    async def collect(
        self, cur: psycopg.AsyncCursor[Any], *, host_id: int, now: float
    ) -> dict[int, list[Row]]:
        """The jobs started on our claims, by queue index, as claimed rows; and which
        queues still have a claim of ours waiting."""
        async with self._lock:
            self._news = False
            self._next_check = now + self._recheck
            await cur.execute(Q.standby_collect, {"host_id": host_id})
            rows = await cur.fetchall()
            waiting = [False] * len(self.queues)
            started: dict[int, list[Row]] = defaultdict(list)
            for queue, is_waiting, claim, *job in rows:
                index = self._index[queue]
                if is_waiting:
                    waiting[index] = True
                elif self._first_sight(claim, now):
                    started[index].append(tuple(job))
            self.waiting = waiting
            self._seen = {claim: at for claim, at in self._seen.items() if now - at < SEEN_FOR}
            return started

    async def offer(
        self, cur: psycopg.AsyncCursor[Any], drained: list[int], *, host_id: int
    ) -> None:
        """A claim for each drained queue that has none of ours waiting."""
        async with self._lock:
            wanted = [index for index in drained if not self.waiting[index]]
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


def _jsonb(text: str | None) -> bytes | None:
    """A jsonb column's text as a claim connection loads the column (its binary payload)."""
    return None if text is None else _JSONB + text.encode()
