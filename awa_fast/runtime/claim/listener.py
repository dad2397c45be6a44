"""The listener: LISTEN for news, and act on it only once the rows confirm it.

Anyone who can connect may NOTIFY, so a note is a hint (docs/security.md): a note of new
jobs or packs wakes claiming, which claims only what is there; a standby note has this
host collect its spent standby claims, reading back which jobs started; a cancel note
flags an attempt only once a read finds it cancelled. Notes that arrive together are
handled together, with one read each kind.

LISTEN needs a session of its own: behind a transaction pooler the listener connects to
the direct URL, and without one it does not listen at all (docs/pgbouncer.md). Nothing is
lost but time: claiming polls, standby claims are collected at that poll, and heartbeats
find cancelled attempts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from awa_fast._core import InFlight
from awa_fast.db.connections import Database, attempts_params
from awa_fast.db.queries import Q
from awa_fast.logs import Throttled
from awa_fast.runtime.claim.claimer import Claimer, connect_claimer
from awa_fast.runtime.host.flags import Attempt, CancelFlags
from awa_fast.runtime.host.row import Host
from awa_fast.runtime.loops import retry_delay

log = logging.getLogger("awa_fast.listener")

# New jobs, news of packs, admin cancels, and jobs started on a host's standby claims.
CHANNELS = ("awa_fast_jobs", "awa_fast_packs", "awa_fast_cancel", "awa_fast_standby")


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    # at most, between tries to LISTEN again (backing off from 0.1 s); claiming polls meanwhile
    reconnect_delay: float = 1.0


@dataclass(slots=True)
class Heard:
    """What one batch of notes did."""

    woke: bool = False
    collected: bool = False  # standby claims collected
    flagged: list[Attempt] = field(default_factory=list)  # cancels confirmed
    not_understood: int = 0


class Listener:
    def __init__(
        self,
        database: Database | None,
        config: ListenerConfig,
        *,
        host: Host,
        claimer: Claimer,
        inflight: InFlight,
        flags: CancelFlags,
    ) -> None:
        self.database = database
        self.config = config
        self._host = host
        self._claimer = claimer
        self._inflight = inflight
        self._flags = flags
        self._queue_index = {queue: index for index, queue in enumerate(claimer.queues)}
        self._not_understood = Throttled(log)

    async def run(self, stopping: Callable[[], bool]) -> None:
        """Listen until ``stopping()``; on a lost connection, listen again after a delay
        (claiming polls meanwhile). Without a URL to listen on, return at once."""
        if self.database is None:
            log.warning(
                "not listening: the database URL goes through a transaction pooler and no "
                "direct URL was given; new jobs wait for claiming's next poll, cancels "
                "for the next heartbeat"
            )
            return
        failures = 0
        while not stopping():
            try:
                # A claim connection: standby collects run on it.
                conn = await connect_claimer(self.database, application_name="awa-fast listener")
                async with conn:
                    for channel in CHANNELS:
                        await conn.execute(f"LISTEN {channel}")
                    failures = 0
                    self._missed_news()
                    cur = conn.cursor(binary=True)
                    while True:
                        # what arrived together; notes that come during heard() wait
                        notes = [note async for note in conn.notifies(stop_after=1)]
                        await self.heard(cur, notes, stopping=stopping())
            except psycopg.OperationalError as exc:
                failures += 1
                if failures == 1:
                    log.warning("LISTEN connection lost (%s); polling until it is back", exc)
                # Soon after a failover, not a whole poll interval later: the new primary
                # may take a few tries.
                await asyncio.sleep(min(self.config.reconnect_delay, retry_delay(failures)))

    def _missed_news(self) -> None:
        """News may have gone unheard while not listening."""
        self._claimer.packs.heard()
        if self._claimer.standby is not None:
            self._claimer.standby.heard()
        self._claimer.wake()

    async def heard(
        self, cur: psycopg.AsyncCursor[Any], notes: list[psycopg.Notify], *, stopping: bool
    ) -> Heard:
        """Act on notes heard together, on the listener's connection ``cur``. Claimers are
        woken after a standby collect: a job started on a standby claim of ours takes its
        unit before a claim round can take them all."""
        done = Heard()
        cancels: dict[int, int] = {}  # job id -> run lease
        standby = False
        for note in notes:
            try:
                if note.channel == "awa_fast_cancel":
                    job_id, lease = parse_cancel(note.payload)
                    cancels[job_id] = lease
                elif note.channel == "awa_fast_standby":
                    standby = standby or int(note.payload) == self._host.id
                elif note.payload in self._queue_index:
                    if note.channel == "awa_fast_packs":
                        self._claimer.packs.heard(self._queue_index[note.payload])
                    done.woke = True
            except ValueError:
                done.not_understood += 1
                self._not_understood.warning(
                    "a NOTIFY on %s not understood: %.200r", note.channel, note.payload
                )
        if standby:
            done.collected = await self._standby_heard(cur, stopping=stopping)
        if done.woke:
            self._claimer.wake()
        if cancels:
            done.flagged = await self._confirm_cancels(cur, cancels)
        return done

    async def _standby_heard(self, cur: psycopg.AsyncCursor[Any], *, stopping: bool) -> bool:
        """Collect our spent standby claims at once, on this connection, and wake a
        claimer to offer a claim again. Stopping, the jobs are left to the collect after
        the drain, which gives them back."""
        standby = self._claimer.standby
        if standby is None:
            return False
        standby.heard()
        if not stopping:
            await self._claimer.collect(cur)
        self._claimer.wake()
        return not stopping

    async def _confirm_cancels(
        self, cur: psycopg.AsyncCursor[Any], noted: dict[int, int]
    ) -> list[Attempt]:
        """Flag the attempts running here that ``noted`` names and that an admin has
        really cancelled (one read for all of them)."""
        running = set(zip(*self._inflight.running(), strict=True))
        asked = {job_id: lease for job_id, lease in noted.items() if (job_id, lease) in running}
        if not asked:
            return []
        await cur.execute(Q.job_cancelled_attempts, attempts_params(asked))
        confirmed = [(job_id, lease) for job_id, lease in await cur.fetchall()]
        for job_id, lease in confirmed:
            self._flags.flag(job_id, lease, why="cancelled by admin")
        return confirmed


def parse_cancel(payload: str) -> tuple[int, int]:
    """The attempt a note on awa_fast_cancel names, ``<job id>:<run lease>`` (ValueError
    for anything else)."""
    job_id, _, lease = payload.partition(":")
    return int(job_id), int(lease)
