"""The rings' rotation: empties the standby claims' and the claim ledger's sealed partition
by TRUNCATE (migration 0028).

Each ring is a table in two partitions, written to the one its sequence names. A pass that
finds enough to free copies the sealed partition's rows still wanted (every standby claim;
each ledger lane's newest row) into the one in use, truncates the sealed one and moves
writers to it, in one fenced transaction (``awa_fast.ring_rotate``). A truncate frees what
the rows churned through whatever the xmin horizon, where deleting them would leave dead
tuples that no vacuum may remove while a transaction holds it. The sealed partition's lock
is never waited for: a pass that does not get it at once leaves the ring to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.stats import MaintenanceStats

RINGS = ("standby", "ledger")


@dataclass(frozen=True, slots=True)
class RingsConfig:
    """Every ``interval``, rotate each ring that has ``least`` rows or more to free. A
    rotation makes the ring's readers wait for its commit, while what a held horizon leaves
    in a ring between rotations makes them walk it: at 500 jobs/s under a hold, 250 kept
    pickup p50 and p99 within 1.5x of a clean run's, 2,000 did not (benches/RESULTS.md)."""

    interval: float = 1.0
    least: int = 250


class Rings:
    """Rotates under ``leader``'s term, counting the partitions truncated in ``stats``."""

    def __init__(self, *, leader: Leader, stats: MaintenanceStats, config: RingsConfig) -> None:
        self.leader = leader
        self.stats = stats
        self.config = config

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, str | None]:
        """One pass over each ring; returns what it did to each: 'truncated', 'sealed'
        (writers moved, so that the next pass frees what they wrote), 'busy' (the lock
        was held) or None (too few rows to free)."""
        done: dict[str, str | None] = {}
        for ring in RINGS:
            async with self.leader.fenced(conn):
                params = {"ring": ring, "least": self.config.least}
                cur = await conn.execute(Q.ring_rotate, params)
                row = await cur.fetchone()
            done[ring] = row[0] if row is not None else None
        self.stats.rings_truncated += sum(outcome == "truncated" for outcome in done.values())
        return done
