"""The heartbeat: this host's row, its running attempts, their cancel flags, eviction.

Every interval, one statement renews the host's row and one renews every attempt running
here, marking those claimed ahead and not started yet as held. An attempt the host no
longer owns (cancelled, rescued, resolved) or past its deadline gets its cancel flag; a
handler still running ``deadline_grace`` after that has its worker recycled. The host's
descriptors are marked seen on the same connection when a refresh is due, so that
retention keeps them while the host runs.

Beats go over the host's own connection, whose session holds its lock
(awa_fast.runtime.host.row). Between beats the loop waits on that connection, so that one lost
is opened again at once and the lock taken again first thing; while the database cannot
be reached, beats are tried again after a short delay, not a whole interval, so that the
host is live again as soon as the database is back.

A host whose connection closes gives back the jobs it holds unstarted (prefetched): they
are flagged, and each is given back when its turn to start comes, not started. The server
may have gone for good, and the primary that follows may lack what the last moment
committed (an asynchronous standby's loss, docs/high-availability.md): a claim, or the job's
very insert. A job started from there would run without a row to own it, or beside its
claim on the new primary. Given back instead, each is claimed again where the rows are;
a give-back that finds no attempt of its own changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa_fast import descriptors
from awa_fast._core import InFlight
from awa_fast.db.connections import Int8Array, attempts_params
from awa_fast.db.queries import Q
from awa_fast.descriptors import Descriptor
from awa_fast.errors import ServerIsStandby
from awa_fast.runtime.capacity import Workers
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.host.flags import Attempt, CancelFlags
from awa_fast.runtime.host.row import Host
from awa_fast.runtime.loops import retry_delay

log = logging.getLogger("awa_fast.heartbeat")

HELD_BACK = (
    "held unstarted when the host's connection to the database closed: given back, to be "
    "claimed again from whichever server is the primary"
)


@dataclass(frozen=True, slots=True)
class HeartbeatConfig:
    interval: float = 5.0  # seconds between beats
    deadline_grace: float = 5.0  # a flagged handler's time to stop before its worker goes
    descriptor_refresh_every: float = 3600.0  # seconds between descriptor refreshes
    # an attempt's, by queue (None: none, RunnerConfig.queue_deadlines)
    deadlines: Mapping[str, float | None] = field(default_factory=dict)

    @classmethod
    def of(cls, config: RunnerConfig, queues: Sequence[str]) -> HeartbeatConfig:
        return cls(
            config.heartbeat_interval,
            config.deadline_grace,
            config.descriptor_refresh_every(),
            {queue: config.deadline_for(queue) for queue in queues},
        )


@dataclass(slots=True)
class Beat:
    """What one beat did."""

    registered_again: bool = False  # the host's row was gone (taken for dead)
    flagged: list[tuple[Attempt, str]] = field(default_factory=list)  # set this beat, why
    evicted: list[Attempt] = field(default_factory=list)  # handlers past their grace


class Heartbeat:
    def __init__(
        self,
        config: HeartbeatConfig,
        *,
        host: Host,
        inflight: InFlight | None,
        flags: CancelFlags | None,
        workers: Workers | None,
        descriptors: Sequence[Descriptor],
    ) -> None:
        """``inflight``, ``flags`` and ``workers`` None: a host that runs no attempts (a
        maintenance-only one), whose beats renew its row and descriptors alone."""
        self.config = config
        self._host = host
        self._inflight = inflight
        self._flags = flags
        self._workers = workers
        self._descriptors = list(descriptors)
        self._descriptors_due = time.monotonic() + config.descriptor_refresh_every
        self._task: asyncio.Task[None] | None = None
        # Flagged by hold_back(): given back at their turn, never evicted (one that started
        # in the same instant runs on, its outcome guarded by its lease as ever).
        self._held_back: set[Attempt] = set()

    def alive(self, now: float) -> bool:
        """The loop runs and its last beat landed within two intervals."""
        age = self._host.age(now)
        running = self._task is not None and not self._task.done()
        return running and age is not None and age <= 2 * self.config.interval

    async def run(self, stopping: Callable[[], bool]) -> None:
        """Beat every interval on the host's connection until ``stopping()``; the
        connection stays open after, for the runner to close once the row is gone."""
        self._task = asyncio.current_task()
        failures = 0
        while not stopping():
            try:
                await self.beat_once()
            except psycopg.OperationalError as exc:
                failures += 1
                if failures == 1:
                    log.warning("heartbeat failed (%s); retrying", exc)
                if isinstance(exc, ServerIsStandby):  # not the primary (any more)
                    await self._host.close()
                if not self._host.connected():
                    self.hold_back()
                await asyncio.sleep(retry_delay(failures))
                continue
            if failures:
                log.info("heartbeat back after %d failed tries", failures)
            failures = 0
            try:
                await self._host.wait(self.config.interval)
            except psycopg.OperationalError:  # lost: hold back, and beat again at once
                self.hold_back()

    def hold_back(self) -> list[Attempt]:
        """Flag every attempt held here unstarted, to be given back at its turn: the
        connection to the database closed (the module's docstring says why). Returns those
        flagged now; each retry of a long outage finds the same ones flagged already."""
        if self._inflight is None or self._flags is None:
            return []  # a maintenance-only host holds no jobs
        held = [(job, lease) for job, lease, _, started in self._inflight.attempts() if not started]
        new = [attempt for attempt in held if attempt not in self._held_back]
        for job, lease in new:
            self._flags.flag(job, lease, why=HELD_BACK)
        self._held_back.update(new)
        if new:
            log.warning(
                "connection to the database closed: %d jobs held unstarted are given back",
                len(new),
                extra={"jobs": len(new)},
            )
        return new

    async def beat_once(self) -> Beat:
        """One beat, on the host's connection (opened again if it was lost)."""
        beat = Beat()
        conn = await self._host.connection()
        if not await self._host.beat(conn):
            log.warning(
                "host was taken for dead and its attempts rescued; registered again as %s",
                self._host.id,
            )
            beat.registered_again = True
        await self.refresh_descriptors(conn)
        if self._inflight is None or self._flags is None or self._workers is None:
            return beat
        ids, leases = self._inflight.running()
        running = set(zip(ids, leases, strict=True))
        waiting = {
            (job, lease) for job, lease, _, started in self._inflight.attempts() if not started
        }
        if running:
            beat.flagged = await self._beat_attempts(conn, running, waiting)
        for attempt, why in beat.flagged:
            self._flags.flag(*attempt, why=why)
        self._flags.forget_ended(running)
        self._held_back &= running
        grace = self.config.deadline_grace
        # A flagged job still waiting in its worker is given back when its turn comes.
        spared = waiting | self._held_back
        for attempt, why in self._flags.ignored(grace=grace, besides=spared):
            beat.evicted.append(attempt)
            self._workers.evict(
                *attempt, reason=f"{why}; its handler ignored cancellation for {grace:g}s"
            )
        return beat

    async def _beat_attempts(
        self, conn: psycopg.AsyncConnection[Any], running: set[Attempt], waiting: set[Attempt]
    ) -> list[tuple[Attempt, str]]:
        """Renew the attempts held here, and the deadlines of those ``waiting`` to start;
        the attempts to flag, and why."""
        newest: dict[int, int] = {}  # an older attempt of a job cannot own its row
        for job_id, lease in running:
            newest[job_id] = max(lease, newest.get(job_id, lease))
        params = {
            **attempts_params(newest),
            "host_id": self._host.id,
            "waiting": Int8Array([job_id for job_id, lease in waiting if newest[job_id] == lease]),
            "deadlines": Jsonb(dict(self.config.deadlines)),
        }
        cur = await conn.execute(Q.job_heartbeat_many, params)
        owned = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
        flagged = []
        for attempt in running:
            overdue = owned.get(attempt)
            if overdue is None:
                flagged.append((attempt, "no longer owned (cancelled, rescued or resolved)"))
            elif overdue:
                flagged.append((attempt, "deadline exceeded"))
        return flagged

    async def refresh_descriptors(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Mark this host's descriptors seen, when a refresh is due."""
        now = time.monotonic()
        if now < self._descriptors_due:
            return
        await descriptors.refresh(conn, self._descriptors)
        self._descriptors_due = now + self.config.descriptor_refresh_every
