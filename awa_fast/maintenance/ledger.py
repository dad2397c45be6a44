"""The ledger pruner: deletes the claim ledger's rows that claims no longer read.

A window claim (migration 0027) appends a row to ``awa_fast.claim_windows`` for each lane
it advances and reads only each lane's newest: the rows behind it are history. Deleting
them is the leader's, fenced as its other writes are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.leader import Leader


@dataclass(frozen=True, slots=True)
class LedgerPrunerConfig:
    """Every ``interval``, prune the claim ledger, unless a transaction has held the xmin
    horizon for ``held_for`` seconds: far longer than any claim or commit, so that only a
    real hold stops it, and short, so that a hold leaves a few seconds of pruned rows."""

    interval: float = 10.0
    held_for: float = 5.0


class LedgerPruner:
    """Prunes under ``leader``'s term."""

    def __init__(self, *, leader: Leader, config: LedgerPrunerConfig) -> None:
        self.leader = leader
        self.config = config

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Delete each lane's rows behind its newest; returns how many went (none while a
        held horizon would keep them as dead tuples: claim_windows_prune)."""
        async with self.leader.fenced(conn):
            cur = await conn.execute(Q.claim_windows_prune, {"held_s": self.config.held_for})
            row = await cur.fetchone()
        return int(row[0]) if row else 0
