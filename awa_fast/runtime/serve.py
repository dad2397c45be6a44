"""Blocking entry points: ``awa-fast serve``, ``client.serve()`` and ``client.run()``.

Workers are forked before the event loop, any thread or any connection exists here. The
first SIGINT/SIGTERM drains (stop claiming, let handlers finish up to the shutdown timeout
while heartbeats go on, flush the committer, exit 0); a second exits at once — the workers
die with the supervisor and whatever was running is rescued later.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any, Protocol

import uvloop

from awa_fast.db.connections import Database
from awa_fast.errors import ConfigError
from awa_fast.lifecycle.handlers import Handlers
from awa_fast.runtime.config import QueueSpec, RunnerConfig, parse_queues
from awa_fast.runtime.maintenance_host import MaintenanceHost
from awa_fast.runtime.options import runner_config
from awa_fast.runtime.runner import Runner
from awa_fast.runtime.work import collector

log = logging.getLogger("awa_fast.serve")
FORCED_EXIT = 1


class Served(Protocol):
    """What serving needs of a client: its database and its handlers."""

    database: Database
    handlers: Handlers
    traces: bool

    def default_queues(self) -> dict[str, int]: ...


def serve(client: Served, queues: QueueSpec | None, *, processes: int | None, **config: Any) -> int:
    """Run ``client``'s handlers until signalled; ``processes=None`` runs them in-process.
    With ``maintenance_only=True``, a maintenance-only host instead, which ignores
    ``processes`` (it has no workers) and refuses ``queues``."""
    settings = runner_config(
        config, queues=queues, pooled=client.database.pooled, traces=client.traces
    )
    runner: Runner | MaintenanceHost
    if settings.maintenance_only:
        runner = maintenance_host(client, queues, settings)
    else:
        parsed = parse_queues(
            queues if queues is not None else client.default_queues(), config=settings
        )
        runner = Runner(client.database.dsn, client.handlers, parsed, settings, processes=processes)
    runner.prefork()
    with collector.settled():  # the process runs jobs until it returns
        return uvloop.run(_until_signalled(runner))


def maintenance_host(
    client: Served,
    queues: QueueSpec | None,
    settings: RunnerConfig,
    *,
    processes: int | None = None,
) -> MaintenanceHost:
    """A maintenance-only host for ``client``; queues or worker processes asked of it are
    refused, rather than silently not run. Its handlers need not be registered."""
    if queues is not None:
        raise ConfigError(
            "a maintenance-only host claims no jobs: give it no queues (serve --queue), "
            f"got {queues!r}"
        )
    if processes is not None:
        raise ConfigError(
            f"a maintenance-only host runs no worker processes: got processes={processes!r}"
        )
    return MaintenanceHost(client.database.dsn, client.handlers, settings)


async def _until_signalled(runner: Runner | MaintenanceHost) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("second %s: exiting now; running jobs will be rescued", sig.name)
            os._exit(FORCED_EXIT)
        log.info("%s: draining (again to exit at once)", sig.name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    await runner.start()
    served = ", ".join(f"{q}={c}" for q, c in runner.queues.items())
    log.info("serving %s", served or "maintenance only")
    await stop.wait()
    await runner.stop()
    return 0
