"""The counts' rollup: folds the counters' deltas into their rollup (migration 0025).

Every statement that moves job rows appends its sums by queue and state to one of two
partitions of ``awa_fast.count_deltas``, the one the sequence ``count_slot`` names. Each
pass folds the other partition, sealed by the pass before, into ``count_rollup`` and
``count_minutes`` and truncates it, in one fenced transaction (``awa_fast.count_fold``),
then moves writers over to it, sealing the one they used. Truncating leaves no dead tuple
behind, where deleting the deltas one by one would leave one a delta. Readers add the
rollup and whatever is not folded yet, so a pass that does not happen (no leader, a lock
not granted) makes the counts no less exact, only their reading a little longer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_fast.db.queries import Q
from awa_fast.maintenance.base import Service

log = logging.getLogger("awa_fast.maintenance")


@dataclass(frozen=True, slots=True)
class CountsConfig:
    """Every ``interval``, fold the sealed deltas; their partition's lock is waited for
    ``lock_timeout`` at most (readers of the counts wait behind it meanwhile), then the
    fold waits for the next pass."""

    interval: float = 1.0
    lock_timeout: float = 0.05


class Counts(Service[CountsConfig]):
    """Folds under ``leader``'s term, counting the deltas folded in ``stats``."""

    name = "counts"

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> int | None:
        """Fold the sealed partition if it holds deltas, then seal the current one if it
        does; returns how many deltas were folded, None when the partition's lock was not
        granted in time (writers that picked it before it was sealed still run)."""
        cur = conn.cursor(row_factory=dict_row)
        look = await (await cur.execute(Q.counts_look)).fetchone()
        assert look is not None
        folded = 0
        if look["sealed_rows"]:
            params = {"slot": 1 - look["current"], "lock_timeout_s": self.config.lock_timeout}
            try:
                async with self.leader.fenced(conn):
                    row = await (await conn.execute(Q.counts_fold, params)).fetchone()
            except psycopg.errors.LockNotAvailable:
                log.debug("the sealed count deltas are still being written; folding later")
                return None
            assert row is not None
            folded = int(row[0])
            self.stats.counts_folded += folded
        if look["current_rows"]:
            await conn.execute(Q.counts_move_slot)
        return folded
