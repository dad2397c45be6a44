"""The synchronous twin of :mod:`awa_fast.paced`, generated from its asyncio code by
tools/async_to_sync.py: do not edit."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Unpack

from awa_fast import (
    backpressure,
)
from awa_fast.client_sync import Client
from awa_fast.paced import Marks, Paced
from awa_fast.types import InsertOptions


def insert_paced(
    client: Client,
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
        held = _until_room(client, marks)
        if held:
            holds += 1
            held_for += held
        inserted += len(client.insert_many(batch, **options))
        chunks += 1
    return Paced(inserted=inserted, chunks=chunks, holds=holds, held_for=held_for)


def _until_room(client: Client, marks: Marks) -> float:
    """Return once the queue has room for a chunk: at once while it is below the high
    mark, else once it has drained to the low one; the seconds it held (0: none)."""
    if client.queue_depth(marks.queue) < marks.high:
        return 0.0
    backpressure.PRESSURE.signal(marks.queue)
    started = time.monotonic()
    looks = 1
    while True:
        time.sleep(marks.backoff(looks))
        if client.queue_depth(marks.queue) <= marks.low:
            return time.monotonic() - started
        looks += 1
