"""The shape every maintenance service has: a name, a frozen config that holds the single
source of its defaults (an ``interval`` among them), and ``run_once``, one pass that tests
drive directly. The leader's loop (:mod:`awa_fast.maintenance.service`) runs each service's
:meth:`Service.step` when it falls due, and asks it nothing else.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Protocol, TypeVar

import psycopg

from awa_fast.maintenance.leader import Leader
from awa_fast.maintenance.stats import MaintenanceStats


class Interval(Protocol):
    """What the loop reads of a service's config."""

    @property
    def interval(self) -> float: ...


C = TypeVar("C", bound=Interval)


class Service(Generic[C]):
    """One maintenance service: passes under ``leader``'s term, counted in ``stats``."""

    name: ClassVar[str]

    def __init__(self, *, leader: Leader, stats: MaintenanceStats, config: C) -> None:
        self.leader = leader
        self.stats = stats
        self.config = config

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> object:
        """One pass; what it did, for tests and logs."""
        raise NotImplementedError

    async def step(self, conn: psycopg.AsyncConnection[Any]) -> float:
        """The pass the loop runs when this service is due; returns the seconds until it is
        due again: its interval, unless the service knows better (work left, a job due)."""
        await self.run_once(conn)
        return self.config.interval
