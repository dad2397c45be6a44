"""The rings' rotation: empties the sealed partition of the standby claims, the claim ledger
and jobs_hot by TRUNCATE (migrations 0028 and 0029).

Each ring is a table in two partitions, written to the one its sequence names. A pass that
finds enough to free copies the sealed partition's rows still wanted (every standby claim;
each ledger lane's newest row; every job still in jobs_hot) into the one in use, truncates
the sealed one and moves writers to it, in one fenced transaction
(``awa_fast.ring_rotate``). A truncate frees what
the rows churned through whatever the xmin horizon, where deleting them would leave dead
tuples that no vacuum may remove while a transaction holds it. The sealed partition's lock
is never waited for: a pass that does not get it at once leaves the ring to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.base import Service

RINGS = ("standby", "ledger", "hot")


@dataclass(frozen=True, slots=True)
class RingsConfig:
    """Every ``interval``, rotate each ring that has enough to free: ``least`` rows for the
    standby claims and the ledger, ``jobs_least`` dead versions for jobs_hot. A rotation
    makes the ring's readers wait for its commit, while what a held horizon leaves in a
    ring between rotations makes them walk it: at 500 jobs/s under a hold, 250 kept pickup
    p50 and p99 within 1.5x of a clean run's (benches/RESULTS.md, "Design measurements").
    Nothing walks jobs_hot's dead versions (claims start at their lane's position, the rest
    look jobs up by id), and each of its rotations, a TRUNCATE whose commit always waits
    for its flush, holds every statement on jobs_hot for a few milliseconds: it turns less
    often."""

    interval: float = 1.0
    least: int = 250
    jobs_least: int = 1000


class Rings(Service[RingsConfig]):
    """Rotates under ``leader``'s term, counting the partitions truncated in ``stats``."""

    name = "rings"

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, str | None]:
        """One pass over each ring; returns what it did to each: 'truncated', 'sealed'
        (writers moved, so that the next pass frees what they wrote), 'busy' (the lock
        was held) or None (too few rows to free)."""
        done: dict[str, str | None] = {}
        for ring in RINGS:
            least = self.config.jobs_least if ring == "hot" else self.config.least
            async with self.leader.fenced(conn):
                params = {"ring": ring, "least": least}
                cur = await conn.execute(Q.ring_rotate, params)
                row = await cur.fetchone()
            done[ring] = row[0] if row is not None else None
        self.stats.rings_truncated += sum(outcome == "truncated" for outcome in done.values())
        return done
