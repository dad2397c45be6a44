"""A paced producer for bulk loads: jobs inserted in chunks, holding back while their
queue's depth is at a mark and going on once it has drained below another.

A bulk loader that inserts as fast as COPY allows outruns any set of workers: the backlog
grows by the difference, the claim index with it, and the jobs at its end wait longest.
Pacing keeps the backlog between ``resume_depth`` and ``max_depth`` plus one chunk, so the
workers never run dry and the queue never holds much more than the mark. Before each chunk
the loader reads the queue's depth (its available jobs, from the counters:
awa_fast.backpressure); at ``max_depth`` or more it holds, looking again after
``poll_interval`` and then twice as long each time, up to ten times it, until the depth is
at ``resume_depth`` or below. Each hold is counted as a signal of the queue's backpressure
(``awa_fast_inserts_backpressure_signalled_total``).

The depth is the whole queue's, whoever inserts: two loaders pacing one queue each see
the other's jobs, and together may pass the mark by a chunk each. Items are taken from
``items`` a chunk at a time, so a generator is never held whole in memory.
:func:`~awa_fast.paced_sync.insert_paced` is the synchronous twin, generated from this
module's asyncio code by tools/async_to_sync.py.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Unpack

from awa_fast import backpressure, validation
from awa_fast.client import AsyncClient
from awa_fast.errors import ValidationError
from awa_fast.types import InsertOptions, InsertRequest, check_insert_options

MAX_BACKOFF = 10  # a hold's longest wait between looks, in poll intervals


@dataclass(frozen=True, slots=True)
class Paced:
    """What a paced load did: the jobs it inserted (a unique job whose key a live job
    held is not among them), in how many chunks, how many times it held back for the
    queue to drain, and the seconds it spent holding."""

    inserted: int
    chunks: int
    holds: int
    held_for: float


@dataclass(frozen=True, slots=True)
class Marks:
    """A paced load's settings, checked: hold at ``high``, go on at ``low``."""

    queue: str
    high: int
    low: int
    chunk: int
    poll: float

    @classmethod
    def of(
        cls,
        options: InsertOptions,
        *,
        max_depth: int,
        resume_depth: int | None,
        chunk: int,
        poll_interval: float,
    ) -> Marks:
        check_insert_options("insert_paced", options)
        high = validation.int_in("max_depth", max_depth, 1, 2**62)
        low = high // 2 if resume_depth is None else resume_depth
        return cls(
            queue=validation.name("queue", options.get("queue", "default")),
            high=high,
            low=validation.int_in("resume_depth", low, 0, high - 1),
            chunk=validation.int_in("chunk", chunk, 1, 1_000_000),
            poll=validation.positive_seconds("poll_interval", poll_interval),
        )

    def chunks(self, items: Iterable[object]) -> Iterator[list[object]]:
        """``items`` a chunk at a time; an InsertRequest of another queue is refused, as
        its jobs would not be paced by this queue's depth."""
        taken = iter(items)
        start = 0
        while batch := list(itertools.islice(taken, self.chunk)):
            for index, item in enumerate(batch, start):
                if isinstance(item, InsertRequest) and item.queue != self.queue:
                    raise ValidationError(
                        f"items[{index}].queue",
                        f"is {item.queue!r}: a paced load inserts into the queue it watches, "
                        f"{self.queue!r}",
                    )
            start += len(batch)
            yield batch

    def backoff(self, looks: int) -> float:
        """The wait before the look after ``looks`` looks that found the queue full."""
        return min(self.poll * 2.0 ** (looks - 1), self.poll * MAX_BACKOFF)


# ---- asyncio source: its synchronous twin is generated from it ----


async def insert_paced_async(
    client: AsyncClient,
    items: Iterable[object],
    *,
    max_depth: int,
    resume_depth: int | None = None,
    chunk: int = 1000,
    poll_interval: float = 0.1,
    **options: Unpack[InsertOptions],
) -> Paced:
    """Insert ``items`` with ``client`` in chunks of ``chunk`` (each an ``insert_many``
    with ``options``), holding back while the queue's available jobs are ``max_depth`` or
    more, until they are ``resume_depth`` (half of ``max_depth`` unless given) or fewer.
    Returns what it did (:class:`Paced`). A chunk refused or failing raises, and the
    chunks before it stay inserted: what it returned so far is not known to the caller,
    so a load to resume is best made of unique jobs."""
    marks = Marks.of(
        options,
        max_depth=max_depth,
        resume_depth=resume_depth,
        chunk=chunk,
        poll_interval=poll_interval,
    )
    inserted = chunks = holds = 0
    held_for = 0.0
    for batch in marks.chunks(items):
        held = await _until_room_async(client, marks)
        if held:
            holds += 1
            held_for += held
        inserted += len(await client.insert_many(batch, **options))
        chunks += 1
    return Paced(inserted=inserted, chunks=chunks, holds=holds, held_for=held_for)


async def _until_room_async(client: AsyncClient, marks: Marks) -> float:
    """Return once the queue has room for a chunk: at once while it is below the high
    mark, else once it has drained to the low one; the seconds it held (0: none)."""
    if await client.queue_depth(marks.queue) < marks.high:
        return 0.0
    backpressure.PRESSURE.signal(marks.queue)
    started = time.monotonic()
    looks = 1
    while True:
        await asyncio.sleep(marks.backoff(looks))
        if await client.queue_depth(marks.queue) <= marks.low:
            return time.monotonic() - started
        looks += 1
