"""Prometheus metrics and a health endpoint for a runner, on 127.0.0.1 only.

``GET /metrics`` answers in the Prometheus text format (0.0.4), ``GET /health`` with the
client's :class:`~awa_fast.runtime.health.HealthCheck` as JSON (503 when not healthy).
The numbers are the runtime's own counters, read when scraped: serving them costs a job
nothing. The queues' depth gauges come from the database's counters (migration 0025), in
one read per scrape whose cost grows with the queues, not the jobs. The HTTP side is a
minimal HTTP/1.0 server on the runner's loop, written here to add no dependency: one
request per connection, answered and closed. Connections open at once are bounded, and
each must send its request within a short time: every one holds a descriptor of the
runner's process, which forks its workers and opens its connections under the same limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol

import orjson
import psycopg

from awa_fast import backpressure
from awa_fast.db.connections import Database
from awa_fast.db.queries import Q
from awa_fast.runtime import health
from awa_fast.runtime.snapshot import Snapshot

log = logging.getLogger("awa_fast.metrics")

LOOPBACK = "127.0.0.1"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
# A client gets this long to send its request line and headers; a silent one is dropped.
READ_TIMEOUT = 2.0
# Connections served at once; one more is closed as soon as it is accepted.
MAX_CONNECTIONS = 16
MAX_HEADERS = 100


class Reader(Protocol):
    """Where the server reads its numbers: a runner."""

    database: Database

    def snapshot(self) -> Snapshot: ...


# A metric's value: one number, or one per value of its label; None: none yet.
Value = float | Mapping[str, float] | None


def _of_the_process(snapshot: Snapshot) -> Value:
    return None  # a process's metric is read with ``process``, not from a runner


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    type: str  # "counter" or "gauge"
    help: str
    read: Callable[[Snapshot], Value] = _of_the_process
    label: str | None = None  # the label ``read`` keys its numbers by
    # How two runners' readings make their process's (awa_fast.telemetry exports a
    # process): counters and capacities add up.
    combine: Callable[[float, float], float] = operator.add
    # A metric of the process, not of its runners (the producers' backpressure): read
    # here, once, so that a process that runs no runner exports it too.
    process: Callable[[], Value] | None = None

    def reading(self, snapshot: Snapshot) -> Value:
        """The number(s) ``/metrics`` serves for a runner's ``snapshot``."""
        return self.read(snapshot) if self.process is None else self.process()


# The depth gauges: (counted state, what its gauge's name says, what it counts).
DEPTHS = (
    ("available", "available", "waiting to be claimed (packed ones included)"),
    ("running", "running", "running"),
    ("waiting_external", "waiting_external", "waiting for a callback"),
    ("scheduled", "scheduled", "scheduled for later"),
    ("retryable", "retryable", "waiting for their next attempt"),
    ("dlq", "dead_lettered", "in the dead-letter queue"),
)


def _depth(state: str, name: str, what: str) -> Metric:
    return Metric(
        f"awa_fast_queue_jobs_{name}",
        "gauge",
        f"Jobs of the queue {what}, on every host: the database's counts when scraped.",
        lambda s: None if s.depths is None else s.depths.get(state, {}),
        "queue",
        combine=max,  # every runner of a process reads the same counts
    )


