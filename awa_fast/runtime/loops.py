"""A runner's long-lived loops (claimers, listener, heartbeat, maintenance, and the
committer's thread): each run, restarted with backoff when it fails, and reported down.

Each loop retries what it expects (a lost connection) on its own. Anything else would end
it silently, and the runner would go on without it while its health read fine; so a loop
that ends by an exception is logged here, reported down (awa_fast.runtime.health) and
started again after a backoff, until the runner stops. The runner stops a loop by
cancelling it, at whatever it awaits then; a connect it was in goes on to the end, to
close what it opens (:func:`awa_fast.db.connections.connect_or_close`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable

log = logging.getLogger("awa_fast.runner")

# A loop that ran this long before it failed starts its backoff afresh.
STEADY_SECONDS = 60.0


def retry_delay(failures: int) -> float:
    """Seconds before trying again after ``failures`` failures in a row (a loop's restart,
    a claim connection's reconnect)."""
    return min(0.05 * 2.0**failures, 2.0)


def failures_in_a_row(failures: int, *, started: float) -> int:
    """The count of failures in a row once a loop started at ``started`` has failed."""
    return 1 if time.monotonic() - started >= STEADY_SECONDS else failures + 1


class Loops:
    """Which loops are down now (ended by an exception and not yet started again), and how
    often each was restarted."""

    def __init__(self, stopping: Callable[[], bool]) -> None:
        self._stopping = stopping
        self._down: set[str] = set()  # written from the committer's thread too
        self.restarts: Counter[str] = Counter()

    @property
    def down(self) -> tuple[str, ...]:
        """The names of the loops down now, sorted."""
        return tuple(sorted(self._down.copy()))  # copied at once: another thread may add

    async def run(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run ``loop()`` until it returns (or is cancelled), restarting it when it ends by
        an exception, unless the runner is stopping."""
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await loop()
                return
            except Exception as exc:
                failures = failures_in_a_row(failures, started=started)
                delay = self._failed(name, exc, failures)
            if not self._stopping():
                await asyncio.sleep(delay)
            if self._stopping():
                return
            self._restarting(name)

    def run_thread(self, name: str, loop: Callable[[], None], stop: threading.Event) -> None:
        """:meth:`run` for a loop that is a thread's whole life; ``stop`` ends the wait
        between restarts."""
        failures = 0
        while True:
            started = time.monotonic()
            try:
                loop()
                return
            except Exception as exc:
                failures = failures_in_a_row(failures, started=started)
                delay = self._failed(name, exc, failures)
            if stop.wait(delay):
                return
            self._restarting(name)

    def _failed(self, name: str, exc: Exception, failures: int) -> float:
        """Log a loop's end and mark it down; the delay before its restart."""
        self._down.add(name)
        delay = retry_delay(failures)
        log.error("%s ended by an exception; restarting in %.2fs", name, delay, exc_info=exc)
        return delay

    def _restarting(self, name: str) -> None:
        self._down.discard(name)
        self.restarts[name] += 1
