"""The Awa SDK's weighted mode: how many attempts each queue may start now.

With ``global_max_workers`` a runner starts at most that many attempts. Each queue is
guaranteed its ``min_workers``; what the minimums leave is a pool the queues share by
weight. A queue may hold up to its fair share of the pool, the pool times its weight over
the weights of the queues contending for it: those that hold some of it, or whose last
claim took all it asked for (more may be waiting), and the one asking. A queue whose claim
came back short leaves its share to the others until it fills a claim again, so no
capacity waits on an idle queue. This is the SDK runtime's overflow pool, its demand
signal taken from the claims.

The claimer asks :meth:`Shares.room` before it reserves, and tells :meth:`Shares.claimed`
what each claim found. Attempts in flight, reservations included, are read from the
in-flight table: nothing here has to be released.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Weights:
    """Weighted mode's settings, by queue index."""

    total: int  # global_max_workers
    minimums: tuple[int, ...]
    weights: tuple[int, ...]

    @classmethod
    def of(
        cls, total: int | None, queue_weights: Mapping[str, tuple[int, int]], queues: Sequence[str]
    ) -> Weights | None:
        """Weighted mode's settings for ``queues``; None without a global pool."""
        if total is None:
            return None
        given = [queue_weights.get(queue, (0, 1)) for queue in queues]
        return cls(total, tuple(low for low, _ in given), tuple(w for _, w in given))


class Shares:
    """What each queue may start now: unbounded without weights, else its minimum's room
    and its fair share of the pool's."""

    def __init__(self, weights: Weights | None, in_flight: Callable[[], Sequence[int]]) -> None:
        self._weights = weights
        self._in_flight = in_flight  # attempts and reservations, by queue index
        queues = len(weights.minimums) if weights is not None else 0
        self._demand = [True] * queues  # until a claim says otherwise

    @property
    def weighted(self) -> bool:
        """Whether what a queue may start depends on the other queues."""
        return self._weights is not None

    def room(self, queue_index: int) -> int | None:
        """Attempts ``queue_index`` may start now, on top of those in flight (None: as many
        as its own capacity allows)."""
        weights = self._weights
        if weights is None:
            return None
        running = self._in_flight()
        held = self._held(weights, running)
        own = max(0, weights.minimums[queue_index] - running[queue_index])
        pool_left = self._pool(weights) - sum(held)
        share = self._share(weights, queue_index, held)
        return own + max(0, min(pool_left, share - held[queue_index]))

    def ceiling(self, queue_index: int) -> int | None:
        """The most ``queue_index`` may run at once now: its minimum and its fair share."""
        weights = self._weights
        if weights is None:
            return None
        held = self._held(weights, self._in_flight())
        return weights.minimums[queue_index] + self._share(weights, queue_index, held)

    def claimed(self, queue_index: int, *, wanted: int, got: int) -> None:
        """A claim of ``queue_index`` asked for ``wanted`` jobs and found ``got``."""
        if self._weights is not None:
            self._demand[queue_index] = got >= wanted

    @staticmethod
    def _held(weights: Weights, running: Sequence[int]) -> list[int]:
        """What each queue holds of the pool: its attempts beyond its minimum."""
        return [max(0, n - low) for n, low in zip(running, weights.minimums, strict=True)]

    @staticmethod
    def _pool(weights: Weights) -> int:
        return weights.total - sum(weights.minimums)

    def _share(self, weights: Weights, queue_index: int, held: list[int]) -> int:
        contending = sum(
            weight
            for q, weight in enumerate(weights.weights)
            if q == queue_index or held[q] or self._demand[q]
        )
        return math.ceil(self._pool(weights) * weights.weights[queue_index] / contending)


def within(free: list[tuple[int, int, int]], room: int | None) -> list[tuple[int, int, int]]:
    """``free`` (units, capacity index, worker), in its order, cut to ``room`` units in
    all (None: as it is)."""
    if room is None:
        return free
    cut = []
    for units, cap, worker in free:
        cut.append((min(units, room), cap, worker))
        room -= cut[-1][0]
    return cut
