"""The garbage collector in a process that runs jobs: a forked worker, and the process of
``awa-fast serve``, ``client.run()`` or ``client.serve()``.

Every job leaves a few container objects (its task, coroutine, Job) for the collector to
count. At Python's default threshold of 700 a collection runs every hundred-odd jobs, and
the older generations' collections walk every object the process holds: its modules, its
connections, every handler still in flight (benches/RESULTS.md, "Design measurements").
A job's allocations are short-lived and seldom cyclic, and what the process holds when it
starts serving it holds until it stops: frozen, those objects are out of every
collection's walk.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

YOUNG_THRESHOLD = 10_000


def settle() -> tuple[int, int, int]:
    """Freeze every object alive now and collect the youngest generation only after
    ``YOUNG_THRESHOLD`` allocations; returns the thresholds this replaced."""
    replaced = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *replaced[1:])
    return replaced


@contextlib.contextmanager
def settled() -> Iterator[None]:
    """:func:`settle` for a while: the caller's process gets its collector back after (the
    thresholds as they were, the frozen objects collectable again)."""
    replaced = settle()
    try:
        yield
    finally:
        gc.set_threshold(*replaced)
        gc.unfreeze()
