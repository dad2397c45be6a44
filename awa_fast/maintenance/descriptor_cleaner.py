"""The descriptor cleaner: deletes the queue and kind descriptors no host has refreshed
within their retention, that is what code no longer running declared. Live hosts refresh
theirs (:meth:`awa_fast.runtime.host.heartbeat.Heartbeat.refresh_descriptors`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg

from awa_fast import descriptors
from awa_fast.maintenance.base import Service

log = logging.getLogger("awa_fast.maintenance")


@dataclass(frozen=True, slots=True)
class DescriptorCleanerConfig:
    """Every ``interval``, delete descriptors unrefreshed for ``retention`` seconds
    (0: never)."""

    interval: float = 60.0
    retention: float = 30 * 24 * 3600.0


class DescriptorCleaner(Service[DescriptorCleanerConfig]):
    """Deletes under ``leader``'s term, counting in ``stats``."""

    name = "descriptor_cleaner"

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Delete the stale descriptors; returns how many went."""
        retention = self.config.retention
        if not retention:
            return 0
        async with self.leader.fenced(conn):
            deleted = await descriptors.delete_stale(conn, retention=retention)
        if deleted:
            log.info("deleted %d descriptors unrefreshed for %g s", deleted, retention)
        self.stats.descriptors_deleted += deleted
        return deleted
