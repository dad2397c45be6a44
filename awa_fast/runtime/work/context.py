"""What a worker gets of the runtime: the ring, the in-flight table, its executor.

The runner builds one :class:`WorkerContext` and hands it to its workers (this process or
forked processes) instead of itself: a worker sees the capacity layout, the shared
in-flight table and outcome ring, and the few calls back it needs, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from awa_fast._core import InFlight, OutcomeRing
from awa_fast.db.connections import Database
from awa_fast.lifecycle import transitions as tr
from awa_fast.lifecycle.followups import FollowupRegistry
from awa_fast.runtime.capacity import Capacity
from awa_fast.runtime.claimed import Claimed, Delivered
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.work.attempt_writer import AttemptWriter
from awa_fast.runtime.work.completion import InTransaction
from awa_fast.runtime.work.executor import Executor
from awa_fast.worker import Registry


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """The narrow view of the runtime a worker gets."""

    database: Database
    config: RunnerConfig
    capacity: Capacity
    registry: Registry
    followups: FollowupRegistry  # those of completions in a handler's transaction
    inflight: InFlight
    ring: OutcomeRing
    wake: Callable[[], None]  # claim again: a worker came or went
    capacity_freed: Callable[[], None]  # handlers returned (safe from any thread)
    flagged_workers: Callable[[], set[int]]  # workers running an attempt flagged to stop

    def make_executor(self, threads: ThreadPoolExecutor | None = None) -> Executor:
        """The executor a worker (local or forked) runs handlers with."""
        return Executor(
            self.registry,
            self.ring,
            self.inflight,
            self.config.backoff,
            AttemptWriter(self.database),
            threads,
            dlq_queues=self.config.dlq_for(list(self.capacity.queues)),
            completion=InTransaction(self.followups),
            traces=self.config.traces,
        )

    def give_back(self, jobs: Sequence[Claimed], *, reason: str) -> None:
        """Claimed jobs whose handler never started: back to available through the
        committer, their attempt not counted."""
        push_unstarted(self.ring, self.registry, jobs, reason=reason)

    def release_unstarted(self, delivered: Sequence[Delivered], *, reason: str) -> None:
        """Delivered jobs whose handler never started: given back, each freeing its slot
        and capacity unit."""
        self.give_back([d.job for d in delivered], reason=reason)
        for d in delivered:
            self.inflight.release_slot(d.slot)  # frees its capacity unit too


def push_unstarted(
    ring: OutcomeRing, registry: Registry, jobs: Sequence[Claimed], *, reason: str
) -> None:
    """Push a RELEASED record for each of ``jobs``."""
    released = tr.Transition(tr.Target.RELEASED, reason=reason)
    for job in jobs:
        ring.push(*tr.record(job.id, job.run_lease, registry.index_of(job.kind), released))
