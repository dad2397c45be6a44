"""A maintenance-only host: leader election and every maintenance service, with no job
claimed or run here (``serve --maintenance-only``, ``client.start(maintenance_only=True)``).

Deployments that keep the leader's work off the hosts that run jobs (so that a busy job
host never delays promotion and rescue, and a maintenance pass never takes a job host's
CPU) run one or more of these, and their job hosts with ``run_maintenance=False``. It is
the runner without the parts that claim and run: no claim loops, listener, committer,
outcome ring, in-flight table or workers, and no queues. What it keeps is what the
leader's work and an operator need: its row in ``awa_fast.hosts`` with its lock and
heartbeat (the dashboard lists it; it holds no attempt for anyone to rescue), the
periodic jobs and descriptors its client declares, lifecycle hooks for the attempts its
rescues end, and ``/metrics`` and ``/health``. Its health's ``poll_loop_alive`` reads its
maintenance loop, the loop it lives for.
"""

from __future__ import annotations

import asyncio
import logging
import time

from awa_fast.db.connections import Database
from awa_fast.db.migrate import require_migrated
from awa_fast.lifecycle.handlers import Handlers
from awa_fast.lifecycle.hooks import HookDispatcher
from awa_fast.maintenance.service import Maintenance
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.host.heartbeat import Heartbeat, HeartbeatConfig
from awa_fast.runtime.host.row import Host
from awa_fast.runtime.loops import Loops
from awa_fast.runtime.metrics import serve_metrics
from awa_fast.runtime.runner import at_start, register
from awa_fast.runtime.snapshot import LIVE, Snapshot

log = logging.getLogger("awa_fast.runner")


class MaintenanceHost:
    """The host side of a client that only maintains: elects, maintains, heartbeats."""

    def __init__(self, dsn: str, handlers: Handlers, config: RunnerConfig) -> None:
        self.database = database = Database(dsn, pooled=config.transaction_pooling)
        self.handlers = handlers
        self.config = config
        self.queues: dict[str, int] = {}  # runs none
        self.hooks = HookDispatcher(handlers.hooks)
        self.host = Host(database, session=database.session(direct=config.direct_dsn))
        self._stopping = False
        self.loops = Loops(lambda: self._stopping)
        self.heartbeat = Heartbeat(
            HeartbeatConfig.of(config, []),
            host=self.host,
            inflight=None,
            flags=None,
            workers=None,
            descriptors=[*handlers.queue_descriptors.values(), *handlers.kind_descriptors.values()],
        )
        self.maintenance = Maintenance(
            database, config.maintenance(), followups=handlers.followups, hooks=self.hooks
        )
        self._services: list[asyncio.Task[None]] = []
        self._maintaining: asyncio.Task[None] | None = None
        self._metrics: asyncio.Server | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping

    def snapshot(self) -> Snapshot:
        """This host's numbers now: the leader's, none of a runner's claims or workers."""
        now = time.monotonic()
        upkeep = self.maintenance.stats
        maintaining = self._maintaining
        return Snapshot(
            queues={},
            weights={},
            in_flight={},
            running={},
            prefetched={},
            claimed={},
            claims={},
            started_on_standby={},
            committed={},
            stale=0,
            batches=0,
            failed_batches=0,
            worker_processes=0,
            worker_exits={},
            leader=self.maintenance.leader.is_leader,
            heartbeat_age=self.host.age(now),
            promoted=upkeep.promoted,
            rescued=dict(upkeep.rescued),
            deleted=upkeep.deleted,
            claiming=maintaining is not None and not maintaining.done(),
            heartbeat_alive=self.heartbeat.alive(now),
            stopping=self._stopping,
            loops_down=self.loops.down,
        )

    def prefork(self) -> None:
        """Nothing to fork: no workers."""

    async def start(self) -> None:
        """Metrics first (a port in use refuses to start with nothing running), then the
        schema check, the declarations and the host's row, then the loops."""
        if self.config.metrics_port is not None:
            self._metrics = await serve_metrics(self, self.config.metrics_port)
        try:
            await at_start(
                lambda: asyncio.to_thread(require_migrated, self.database.dsn),
                what="schema check",
            )
            await at_start(
                lambda: register(self.database, self.handlers, self.host),
                what="host registration",
            )
        except BaseException:
            await self.host.forget()
            await self._stop_metrics()
            raise
        self.hooks.start()
        run, stopping = self.loops.run, lambda: self._stopping
        self._maintaining = asyncio.create_task(
            run("maintenance", lambda: self.maintenance.run(stopping))
        )
        heartbeat = asyncio.create_task(run("heartbeat", lambda: self.heartbeat.run(stopping)))
        self._services = [heartbeat, self._maintaining]
        log.info("maintenance-only host %s started: it claims no jobs", self.host.id)
        LIVE.add(self)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop the loops as a runner's stop does (the maintenance loop releases its term
        as it ends), then remove the row. ``timeout`` is taken for the runner's sake:
        there are no handlers to wait for."""
        self._stopping = True
        try:
            for task in self._services:
                task.cancel()
            await asyncio.gather(*self._services, return_exceptions=True)
            await self.host.forget()
            self.hooks.stop()
            await self._stop_metrics()
        finally:
            LIVE.remove(self)

    async def _stop_metrics(self) -> None:
        server, self._metrics = self._metrics, None
        if server is not None:
            server.close()
            await server.wait_closed()
