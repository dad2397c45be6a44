"""How many jobs a worker holds ahead of those it runs, when the user left it to us.

A held job saves its worker a claim's round trip when a handler returns, and it waits,
claimed, where another host might have run it. So a worker holds about
:data:`HORIZON_S` of work ahead on each queue: a couple of hundred jobs of a queue whose
handlers take a millisecond, none of one whose handlers take longer than the horizon. Work is
measured as the worker's pace on the queue: jobs completed per second of the time it had
one of the queue's handlers running, which counts handlers that run side by side and sync
handlers that take turns alike. Until a pace is measured, a worker holds
:func:`default_prefetch`.
"""

from __future__ import annotations

import math

# Seconds of work a worker holds ahead on a queue: many claim round trips, so that claims
# of quick jobs come in batches whose fixed cost is spread thin (benches/RESULTS.md,
# "Claim size"), and short enough that a job held back waits no longer than that.
HORIZON_S = 0.2
# Bounds on what a worker holds ahead on one queue; the in-flight table is sized for the
# upper one. Before a pace is known, the guess stays within the lower bounds: the queue's
# handlers may be slow.
PREFETCH_MIN = 8
PREFETCH_UNPACED_MAX = 64
PREFETCH_MAX = 256
# A new pace is taken after this many completions or this much busy time, whichever
# comes first, and weighs half against the one before. The first is taken sooner: until
# then a worker holds only default_prefetch's few jobs, which a claim's round trip outlasts.
PACE_JOBS = 32
PACE_FIRST_JOBS = 4
PACE_BUSY_S = 0.5


def default_prefetch(share: int) -> int:
    """Held ahead before any pace is known: twice the handlers the worker runs at once."""
    return min(max(2 * share, PREFETCH_MIN), PREFETCH_UNPACED_MAX)


def held_for(pace: float) -> int:
    """Held ahead at ``pace`` jobs/s: the horizon's worth, within the upper bound."""
    return min(PREFETCH_MAX, math.floor(HORIZON_S * pace))


class Pace:
    """A worker's pace on one queue, from the busy time and completions it is told of."""

    __slots__ = ("_busy", "_done", "_since", "per_s")

    def __init__(self, now: float) -> None:
        self._busy = 0.0
        self._done = 0
        self._since = now
        self.per_s: float | None = None

    def running_changes(self, running: int, now: float) -> None:
        """``running`` handlers ran from the last change until ``now``."""
        if running:
            self._busy += now - self._since
        self._since = now

    def completed(self) -> float | None:
        """One more job done; the pace, when that took a new measure of it."""
        self._done += 1
        enough = PACE_FIRST_JOBS if self.per_s is None else PACE_JOBS
        if self._done < enough and self._busy < PACE_BUSY_S:
            return None
        measured = self._done / max(self._busy, 1e-6)
        self.per_s = measured if self.per_s is None else (self.per_s + measured) / 2
        self._done, self._busy = 0, 0.0
        return self.per_s
