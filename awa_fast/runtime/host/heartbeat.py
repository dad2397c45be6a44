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
"""

from __future__ import annotations

import asyncio
import contextlib
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
from awa_fast.runtime.capacity import Workers
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.host.flags import Attempt, CancelFlags
from awa_fast.runtime.host.row import Host
from awa_fast.runtime.loops import retry_delay

log = logging.getLogger("awa_fast.heartbeat")


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
                await asyncio.sleep(retry_delay(failures))
                continue
            if failures:
                log.info("heartbeat back after %d failed tries", failures)
            failures = 0
            with contextlib.suppress(psycopg.OperationalError):  # lost: beat again at once
                await self._host.wait(self.config.interval)

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
        grace = self.config.deadline_grace
        # A flagged job still waiting in its worker is given back when its turn comes.
        for attempt, why in self._flags.ignored(grace=grace, besides=waiting):
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
