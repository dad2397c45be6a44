"""A client's health, for readiness and liveness probes: does it reach Postgres, and, when
it runs handlers, are its claim loops and heartbeat alive and none of its loops down. The
Awa SDK's ``HealthCheck`` shape and values (with one field more, ``loops_down``), so a
probe written for it reads the same fields and gets the same answers: ``healthy`` only
while the client runs handlers (a producer, or a client shut down, reads
``postgres_connected``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg

from awa_fast.db.queries import Q
from awa_fast.runtime.snapshot import Observed, Snapshot

# A probe answers within this, reachable or not: a pool would wait its whole timeout for a
# connection to a server that is down.
CONNECT_TIMEOUT = 5


@dataclass(frozen=True, slots=True)
class QueueHealth:
    in_flight: int  # attempts of this queue running on this client (not those held ahead)
    available: int  # jobs of this queue waiting to be claimed, by any client
    max_workers: int  # this client's concurrency for the queue

    # The SDK's weighted-mode fields (global_max_workers): the queue's guaranteed minimum,
    # its weight in sharing the rest, and how many of its running attempts are past its
    # minimum, on the shared pool. None for a queue outside weighted mode, as in the SDK.
    min_workers: int | None = None
    weight: int | None = None
    overflow_held: int | None = None


@dataclass(frozen=True, slots=True)
class HealthCheck:
    postgres_connected: bool
    running: bool  # the client runs handlers (started and not shut down)
    poll_loop_alive: bool  # its claim loops run (a maintenance-only host: its maintenance)
    heartbeat_alive: bool
    shutting_down: bool
    leader: bool  # this client is the maintenance leader of its database
    queues: Mapping[str, QueueHealth]
    # Not in the SDK's shape: the runtime's long-lived loops that ended by an exception and
    # wait for their restart (awa_fast.runtime.loops).
    loops_down: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        """The client runs handlers, reaches Postgres, claims and heartbeats, none of its
        loops is down, and it is not shutting down. False for a client never started or
        shut down, as in the Awa SDK: a probe of a worker must fail once it stops working.
        A producer's probe reads ``postgres_connected``."""
        serving = self.poll_loop_alive and self.heartbeat_alive and not self.shutting_down
        serving = serving and not self.loops_down
        return self.running and self.postgres_connected and serving


def available(dsn: str, queues: Sequence[str]) -> dict[str, int] | None:
    """Available jobs per queue in ``queues``; None when Postgres cannot be reached."""
    try:
        with psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT,
            application_name="awa-fast health",
        ) as conn:
            rows = conn.execute(Q.queue_available, {"queues": list(queues)}).fetchall()
    except psycopg.OperationalError:
        return None
    counts = dict.fromkeys(queues, 0)
    counts.update({queue: int(count) for queue, count in rows})
    return counts


def health_of(runtime: Snapshot | None, counts: Mapping[str, int] | None) -> HealthCheck:
    """The health of a client whose runner reads ``runtime`` (None: it runs no handlers),
    with ``counts`` from :func:`available`."""
    if runtime is None:
        return HealthCheck(counts is not None, False, False, False, False, False, {})
    return HealthCheck(
        postgres_connected=counts is not None,
        running=True,
        poll_loop_alive=runtime.claiming,
        heartbeat_alive=runtime.heartbeat_alive,
        shutting_down=runtime.stopping,
        leader=runtime.leader,
        loops_down=runtime.loops_down,
        queues={
            queue: _queue_health(runtime, queue, concurrency, (counts or {}).get(queue, 0))
            for queue, concurrency in runtime.queues.items()
        },
    )


def _queue_health(runtime: Snapshot, queue: str, concurrency: int, available: int) -> QueueHealth:
    running = runtime.running[queue]
    weighted = runtime.weights.get(queue)
    if weighted is None:
        return QueueHealth(running, available, concurrency)
    low, weight = weighted
    return QueueHealth(running, available, concurrency, low, weight, max(0, running - low))


async def probe(dsn: str, runner: Observed | None) -> HealthCheck:
    """The health of a client on ``dsn`` whose runner is ``runner`` (None: it runs no
    handlers), from an event loop (:func:`available` blocks, so it runs in a thread). The
    snapshot is taken after the database answers: the runner's state as the probe returns."""
    queues = list(runner.snapshot().queues) if runner is not None else []
    counts = await asyncio.to_thread(available, dsn, queues)
    return health_of(runner.snapshot() if runner is not None else None, counts)
