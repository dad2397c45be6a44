"""How the queues' concurrency is laid out over workers, and what claiming asks of the
workers it delivers to: shared by the claiming side, the working side and the heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from awa_fast.runtime.claimed import Delivered
from awa_fast.runtime.prefetch import PREFETCH_MAX, default_prefetch


def shares(concurrency: int, workers: int) -> list[int]:
    """Split a queue's concurrency over workers as evenly as possible (sum is exact)."""
    base, extra = divmod(concurrency, workers)
    return [base + (1 if w < extra else 0) for w in range(workers)]


@dataclass(frozen=True, slots=True)
class Capacity:
    """How the queues' concurrency is laid out in the in-flight table: one counter per
    (queue, worker), at index ``queue * workers + worker``. A counter holds the worker's
    share of the queue's concurrency (the handlers it may run at once) plus its prefetch
    (jobs claimed ahead, waiting in the worker unstarted): fixed, or, when ``prefetch`` is
    None, set by each worker from its pace (awa_fast.runtime.prefetch)."""

    queues: Mapping[str, int]  # queue -> concurrency, in the runner's queue order
    workers: int
    prefetch: int | None = None  # per worker and queue; None: by the worker's pace

    def index(self, queue_index: int, worker: int) -> int:
        return queue_index * self.workers + worker

    def share(self, queue_index: int, worker: int) -> int:
        """The handlers of a queue that ``worker`` may run at once."""
        concurrency = list(self.queues.values())[queue_index]
        return shares(concurrency, self.workers)[worker]

    def held(self, queue_index: int, worker: int) -> int:
        """The jobs of a queue that ``worker`` holds at its start: its share, and its
        prefetch (until its pace is known, when that is the worker's to set)."""
        return self._with_share(queue_index, worker, default_prefetch)

    def most(self, queue_index: int, worker: int) -> int:
        """The most jobs of a queue that ``worker`` may ever hold."""
        return self._with_share(queue_index, worker, lambda share: PREFETCH_MAX)

    def _with_share(self, queue_index: int, worker: int, paced: Callable[[int], int]) -> int:
        """The worker's share plus a prefetch: the fixed one, else ``paced(share)``."""
        share = self.share(queue_index, worker)
        if not share:
            return 0
        return share + (paced(share) if self.prefetch is None else self.prefetch)

    def counters(self) -> list[int]:
        """Every counter's capacity at the start, in table order."""
        return [self.held(q, w) for q in range(len(self.queues)) for w in range(self.workers)]

    def slots(self) -> int:
        """Attempt slots the in-flight table needs: every counter at its most."""
        return sum(self.most(q, w) for q in range(len(self.queues)) for w in range(self.workers))

    def shares(self, worker: int) -> dict[int, int]:
        """Capacity index -> the handlers ``worker`` may run at once, for each queue."""
        return {self.index(q, worker): self.share(q, worker) for q in range(len(self.queues))}


class Workers(Protocol):
    """Where claimed jobs run: this process, or forked worker processes."""

    count: int

    def prefork(self) -> None: ...

    async def start(self) -> None: ...

    def accepting(self) -> Sequence[int]: ...

    def deliver(self, worker: int, jobs: list[Delivered]) -> None: ...

    async def drain(self, timeout: float) -> None: ...

    def evict(self, job_id: int, run_lease: int, *, reason: str) -> None: ...

    def alive(self) -> int:
        """Processes running handlers now (for awa_fast_worker_processes)."""
        ...

    @property
    def down(self) -> tuple[str, ...]:
        """What of the workers' own machinery has ended for good (for the health check)."""
        ...

    @property
    def exits(self) -> Mapping[str, int]:
        """Worker processes ended, by cause (awa_fast.runtime.work.pool.EXIT_CAUSES): none
        when handlers run in-process."""
        ...
