"""Jobs finished over time, for the charts: counts per time bucket and queue, read from the
per-minute counters (migration 0025) and kept between refreshes, so that a refresh reads
the newest buckets rather than the whole window (a day is 1,440 minutes a queue)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from awa_fast.admin import Op
from awa_fast.ui.ops import Counts, Finished, finished


@dataclass(frozen=True, slots=True)
class Throughput:
    """Finished jobs over a window: ``starts`` are the buckets' starts (epoch seconds,
    oldest first), ``by_queue`` each queue's (completed, failed) in each bucket."""

    starts: list[float]
    bucket_s: int
    by_queue: dict[str, list[tuple[int, int]]]

    def series(self, queue: str) -> list[tuple[int, int]]:
        """The queue's buckets (each empty for a queue that finished nothing)."""
        return self.by_queue.get(queue) or [(0, 0)] * len(self.starts)

    def total(self) -> list[tuple[int, int]]:
        """Every queue's buckets added up."""
        series = list(self.by_queue.values())
        return [
            (sum(s[i][0] for s in series), sum(s[i][1] for s in series))
            for i in range(len(self.starts))
        ]

    def sums(self, queue: str) -> tuple[int, int]:
        """The queue's completed and failed jobs over the whole window."""
        series = self.by_queue.get(queue, [])
        return sum(c for c, _ in series), sum(f for _, f in series)


class Window:
    """One chart's window, ``window_s`` seconds in buckets of ``bucket_s``, and the buckets
    read so far. Each refresh reads again the open bucket and the one before it (a
    transaction that commits late stamps its jobs with the time it began); older buckets
    are kept as read until they leave the window."""

    def __init__(self, window_s: int, bucket_s: int) -> None:
        self.window_s = window_s
        self.bucket_s = bucket_s
        self._buckets: dict[float, Counts] = {}
        self._reread_from: float | None = None  # None: read the whole window

    async def read(self, run: Callable[[Op[Finished]], Awaitable[Finished]]) -> Throughput:
        reread_from = self._reread_from
        fresh = await run(
            finished(since=reread_from, window_s=self.window_s, bucket_s=self.bucket_s)
        )
        last = fresh.now // self.bucket_s * self.bucket_s
        count = self.window_s // self.bucket_s
        starts = [last - (count - 1 - i) * self.bucket_s for i in range(count)]
        kept = {
            start: counts
            for start, counts in self._buckets.items()
            if start >= starts[0] and reread_from is not None and start < reread_from
        }
        self._buckets = {**kept, **fresh.buckets}
        self._reread_from = last - self.bucket_s
        queues = {queue for counts in self._buckets.values() for queue in counts}
        by_queue = {
            queue: [self._buckets.get(start, {}).get(queue, (0, 0)) for start in starts]
            for queue in sorted(queues)
        }
        return Throughput(starts, self.bucket_s, by_queue)
