"""Small helpers shared by tests: running coroutines on uvloop and waiting on database state."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import uvloop
from psycopg import conninfo

import awa_fast
from awa_fast.db.dsn import with_database
from awa_fast.db.queries import Q
from awa_fast.runtime.claim.listener import CHANNELS

if TYPE_CHECKING:
    from awa_fast.maintenance.service import Maintenance

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return uvloop.run(coro)


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float = 30.0,
    what: str = "condition",
    explain: Callable[[], object] | None = None,
) -> None:
    """Poll ``predicate`` (an observation of database state) until it holds. A timeout
    says what ``explain()`` returns then: the state a rare failure needs to be read."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            seen = f"; then: {explain()!r}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{seen}")
        time.sleep(0.01)


async def await_until(
    predicate: Callable[[], Any],
    *,
    timeout: float = 30.0,
    what: str = "condition",
    explain: Callable[[], Any] | None = None,
) -> None:
    """The asyncio twin of :func:`wait_until` (the predicate runs in a thread)."""
    import asyncio
    import inspect

    deadline = time.monotonic() + timeout
    while True:
        result = await asyncio.to_thread(predicate)
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            seen = f"; then: {explain()!r}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{seen}")
        await asyncio.sleep(0.01)


def states(dsn: str) -> dict[str, int]:
    """Job count per state across every job table."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT state::text, count(*) FROM awa_fast.jobs GROUP BY 1")
        return {state: count for state, count in rows}


# Every job's (queue, state) as the counters name it, counted from the rows themselves.
FULL_COUNT = """
SELECT queue, state, sum(n)::bigint FROM (
    SELECT queue, state::text, count(*) AS n FROM awa_fast.jobs_hot GROUP BY 1, 2
    UNION ALL
    SELECT queue, 'available', sum(size - taken) FROM awa_fast.job_packs GROUP BY 1
    UNION ALL
    SELECT queue, state::text, count(*) FROM awa_fast.jobs_deferred GROUP BY 1, 2
    UNION ALL
    SELECT queue, state::text, count(*) FROM awa_fast.jobs_done GROUP BY 1, 2
    UNION ALL
    SELECT queue, 'dlq', count(*) FROM awa_fast.dlq GROUP BY 1
) c
GROUP BY 1, 2
"""
COUNTED = "SELECT queue, state, n FROM awa_fast.queue_counts WHERE n <> 0"
# Completions by queue in the current minute and the 59 before it, from the rows.
COMPLETED_LAST_HOUR = """
SELECT queue, count(*) FROM awa_fast.jobs_done
WHERE state = 'completed' AND date_trunc('minute', finalized_at, 'UTC') > now() - interval '1 hour'
GROUP BY 1
"""


def plan_name(name: str) -> str:
    """A relation or index named in a plan, the partitions of jobs_hot and jobs_done
    (migrations 0029-0030) read as the table: jobs_hot_0 as jobs_hot, jobs_done_pkey_5 as
    jobs_done_pkey."""
    return re.sub(r"^(jobs_(?:hot|done)(?:_[a-z]+)?)_\d$", r"\1", name)


def counts(conn: psycopg.Connection[Any], query: str) -> dict[tuple[str, str], int]:
    return {(queue, state): n for queue, state, n in conn.execute(query).fetchall()}


def assert_counts_exact(conn: psycopg.Connection[Any]) -> None:
    """The counters (migration 0025) and queue_stats' completions of the last hour equal
    full counts of the job rows, all read in one transaction (one clock for the hour)."""
    with conn.transaction():
        rows = counts(conn, FULL_COUNT)
        assert counts(conn, COUNTED) == {key: n for key, n in rows.items() if n}
        recent = dict(conn.execute(COMPLETED_LAST_HOUR).fetchall())
        stats = conn.cursor(row_factory=psycopg.rows.dict_row).execute(Q.queue_stats).fetchall()
        shown = {s["queue"]: s["completed_last_hour"] for s in stats if s["completed_last_hour"]}
        assert shown == recent


def job(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        cur = conn.cursor(row_factory=psycopg.rows.dict_row)
        row = cur.execute("SELECT * FROM awa_fast.jobs WHERE id = %s", (job_id,)).fetchone()
        assert row is not None, f"job {job_id} not found"
        return row


def settled(dsn: str) -> bool:
    """True when nothing is available or running (scheduled/retryable may remain)."""
    counts = states(dsn)
    return counts.get("available", 0) == 0 and counts.get("running", 0) == 0


async def run_until(
    client: Any, queues: Any, predicate: Callable[[], bool], *, timeout: float = 60.0, **config: Any
) -> None:
    """Start ``client`` on ``queues``, wait for ``predicate`` (database state), shut down."""
    await client.start(queues, **config)
    try:
        await await_until(predicate, timeout=timeout)
    finally:
        await client.shutdown()


def free_port() -> int:
    """A loopback port nothing listens on (the system's pick, let go again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prometheus_samples(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of an exposition; every sample's metric has its HELP
    and a counter or gauge TYPE before it."""
    helped: set[str] = set()
    typed: set[str] = set()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind in ("counter", "gauge"), line
            typed.add(name)
        else:
            key, value = line.rsplit(" ", 1)
            name = key.partition("{")[0]
            assert name in helped and name in typed, line
            assert key not in found, line
            found[key] = float(value)
    return found


def scrape(port: int) -> dict[str, float]:
    """The samples a runner's metrics endpoint on 127.0.0.1:``port`` serves now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return prometheus_samples(response.read().decode())


def worker_exits(samples: dict[str, float]) -> dict[str, float]:
    """awa_fast_worker_exits_total by cause, from ``samples``."""
    prefix = 'awa_fast_worker_exits_total{cause="'
    return {k[len(prefix) : -2]: v for k, v in samples.items() if k.startswith(prefix)}


def sessions(dsn: str, condition: str, params: dict[str, Any] | None = None) -> int:
    """Sessions of this database whose pg_stat_activity row meets ``condition`` (SQL, with
    ``params``): how a test knows where another party has got to."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            f" WHERE datname = current_database() AND ({condition})",
            params,
        ).fetchone()
    return int(row[0]) if row else 0


def fresh_database(server_url: str, name: str) -> str:
    """A new, empty database ``name`` (dropped first if it exists), not migrated."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return with_database(server_url, name)


def migrated_to(url: str, version: int) -> None:
    """Apply the bundled migrations up to ``version`` only, as an older release did, by
    running their SQL as a user's own migration tool would."""
    with psycopg.connect(url) as conn:
        for migration in awa_fast.migrations_range(0, version):
            conn.execute(migration.sql.encode())


def listening(dsn: str) -> bool:
    """A runner's listener has run its last LISTEN: no NOTIFY from here on is missed."""
    idle = "application_name = 'awa-fast listener' AND state = 'idle'"
    return sessions(dsn, f"{idle} AND query = 'LISTEN {CHANNELS[-1]}'") == 1


def lock_waiters(dsn: str, *, application_name: str | None = None) -> int:
    """Sessions of this database waiting on a lock (only those of ``application_name``
    when given): how a race test knows its second party has blocked on the first."""
    return sessions(
        dsn,
        "wait_event_type = 'Lock' AND (%(app)s::text IS NULL OR application_name = %(app)s)",
        {"app": application_name},
    )


@contextlib.contextmanager
def blocked_call(dsn: str, call: Callable[[], object]) -> Iterator[list[object]]:
    """Start ``call`` (a client method) in a thread and enter the block once it waits on a
    lock; the block releases what holds it. After the block, the list holds what ``call``
    returned: how a race test orders two parties without sleeping."""
    result: list[object] = []
    caller = threading.Thread(target=lambda: result.append(call()))
    caller.start()
    wait_until(
        lambda: lock_waiters(dsn, application_name="awa-fast client") > 0,
        timeout=10,
        what="the call to wait",
    )
    yield result
    caller.join(timeout=10)
    assert not caller.is_alive() and len(result) == 1


@contextlib.asynccontextmanager
async def leading(maintenance: Maintenance) -> AsyncIterator[Maintenance]:
    """``maintenance`` elected for the block, its term released after: its steps act only
    under a term of its own (awa_fast.maintenance.leader)."""
    assert await maintenance.leader.check(), "another leader's term lasts"
    try:
        yield maintenance
    finally:
        await maintenance.leader.close()


def supervisor_of(worker_pid: int) -> int | None:
    """The supervisor of a worker process: the parent of its parent, the fork server
    (awa_fast.runtime.work.forkserver); None once either is gone."""
    server = parent_pid(worker_pid)
    return None if server is None else parent_pid(server)


def busy_worker(dsn: str, supervisor: int, *, table: str) -> int:
    """A live worker process of ``supervisor`` that wrote one of the latest rows of
    ``table`` (a test's record of handler runs, with ``pid`` and ``at`` columns)."""
    recent = f"SELECT pid FROM {table} ORDER BY at DESC LIMIT 8"

    def latest() -> int | None:
        with psycopg.connect(dsn) as conn:
            pids = [pid for (pid,) in conn.execute(recent).fetchall()]
        return next((int(pid) for pid in pids if supervisor_of(pid) == supervisor), None)

    wait_until(lambda: latest() is not None, what=f"a live worker with recent {table}")
    pid = latest()
    assert pid is not None
    return pid


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid``, from /proc; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    match = re.search(r"^PPid:\s+(\d+)", status, re.MULTILINE)
    return int(match[1]) if match else None


async def cancel_while_connecting(
    dsn: str, loop: Callable[[str], Coroutine[Any, Any, None]], *, application_name: str
) -> None:
    """Cancel ``loop(url)`` while the connection it opens as ``application_name`` is in
    flight (the server has let it in, its reply is held back), then wait for that session
    to end: a stop must not leave it open."""
    ours = "application_name = %(name)s"
    name = {"name": application_name}
    async with _replies_held(dsn) as (proxied, release):
        task = asyncio.create_task(loop(proxied))
        await await_until(
            lambda: sessions(dsn, f"{ours} AND state = 'idle'", name) == 1,
            what=f"the server to let {application_name} in",
        )
        task.cancel()
        release.set()
        [outcome] = await asyncio.gather(task, return_exceptions=True)
        assert isinstance(outcome, asyncio.CancelledError)
        await await_until(
            lambda: sessions(dsn, ours, name) == 0, timeout=5, what=f"{application_name} to close"
        )


@contextlib.asynccontextmanager
async def _replies_held(dsn: str) -> AsyncIterator[tuple[str, asyncio.Event]]:
    """``dsn`` by way of a proxy on this loop that passes the server's bytes on only once
    the event is set: a connect stays in flight, its session already idle on the server,
    for as long as a test needs (without TLS or GSS encryption, whose handshake the proxy
    would hold first)."""
    server = conninfo.conninfo_to_dict(dsn)
    release = asyncio.Event()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, held: bool) -> None:
        try:
            while data := await reader.read(1 << 16):
                if held:
                    await release.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(server["host"], server["port"])
        await asyncio.gather(
            pipe(reader, up_writer, False), pipe(up_reader, writer, True), return_exceptions=True
        )

    listening = await asyncio.start_server(proxy, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        plain = {"sslmode": "disable", "gssencmode": "disable"}
        yield conninfo.make_conninfo(dsn, host="127.0.0.1", port=port, **plain), release
    finally:
        listening.close()
        await listening.wait_closed()
