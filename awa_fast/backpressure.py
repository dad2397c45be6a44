"""Backpressure: an insert may ask for its queue's depth to be checked against a limit, and
is refused with :class:`~awa_fast.errors.QueueFull` when its jobs would take the queue past
it (``max_queue_depth``); the process counts what the checks found, for ``/metrics``.

A queue's depth is its available jobs, packed ones included: the jobs due and waiting for
a claim, which grow when producers outrun the workers. Scheduled and retryable jobs count
once they fall due; running ones not at all.

The depth is read from the counters every count reads (migration 0025,
``Q.queue_backlog``): the queue's rollup row by its key, plus the deltas the leader has
not folded into it yet, about two ``count_interval`` of statements while a leader runs,
never the job rows. The read costs the same however many jobs the queue or its history
holds. It sees what had committed when it ran, and the check's own transaction's inserts:
it is a limit, not a reservation. Producers checking at the same moment each see the depth
before the others' jobs, and may each add theirs, so a queue can pass its limit by what
they add at once.

An insert that does not ask runs no statement for it and counts nothing. One that does
costs one read before its writes, on its own connection or inside the caller's
transaction. The counters are this process's: a forked worker's inserts are counted in
that worker, which serves no metrics.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from awa_fast import validation
from awa_fast.errors import QueueFull, ValidationError

# A check signals (and counts so) once the queue's depth with the jobs added reaches this
# share of its limit: a warning ahead of the refusals, for alerts to fire on.
SIGNAL_SHARE = 0.8


class Pressure:
    """This process's counts, by queue: checks that found the queue close to or over its
    limit (``signalled``: refusals, a paced producer's holds, and inserts let through
    past four fifths of the limit), and inserts refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # inserts come from any thread
        self.signalled: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """In a forked child: counts of its own from zero, and a free lock."""
        self._lock = threading.Lock()
        self.signalled, self.refused = Counter(), Counter()

    def signal(self, queue: str, *, refused: bool = False) -> None:
        with self._lock:
            self.signalled[queue] += 1
            if refused:
                self.refused[queue] += 1

    def read(self) -> tuple[dict[str, int], dict[str, int]]:
        """(signalled, refused), each by queue: copies, read at once."""
        with self._lock:
            return dict(self.signalled), dict(self.refused)


PRESSURE = Pressure()


def limit_of(value: object) -> int | None:
    """A ``max_queue_depth`` as given: None (no check) or an integer >= 1."""
    if value is None:
        return None
    return validation.int_in("max_queue_depth", value, 1, 2**62)


Wanted = dict[str, tuple[int, int]]  # queue -> (jobs added, the tightest limit asked)


def wanted(groups: Iterable[tuple[str, int, int | None]]) -> Wanted:
    """What a call asks, from its jobs in groups of (queue, how many, the limit they ask,
    None for none): for each queue a job asks a limit of, every job the call adds there
    and the lowest limit asked. A call that could never pass (more jobs than their
    limit) is refused before any read."""
    added: Counter[str] = Counter()
    limits: dict[str, int] = {}
    for queue, jobs, limit in groups:
        added[queue] += jobs
        if limit is not None:
            limits[queue] = min(limit, limits.get(queue, limit))
    for queue, limit in limits.items():
        if added[queue] > limit:
            raise ValidationError(
                "max_queue_depth",
                f"the call adds {added[queue]} jobs to queue {queue!r}, more than its limit "
                f"of {limit}: no depth lets it through; split it or raise the limit",
            )
    return {queue: (added[queue], limit) for queue, limit in limits.items()}


def params(asked: Wanted) -> dict[str, Any]:
    """``Q.queue_backlog``'s parameters for the queues of ``asked``."""
    return {"queues": sorted(asked)}


def admit(asked: Wanted, rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise :class:`QueueFull` for the first queue (by name) whose depth, read in
    ``rows`` of ``Q.queue_backlog``, and the jobs added there would pass its limit;
    count the checks that signal."""
    depths = {row["queue"]: int(row["depth"]) for row in rows}
    for queue in sorted(asked):
        added, limit = asked[queue]
        depth = depths.get(queue, 0)
        if depth + added > limit:
            PRESSURE.signal(queue, refused=True)
            raise QueueFull(queue, depth=depth, limit=limit, jobs=added)
        if depth + added >= SIGNAL_SHARE * limit:
            PRESSURE.signal(queue)
