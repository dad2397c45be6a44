"""Which of a worker's delivered jobs start now, and which wait their turn.

A worker holds up to its share of a queue's concurrency plus its prefetch
(:class:`~awa_fast.runtime.capacity.Capacity`), and runs at most its share at once: the rest
wait here unstarted, so that a worker whose handler returns starts the next job at once,
without waiting for a claim. A waiting job whose cancel flag is set by the time its turn
comes (cancelled, rescued, no longer owned) is given back, never started. Where the
prefetch is left to the runtime, the worker's pace here sets it (awa_fast.runtime.prefetch).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from awa_fast._core import InFlight
from awa_fast.runtime.capacity import Capacity
from awa_fast.runtime.claimed import Delivered
from awa_fast.runtime.prefetch import Pace, held_for

GiveBack = Callable[[list[Delivered], str], None]


class Starts:
    def __init__(
        self, capacity: Capacity, worker: int, *, inflight: InFlight, give_back: GiveBack
    ) -> None:
        shares = capacity.shares(worker)
        self._limit = shares  # capacity index -> handlers that may run at once
        self._running = dict.fromkeys(shares, 0)
        self._waiting: dict[int, collections.deque[Delivered]] = {
            cap: collections.deque() for cap in shares
        }
        self._inflight = inflight
        self._give_back = give_back
        now = time.monotonic()
        # Counters whose prefetch follows the pace: the runtime's to set, and held at all.
        self._paces = (
            {cap: Pace(now) for cap, share in shares.items() if share}
            if capacity.prefetch is None
            else {}
        )

    def __len__(self) -> int:
        """Jobs waiting to start."""
        return sum(len(waiting) for waiting in self._waiting.values())

    def admit(self, delivered: Delivered) -> list[Delivered]:
        """Hold ``delivered``; the jobs to start now, in their order of delivery (each
        counts as running until :meth:`ended`)."""
        self._waiting[delivered.capacity].append(delivered)
        return self._ready(delivered.capacity)

    def ended(self, capacity: int) -> list[Delivered]:
        """A job of ``capacity`` ended: the jobs to start now."""
        self._paced(capacity)
        self._running[capacity] -= 1
        pace = self._paces.get(capacity)
        if pace is not None and (per_s := pace.completed()) is not None:
            self._inflight.set_capacity(capacity, self._limit[capacity] + held_for(per_s))
        return self._ready(capacity)

    def retire(self) -> None:
        """Leave the worker's capacity alone from now on: it is retiring, at 0."""
        self._paces.clear()

    def _paced(self, cap: int) -> None:
        """Tell the counter's pace that its running count is about to change."""
        pace = self._paces.get(cap)
        if pace is not None:
            pace.running_changes(self._running[cap], time.monotonic())

    def _ready(self, cap: int) -> list[Delivered]:
        waiting, ready = self._waiting[cap], []
        while waiting and self._running[cap] < self._limit[cap]:
            delivered = waiting.popleft()
            if self._inflight.is_cancelled(delivered.slot):
                self._give_back([delivered], "its attempt was flagged before it started")
                continue
            self._paced(cap)
            self._running[cap] += 1
            ready.append(delivered)
        return ready

    def take_waiting(self) -> list[Delivered]:
        """Every job waiting, forgotten here: for the worker to give back."""
        taken = [d for waiting in self._waiting.values() for d in waiting]
        for waiting in self._waiting.values():
            waiting.clear()
        return taken
