"""Which claim statement a queue needs: with packs or without.

A claim that also looks at packs (``job_claim_batch``) costs more than one that reads
jobs_hot alone (``job_claim_rows``; benches/RESULTS.md, "Design measurements"). So a
runner claims rows alone while it knows a queue holds no packs, and it knows that from
its own claims and from the news it hears.

* A claim that looked at packs and came back short took every pack it could see: until
  more news, the queue has none. One that came back full may have left a pack behind, and
  is news itself.
* News is a NOTIFY on ``awa_fast_packs`` (packs inserted, a pack left part-taken by any
  runner's claim, a queue resumed) and the listener's (re)connection, which may have
  missed some.
* And a queue's claims look at packs at least once a poll interval, news or not. That
  catches what nothing announces: a pack that a claim elsewhere held, so that this
  runner's claim skipped it, and then rolled back. A poll alone would not do: while rows
  keep arriving, their NOTIFYs wake the claims before any poll comes.

News is a count, not a flag: a claim that saw no packs clears the queue only back to the
count it started with, so news that came while it ran is never lost.
"""

from __future__ import annotations


class PackWatch:
    """Per queue, whether the next claim must look at packs."""

    def __init__(self, queues: int, *, every: float) -> None:
        self._every = every
        # Every queue starts with news: at start, nobody has looked.
        self._news = [1] * queues
        self._clear = [0] * queues
        self._looked = [float("-inf")] * queues  # when a claim last looked at packs

    def heard(self, queue_index: int | None = None) -> None:
        """Packs may wait in ``queue_index`` (``None``: in every queue)."""
        for index in range(len(self._news)) if queue_index is None else (queue_index,):
            self._news[index] += 1

    def claim(self, queue_index: int, *, now: float) -> int | None:
        """Before a claim at ``now`` (time.monotonic()): a token to pass to
        :meth:`claimed` if it must look at packs, ``None`` if rows alone will do."""
        if now - self._looked[queue_index] >= self._every:
            self.heard(queue_index)
        news = self._news[queue_index]
        if news == self._clear[queue_index]:
            return None
        self._looked[queue_index] = now
        return news

    def claimed(self, queue_index: int, token: int, *, full: bool) -> None:
        """After a claim that looked at packs (``token`` from :meth:`claim`)."""
        if full:
            self.heard(queue_index)
        else:
            self._clear[queue_index] = token
