"""A runner's numbers at one moment, for readers that are not the runtime.

Health probes, the metrics endpoint and telemetry read a :class:`Snapshot`, never the
runner's parts: what they may see is this one shape, and the runtime can change inside
without them. :data:`LIVE` lists the runners of this process, for telemetry, which reads
them from a thread of its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from awa_fast.db.connections import Database


@dataclass(frozen=True, slots=True)
class Snapshot:
    queues: Mapping[str, int]  # concurrency, by queue
    weights: Mapping[str, tuple[int, int]]  # weighted mode: (min_workers, weight), by queue
    in_flight: Mapping[str, int]  # attempts running (and units a claim holds), by queue
    running: Mapping[str, int]  # of those, attempts whose handler has started, by queue
    prefetched: Mapping[str, int]  # of those, claimed ahead and not started yet, by queue
    claimed: Mapping[str, int]  # jobs claimed, by queue
    claims: Mapping[str, int]  # claim statements run, by queue
    started_on_standby: Mapping[str, int]  # jobs started on standby claims, by queue
    committed: Mapping[str, int]  # outcomes settled, by target (lower-case name)
    stale: int  # outcomes dropped: their attempt no longer owned the job
    batches: int
    failed_batches: int
    worker_processes: int
    worker_exits: Mapping[str, int]  # by cause
    leader: bool
    heartbeat_age: float | None  # seconds; None before the host registered
    promoted: int
    rescued: Mapping[str, int]  # by sweep
    deleted: int
    claiming: bool  # a claim loop runs (a maintenance-only host: its maintenance loop)
    heartbeat_alive: bool
    stopping: bool
    loops_down: tuple[str, ...]  # long-lived loops waiting for their restart
    # Jobs by counted state, then queue, from the database's counters: read by a scrape
    # for the depth gauges (awa_fast.runtime.metrics.read_depths), never by the runner.
    depths: Mapping[str, Mapping[str, int]] | None = None


class Observed(Protocol):
    database: Database

    def snapshot(self) -> Snapshot: ...


class LiveRunners:
    """The runners of this process between their start() and stop(), for a reader that is
    on none of their loops (awa_fast.telemetry). While it watches, each runner that stops
    is also handed to it once, after stop(), so that its final counts are read too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # runners start and stop on any loop's thread
        self._live: dict[Observed, None] = {}  # in start order
        self._stopped: list[Observed] | None = None  # None: nobody watches
        self._parents: list[Observed] = []  # a forked child's inheritance: see _forget
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """In a forked child (a pool worker, say): none of these runners runs here, so the
        child starts with none, and with a free lock (a parent thread may have held it at
        the fork). They stay referenced: a child finalizes nothing of its parent's."""
        self._lock = threading.Lock()
        self._parents += self._live
        self._live, self._stopped = {}, None

    def add(self, runner: Observed) -> None:
        with self._lock:
            self._live[runner] = None

    def remove(self, runner: Observed) -> None:
        with self._lock:
            if runner in self._live:
                del self._live[runner]
                if self._stopped is not None:
                    self._stopped.append(runner)

    def watch(self, on: bool) -> None:
        """Start (or stop) keeping stopped runners for :meth:`take`."""
        with self._lock:
            self._stopped = [] if on else None

    def databases(self) -> set[Database]:
        """The databases the live runners use."""
        with self._lock:
            return {runner.database for runner in self._live}

    def take(self) -> tuple[list[Snapshot], list[Snapshot]]:
        """Snapshots of the live runners, and of those stopped since the last take
        (forgotten now)."""
        with self._lock:
            stopped: list[Observed] = []
            if self._stopped is not None:
                stopped, self._stopped = self._stopped, []
            live = list(self._live)
        return [r.snapshot() for r in live], [r.snapshot() for r in stopped]


LIVE = LiveRunners()