METRICS = (
    Metric(
        "awa_fast_jobs_claimed_total",
        "counter",
        "Jobs this runner claimed.",
        lambda s: s.claimed,
        "queue",
    ),
    Metric(
        "awa_fast_claims_total",
        "counter",
        "Claim statements this runner ran: one per claim batch while jobs keep coming, "
        "one per poll interval (or NOTIFY) while the queue is idle.",
        lambda s: s.claims,
        "queue",
    ),
    Metric(
        "awa_fast_jobs_started_on_standby_total",
        "counter",
        "Jobs started in their inserting transaction on this runner's standby claims "
        "(counted among the jobs claimed too), each with no claim statement of its own.",
        lambda s: s.started_on_standby,
        "queue",
    ),
    Metric(
        "awa_fast_outcomes_committed_total",
        "counter",
        "Handler outcomes the committer settled, by the state each asked for "
        "(lost: cut short, retried or failed as attempts allow; stale ones included).",
        lambda s: s.committed,
        "outcome",
    ),
    Metric(
        "awa_fast_outcomes_stale_total",
        "counter",
        "Outcomes dropped because their attempt no longer owned its job.",
        lambda s: s.stale,
    ),
    Metric(
        "awa_fast_commit_batches_total",
        "counter",
        "Batches of outcomes committed.",
        lambda s: s.batches,
    ),
    Metric(
        "awa_fast_commit_failed_batches_total",
        "counter",
        "Batches that could not be committed (their jobs stay running until rescued).",
        lambda s: s.failed_batches,
    ),
    Metric(
        "awa_fast_jobs_in_flight",
        "gauge",
        "Attempts running on this runner (and capacity a claim under way holds).",
        lambda s: s.in_flight,
        "queue",
    ),
    Metric(
        "awa_fast_jobs_prefetched",
        "gauge",
        "Jobs claimed ahead of their worker's capacity to run them, waiting there unstarted "
        "(counted in awa_fast_jobs_in_flight too).",
        lambda s: s.prefetched,
        "queue",
    ),
    Metric(
        "awa_fast_queue_concurrency",
        "gauge",
        "Attempts this runner may run at once.",
        lambda s: s.queues,
        "queue",
    ),
    Metric(
        "awa_fast_worker_processes",
        "gauge",
        "Processes running handlers: forked workers alive, or 1 when they run in-process.",
        lambda s: s.worker_processes,
    ),
    Metric(
        "awa_fast_worker_exits_total",
        "counter",
        "Worker processes that ended, by cause (evicted: killed for a handler past its "
        "deadline; recycled: job or memory limit; retired: drained; crashed: anything "
        "else). Each is replaced unless the pool is stopping: at once, or after a delay "
        "that grows while workers crash soon after their start.",
        lambda s: s.worker_exits,
        "cause",
    ),
    Metric(
        "awa_fast_leader",
        "gauge",
        "1 while this runner is its database's maintenance leader.",
        lambda s: int(s.leader),
        combine=max,
    ),
    Metric(
        "awa_fast_heartbeat_age_seconds",
        "gauge",
        "Seconds since this runner's last heartbeat landed.",
        lambda s: s.heartbeat_age,
        combine=max,  # the stalest
    ),
    Metric(
        "awa_fast_jobs_promoted_total",
        "counter",
        "Scheduled and retryable jobs made available while this runner led.",
        lambda s: s.promoted,
    ),
    Metric(
        "awa_fast_jobs_rescued_total",
        "counter",
        "Attempts rescued while this runner led, by the sweep that found them.",
        lambda s: s.rescued,
        "sweep",
    ),
    Metric(
        "awa_fast_jobs_deleted_total",
        "counter",
        "Finished jobs deleted past their retention while this runner led.",
        lambda s: s.deleted,
    ),
    *(_depth(*depth) for depth in DEPTHS),
    Metric(
        "awa_fast_inserts_backpressure_signalled_total",
        "counter",
        "Backpressure checks of this process that found the queue close to or over the "
        "depth asked: inserts with max_queue_depth that would reach four fifths of it or "
        "pass it (refused), and each time a paced producer held back.",
        label="queue",
        process=lambda: backpressure.PRESSURE.read()[0],
    ),
    Metric(
        "awa_fast_inserts_backpressure_refused_total",
        "counter",
        "Inserts of this process refused with QueueFull: their jobs would have taken the "
        "queue's available jobs past their max_queue_depth.",
        label="queue",
        process=lambda: backpressure.PRESSURE.read()[1],
    ),
)


def read_depths(database: Database) -> dict[str, dict[str, int]] | None:
    """The depth gauges' numbers, by state then queue (a queue with any count has every
    state, zeros included), in one read of the counters; None when Postgres cannot be
    reached or read."""
    states = [state for state, _, _ in DEPTHS]
    try:
        with psycopg.connect(
            database.dsn,
            autocommit=True,
            connect_timeout=health.CONNECT_TIMEOUT,
            application_name="awa-fast metrics",
            prepare_threshold=database.prepare_threshold(),
        ) as conn:
            rows = conn.execute(Q.queue_depths, {"states": states}).fetchall()
    except psycopg.Error as exc:  # the runtime's own numbers are served all the same
        log.debug("the queues' depths could not be read: %s", exc)
        return None
    depths: dict[str, dict[str, int]] = {state: {} for state in states}
    for queue, state, n in rows:
        depths[state][queue] = n
    return depths


