"""The batch operations service: applies the oldest unfinished batch operation one step at
a time (:mod:`awa_fast.maintenance.batch`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance import batch
from awa_fast.maintenance.leader import Leader, has_work


@dataclass(frozen=True, slots=True)
class BatchOpsConfig:
    """Every ``interval``, look for an operation; each step changes ``chunk`` jobs at most.
    While one has work left, its steps follow each other without waiting an interval."""

    interval: float = 1.0
    chunk: int = 1000


class BatchOps:
    """Steps operations under ``leader``'s term, recording ``runner_instance`` as the
    runner that started and finalized them."""

    def __init__(
        self, *, leader: Leader, runner_instance: uuid.UUID, config: BatchOpsConfig
    ) -> None:
        self.leader = leader
        self.runner_instance = runner_instance
        self.config = config

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> batch.BatchStep | None:
        """Start the oldest unfinished operation, apply one chunk of it, or finalize it;
        returns what the step did, None when no operation is unfinished. A look comes
        first, unfenced: a leader with no operations opens no transaction for them."""
        if not await has_work(conn, Q.batch_operation_due):
            return None
        async with self.leader.fenced(conn):
            return await batch.step(
                conn, chunk=self.config.chunk, runner_instance=self.runner_instance
            )
