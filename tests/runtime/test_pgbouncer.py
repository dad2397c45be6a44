"""awa-fast behind a real PgBouncer in transaction pooling mode (docs/pgbouncer.md): jobs
drain, cancels reach running handlers, the leader maintains, a client that only produces
inserts, and the pooler's server sessions carry nothing from awa-fast's clients to the
next."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

import awa_fast
from awa_fast.cli import parser, serve_config
from awa_fast.db.connections import Database
from awa_fast.errors import ConfigError
from awa_fast.maintenance.leader import Leader
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.runner import PLANNER_SETTINGS_MISSING
from tests.helpers import await_until, job, run, states, wait_until
from tests.pgbouncer import PgBouncer
from tests.runtime.pooled_app import Flush, FlushSync
from tests.runtime.work.pool.conftest import Serve

NOT_LISTENING = "not listening: the database URL goes through a transaction pooler"


@pytest.fixture(scope="module")
def pgbouncer(server_url: str) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(server_url)
    yield bouncer
    bouncer.stop()


@pytest.fixture
def pooled(dsn: str, pgbouncer: PgBouncer) -> str:
    """The test database through the pooler."""
    return pgbouncer.url(dsn)


def _carried_over(sessions: list[dict[str, object]]) -> list[dict[str, object]]:
    """The server sessions holding a prepared statement, a LISTEN or a changed setting."""
    return [s for s in sessions if (s["prepared"], s["listening"], s["settings"]) != (0, 0, None)]


def test_serve_drains_through_the_pooler_and_leaves_its_sessions_clean(
    dsn: str, pooled: str, pgbouncer: PgBouncer, tmp_path: Path
) -> None:
    """`serve --pgbouncer`, no direct URL: two workers run jobs that write to their rows
    while they run and read them back through the app's client, the leader promotes a
    scheduled job, and afterwards no server session of the pool holds a prepared
    statement, a LISTEN or a changed setting."""
    with awa_fast.Client(dsn) as producer:
        ids = producer.insert_many([Flush(n) for n in range(40)])
        ids += producer.insert_many([FlushSync(n) for n in range(40)])
        later = datetime.now().astimezone() + timedelta(seconds=1)
        ids.append(producer.insert(Flush(-1), run_at=later).id)
    server = Serve(
        pooled,
        tmp_path,
        "--pgbouncer",
        "--processes", "2",
        "--queue", "default=8",
        "--set", "promote_interval=0.05",
        "--set", "poll_interval=0.1",
        app="tests.runtime.pooled_app",
    )  # fmt: skip
    try:
        wait_until(
            lambda: states(dsn) == {"completed": len(ids)}, timeout=60, what="every job to end"
        )
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0
    finally:
        server.close()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT attempt, progress->'percent', metadata->'pid' FROM awa_fast.jobs"
        ).fetchall()
    # each flushed its progress through the pooler on its first attempt; completion
    # clears progress (as the Awa SDK does), and the metadata it wrote stays
    assert {(attempt, percent) for attempt, percent, _ in rows} == {(1, None)}
    assert len({pid for _, _, pid in rows}) == 2  # both workers wrote through the pooler
    assert server.log().count(NOT_LISTENING) == 1
    assert server.log().count(PLANNER_SETTINGS_MISSING) == 1  # the entry sets none
    assert _carried_over(pgbouncer.server_sessions(dsn)) == []


@dataclass
class Wait:
    n: int


@pytest.mark.parametrize(
    "direct",
    [True, False],
    ids=["direct URL, the client says pooled", "pooler only, its start says pooled"],
)
def test_a_cancel_reaches_a_running_handler(
    dsn: str, pooled: str, pgbouncer: PgBouncer, direct: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """With a direct URL the cancel's NOTIFY is heard there (heartbeats are too far apart
    to bring it in time); without one, the next heartbeat through the pooler brings it.
    The pooler is the client's to say in the first case, its start's in the second."""
    options = (
        {"heartbeat_interval": 60.0, "heartbeat_staleness": 600.0}
        if direct
        else {"heartbeat_interval": 0.2, "transaction_pooling": True}
    )
    worker = awa_fast.AsyncClient(pooled, transaction_pooling=direct)
    seen: list[int] = []

    @worker.task(Wait)
    async def wait(job: awa_fast.Job[Wait]) -> None:
        while not job.is_cancelled():
            await asyncio.sleep(0.01)
        seen.append(job.args.n)

    async def main() -> int:
        async with awa_fast.AsyncClient(dsn) as admin, worker:
            row = await admin.insert(Wait(1))
            await worker.start({"default": 1}, direct_dsn=dsn if direct else None, **options)
            try:
                await await_until(lambda: job(dsn, row.id)["state"] == "running")
                assert await admin.cancel(row.id) is not None
                await await_until(lambda: seen == [1], timeout=10, what="the handler to see it")
            finally:
                await worker.shutdown()
            return row.id

    with caplog.at_level(logging.WARNING, logger="awa_fast.listener"):
        job_id = run(main())
    assert job(dsn, job_id)["state"] == "cancelled"
    assert caplog.text.count(NOT_LISTENING) == (0 if direct else 1)
    assert _carried_over(pgbouncer.server_sessions(dsn)) == []


async def _idle_limit(conn: psycopg.AsyncConnection[tuple[str]]) -> str:
    cur = await conn.execute("SHOW idle_in_transaction_session_timeout")
    row = await cur.fetchone()
    return row[0] if row else ""


def test_a_fenced_transaction_limits_its_idle_time_behind_a_pooler(pooled: str) -> None:
    """The leader's idle limit, a session setting on its own connection, is set in each
    fenced transaction behind a pooler (which would lend the session on with it)."""
    leader = Leader(Database(pooled, pooled=True), interval=0.5)

    async def main() -> tuple[str, str]:
        assert await leader.check()
        conn = await leader.connect(application_name="awa-fast test")
        try:
            async with leader.fenced(conn):
                inside = await _idle_limit(conn)
            return inside, await _idle_limit(conn)
        finally:
            await conn.close()
            await leader.close()

    assert run(main()) == ("1500ms", "0")


def test_a_session_goes_to_the_direct_url_behind_a_pooler() -> None:
    """Behind a pooler a session goes to the direct URL, or nowhere without one; a URL
    said to reach Postgres itself keeps its sessions, whatever other URL names the same
    address."""
    pooler, direct = "postgresql://app@pgbouncer:6432/app", "postgresql://app@postgres/app"
    assert Database(pooler, pooled=True).session(direct=direct) == Database(direct)
    assert Database(pooler, pooled=True).session(direct=None) is None
    assert Database(pooler).session(direct=None) == Database(pooler)


def test_transaction_pooling_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="transaction_pooling must be True or False"):
        awa_fast.Client("postgresql:///app", transaction_pooling="yes")  # type: ignore[arg-type]


def test_a_runner_of_a_pooled_client_cannot_turn_pooling_off() -> None:
    """Both connect to the same URL, through the same pooler."""
    client = awa_fast.AsyncClient("postgresql:///app", transaction_pooling=True)
    client.task(kind="noop")(lambda job: None)  # with nothing registered, start refuses that
    with pytest.raises(ConfigError, match="transaction_pooling must stay True"):
        run(client.start({"default": 1}, transaction_pooling=False))


def test_a_direct_url_needs_transaction_pooling() -> None:
    with pytest.raises(ConfigError, match="transaction_pooling"):
        RunnerConfig(direct_dsn="postgresql:///direct")
    with pytest.raises(ConfigError, match="direct_dsn"):
        RunnerConfig(transaction_pooling=True, direct_dsn="")
    assert RunnerConfig(transaction_pooling=True, direct_dsn="postgresql:///d").direct_dsn


def test_serve_options_set_transaction_pooling(monkeypatch: pytest.MonkeyPatch) -> None:
    def config(*args: str) -> dict[str, object]:
        return {
            key: value
            for key, value in serve_config(parser().parse_args(["serve", "m:c", *args])).items()
            if key in ("transaction_pooling", "direct_dsn")
        }

    monkeypatch.delenv("AWA_FAST_DIRECT_DATABASE_URL", raising=False)
    assert config() == {}
    assert config("--pgbouncer") == {"transaction_pooling": True, "direct_dsn": None}
    given = config("--pgbouncer", "--direct-database-url", "postgresql:///d")
    assert given == {"transaction_pooling": True, "direct_dsn": "postgresql:///d"}
    monkeypatch.setenv("AWA_FAST_DIRECT_DATABASE_URL", "postgresql:///env")
    assert config("--pgbouncer")["direct_dsn"] == "postgresql:///env"
    with pytest.raises(ConfigError, match="transaction_pooling"):
        RunnerConfig(**config())  # type: ignore[arg-type]


def _turns(pooled: str) -> Iterator[int]:
    """Twelve turns to run a statement in, every other one while another client of the
    pooler is in a transaction: as in a busy fleet, the pooler then lends consecutive
    transactions of one connection different server sessions (it lends the last one
    freed first)."""
    for n in range(12):
        with psycopg.connect(pooled, prepare_threshold=None) as other:
            if n % 2:
                other.execute("SELECT 1")  # holds a server session until it closes
            yield n


def _produce(pooled: str, *, sync: bool, transaction_pooling: bool) -> list[int]:
    """Twelve jobs, one at a time on one connection, from a client that only produces:
    no runner in sight."""
    if sync:
        with awa_fast.Client(
            pooled, max_connections=1, transaction_pooling=transaction_pooling
        ) as client:
            return [client.insert(Flush(n)).id for n in _turns(pooled)]

    async def main() -> list[int]:
        async with awa_fast.AsyncClient(
            pooled, max_connections=1, transaction_pooling=transaction_pooling
        ) as client:
            return [(await client.insert(Flush(n))).id for n in _turns(pooled)]

    return run(main())


@pytest.mark.parametrize("sync", [True, False], ids=["Client", "AsyncClient"])
def test_a_producer_told_of_the_pooler_prepares_nothing_through_it(
    pooled: str, pgbouncer: PgBouncer, sync: bool
) -> None:
    """A client made with transaction_pooling=True, and nothing else in the process
    saying so, runs the same insert past psycopg's prepare threshold (5) without an
    error, and leaves no server session holding a statement."""
    ids = _produce(pooled, sync=sync, transaction_pooling=True)
    assert len(set(ids)) == 12
    assert _carried_over(pgbouncer.server_sessions(pooled)) == []


@pytest.mark.parametrize("sync", [True, False], ids=["Client", "AsyncClient"])
def test_a_producer_not_told_of_the_pooler_breaks_through_it(pooled: str, sync: bool) -> None:
    """What the flag is for: the same client without it prepares its insert after five
    runs, in one server session, and the next run, lent another, fails there."""
    with pytest.raises(psycopg.ProgrammingError, match="prepared statement"):
        _produce(pooled, sync=sync, transaction_pooling=False)