def render(snapshot: Snapshot) -> str:
    """Every metric of ``snapshot`` in the Prometheus text exposition format."""
    lines: list[str] = []
    for metric in METRICS:
        lines += (f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} {metric.type}")
        value = metric.reading(snapshot)
        if isinstance(value, Mapping):
            lines += (
                f'{metric.name}{{{metric.label}="{_escape(key)}"}} {number}'
                for key, number in value.items()
            )
        elif value is not None:
            lines.append(f"{metric.name} {value}")
    return "\n".join(lines) + "\n"


def _escape(label_value: str) -> str:
    return label_value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


@dataclass(slots=True)
class _Connections:
    """The connections a metrics server has open, and its bounds on them."""

    limit: int
    read_timeout: float
    open: int = 0


async def serve_metrics(
    read: Reader,
    port: int,
    *,
    read_timeout: float = READ_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> asyncio.Server:
    """Serve /metrics and /health on 127.0.0.1:``port`` from this loop, from the
    snapshots ``read`` takes."""
    answer = functools.partial(_connection, read, _Connections(max_connections, read_timeout))
    return await asyncio.start_server(answer, LOOPBACK, port)


async def _connection(
    read: Reader,
    connections: _Connections,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Answer one request, unless ``connections.limit`` are open already: then close at
    once, unanswered."""
    if connections.open >= connections.limit:
        writer.transport.abort()
        return
    connections.open += 1
    try:
        await _answer_one(read, connections.read_timeout, reader, writer)
    finally:
        connections.open -= 1


async def _answer_one(
    read: Reader, read_timeout: float, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answer one request and close. A client silent for ``read_timeout`` is dropped
    unanswered."""
    try:
        try:
            method, path = await asyncio.wait_for(_request(reader), read_timeout)
        except ValueError:
            response = _response(HTTPStatus.BAD_REQUEST, "text/plain", b"bad request\n")
        else:
            response = await _answer(read, method, path)
        writer.write(response)
        await writer.drain()
        # Sends the end of the stream even if a worker forked meanwhile holds a copy of
        # this socket (closing the supervisor's copy alone would not).
        writer.write_eof()
    except (TimeoutError, ConnectionError):
        pass  # nothing to answer: a silent client, or one that went away
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """The method and path of the request on ``reader``; its headers are read and
    ignored. A malformed request raises ValueError (as does a line past the reader's
    limit)."""
    parts = (await reader.readline()).decode("ascii").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError("not an HTTP request line")
    for _ in range(MAX_HEADERS):
        line = await reader.readline()
        if line in (b"\r\n", b"\n"):
            return parts[0], parts[1].partition("?")[0]
        if not line.endswith(b"\n"):
            raise ValueError("the request ended inside its headers")
    raise ValueError("too many headers")


async def _answer(read: Reader, method: str, path: str) -> bytes:
    if method != "GET":
        return _response(HTTPStatus.METHOD_NOT_ALLOWED, "text/plain", b"only GET\n")
    if path == "/metrics":
        depths = await asyncio.to_thread(read_depths, read.database)
        snapshot = dataclasses.replace(read.snapshot(), depths=depths)
        return _response(HTTPStatus.OK, PROMETHEUS_TEXT, render(snapshot).encode())
    if path == "/health":
        check = await health.probe(read.database.dsn, read)
        body = orjson.dumps({"healthy": check.healthy, **dataclasses.asdict(check)})
        status = HTTPStatus.OK if check.healthy else HTTPStatus.SERVICE_UNAVAILABLE
        return _response(status, "application/json", body)
    return _response(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")


def _response(status: HTTPStatus, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.0 {status.value} {status.phrase}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
