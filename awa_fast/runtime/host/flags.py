"""The cancel flags this host set on attempts running here, and why.

A flag is the handler's cue to stop (``job.is_cancelled()``). A worker running a flagged
attempt takes no new jobs until it ends, and one whose handler ignores the flag past the
grace is recycled by the heartbeat: a job sent to that worker would be lost with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable

from awa_fast._core import InFlight

Attempt = tuple[int, int]  # (job id, run lease)


class CancelFlags:
    def __init__(self, inflight: InFlight, *, workers: int, on_ended: Callable[[], None]) -> None:
        self._inflight = inflight
        self._workers = workers
        self._on_ended = on_ended  # a flagged attempt ended: its worker takes jobs again
        self._flagged: dict[Attempt, tuple[float, str]] = {}  # -> (when, why)

    def __contains__(self, attempt: object) -> bool:
        return attempt in self._flagged

    def reasons(self) -> dict[Attempt, str]:
        return {attempt: why for attempt, (_, why) in self._flagged.items()}

    def flag(self, job_id: int, run_lease: int, *, why: str) -> None:
        """Set the attempt's cancel flag, if it runs here."""
        if self._inflight.cancel(job_id, run_lease):
            self._flagged.setdefault((job_id, run_lease), (time.monotonic(), why))

    def forget_ended(self, running: Iterable[Attempt]) -> None:
        """Forget flagged attempts not in ``running`` any more."""
        still = set(running)
        ended = [attempt for attempt in self._flagged if attempt not in still]
        for attempt in ended:
            del self._flagged[attempt]
        if ended:
            self._on_ended()

    def ignored(
        self, *, grace: float, besides: Container[Attempt] = ()
    ) -> list[tuple[Attempt, str]]:
        """Attempts flagged more than ``grace`` seconds ago, but those in ``besides``, and
        why: forgotten here, for their workers to be recycled."""
        now = time.monotonic()
        late = [
            (a, why)
            for a, (since, why) in self._flagged.items()
            if now - since > grace and a not in besides
        ]
        for attempt, _ in late:
            del self._flagged[attempt]
        return late

    def workers(self) -> set[int]:
        """Workers running a flagged attempt."""
        if not self._flagged:
            return set()
        flagged = self._flagged.keys()
        return {
            worker
            for worker in range(self._workers)
            if not flagged.isdisjoint(self._inflight.held_by(worker))
        }
