"""Writes reach the primary alone, against a real streaming standby: a URL that names
both servers, in either order; one that names the standby alone, which every part refuses
saying so; none with no primary up. Reads that may lag go to the standby when asked."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.errors import ReadOnlySqlTransaction
from starlette.testclient import TestClient

import awa_fast
from awa_fast.db.connections import Database, connect_hot, connect_hot_async
from awa_fast.db.primary import PrimaryCursor
from awa_fast.ui import create_app
from tests.ha.app import Work
from tests.ha.conftest import Replicated
from tests.helpers import await_until, run, wait_until


def _sessions(pair: Replicated, cluster: Any, name: str) -> int:
    [(count,)] = pair.query(
        cluster,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
        name,
    )
    return int(count)


def _tokens(pair: Replicated, cluster: Any) -> set[str]:
    rows = pair.query(cluster, "SELECT args->>'token' FROM awa_fast.jobs")
    return {token for (token,) in rows}


def test_a_url_naming_the_standby_first_writes_to_the_primary(replicated: Replicated) -> None:
    pair = replicated
    with awa_fast.Client(pair.url_of(pair.standby, pair.primary)) as client:
        assert client.dsn.endswith("?target_session_attrs=read-write")
        client.insert(Work("first"))
        client.insert_many([Work("second"), Work("third")])
    assert _tokens(pair, pair.primary) == {"first", "second", "third"}


def test_every_write_to_a_standby_named_alone_says_it_is_one(replicated: Replicated) -> None:
    """The client, a hot connection, and a runtime cursor on a connection that got past
    the check all raise ServerIsStandby, naming the server; a runner does not start."""
    pair = replicated
    standby_url = pair.url_of(pair.standby)
    said = f"the server at 127.0.0.1:{pair.standby.port} is a standby (in recovery)"
    with awa_fast.Client(standby_url) as client, pytest.raises(awa_fast.ServerIsStandby) as raised:
        client.insert(Work("nowhere"))
    assert str(raised.value).startswith(said)
    assert isinstance(raised.value, awa_fast.DatabaseUnreachable)  # a lost connection's kind
    with pytest.raises(awa_fast.ServerIsStandby, match="is a standby"):
        connect_hot(Database(standby_url), application_name="awa-fast refused")

    async def start() -> None:
        async with awa_fast.AsyncClient(standby_url) as runner_client:

            @runner_client.task(Work)
            async def work(job: awa_fast.Job[Work]) -> None:
                raise AssertionError("ran on a standby")

            await runner_client.start({"default": 1})

    with pytest.raises(awa_fast.ServerIsStandby, match="is a standby"):
        run(start())
    with (
        psycopg.connect(standby_url, autocommit=True, cursor_factory=PrimaryCursor) as conn,
        pytest.raises(awa_fast.ServerIsStandby, match=r"is a standby .*read-only"),
    ):
        conn.execute("INSERT INTO runs VALUES ('x', 1, 1, 1, 1, 0)")
    wait_until(
        lambda: _sessions(pair, pair.standby, "awa-fast refused") == 0,
        what="the refused hot connection to be closed",
    )
    assert _tokens(pair, pair.primary) == set()


def test_a_transaction_read_only_by_its_own_code_keeps_its_error(
    replicated: Replicated,
) -> None:
    """On the primary, 25006 from a transaction its caller made read-only is that
    caller's error, not a standby's."""
    pair = replicated
    with psycopg.connect(pair.url_of(pair.primary), cursor_factory=PrimaryCursor) as conn:
        conn.execute("SET TRANSACTION READ ONLY")
        with pytest.raises(ReadOnlySqlTransaction):
            conn.execute("INSERT INTO runs VALUES ('x', 1, 1, 1, 1, 0)")


def test_with_the_primary_down_a_url_naming_both_says_a_standby_answered(
    replicated: Replicated,
) -> None:
    pair = replicated
    pair.primary.pg_ctl("stop", "-m", "immediate")
    with (
        awa_fast.Client(pair.url, connect_timeout=2) as client,
        pytest.raises(awa_fast.ServerIsStandby) as raised,
    ):
        client.insert(Work("nowhere"))
    message = str(raised.value)
    assert message.startswith(
        f"database unreachable at 127.0.0.1:{pair.primary.port},127.0.0.1:{pair.standby.port}"
    )
    assert message.endswith("(a standby answered; no primary among the servers)")
    # libpq's own words for the standby it passed over (which, by its version)
    assert "session is read-only" in message or "hot standby mode" in message


@pytest.fixture
def paused_replay(replicated: Replicated) -> Iterator[Replicated]:
    """Jobs on the primary, replayed on the standby, whose replay is then paused: what the
    primary writes from here on, the standby does not show."""
    pair = replicated
    with awa_fast.Client(pair.url) as client:
        client.insert_many([Work(f"early-{n}") for n in range(3)], queue="reports")
    wait_until(pair.replayed, what="the standby to replay the inserts")
    pair.query(pair.standby, "SELECT pg_wal_replay_pause()")
    yield pair
    pair.query(pair.standby, "SELECT pg_wal_replay_resume()")


def _available(stats: list[awa_fast.QueueStat], queue: str) -> int:
    return next((stat.available for stat in stats if stat.queue == queue), 0)


def test_queue_stats_read_from_the_read_url_and_lag_by_its_replay(
    paused_replay: Replicated,
) -> None:
    pair = paused_replay
    standby_url = pair.url_of(pair.standby)
    with awa_fast.Client(pair.url, read_url=standby_url) as client:
        client.insert_many([Work(f"late-{n}") for n in range(4)], queue="reports")
        assert _available(client.queue_stats(), "reports") == 3  # the standby's count
        assert _sessions(pair, pair.standby, "awa-fast client") == 1
        client.pause_queue("reports")  # a write: on the primary
    with awa_fast.Client(pair.url) as primary_only:
        assert _available(primary_only.queue_stats(), "reports") == 7
    assert pair.query(pair.primary, "SELECT paused FROM awa_fast.queue_meta") == [(True,)]
    read = ("--read-database-url", standby_url)
    done = subprocess.run(
        [sys.executable, "-m", "awa_fast.cli", "status", "--database-url", pair.url, *read],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    [reports] = [stat for stat in json.loads(done.stdout) if stat["queue"] == "reports"]
    assert reports["available"] == 3


def test_the_dashboards_pages_read_from_the_standby_and_its_actions_write_to_the_primary(
    paused_replay: Replicated,
) -> None:
    pair = paused_replay
    with awa_fast.Client(pair.url) as client:
        late = client.insert(Work("late"), queue="reports").id
    [(early,)] = pair.query(pair.standby, "SELECT min(id) FROM awa_fast.jobs")
    app = create_app(pair.url, read_url=pair.url_of(pair.standby))
    with TestClient(app) as http:
        pages = ["/", "/queue?name=reports", "/jobs", f"/jobs/{early}", "/dlq", "/periodic"]
        for page in [*pages, "/batches"]:
            response = http.get(page)
            assert response.status_code == 200, (page, response.text[-2000:])
        assert "early-0" in http.get(f"/jobs/{early}").text
        assert http.get(f"/jobs/{late}").status_code == 404  # not replayed there yet
        assert _sessions(pair, pair.standby, "awa-fast client") >= 1
        csrf = http.get("/jobs").text.split('name="csrf" value="')[1].split('"')[0]
        response = http.post(
            "/actions/pause",
            data={"csrf": csrf, "confirm": "yes", "queue": "reports"},
        )
        assert response.status_code == 200, response.text[-2000:]
    assert pair.query(pair.primary, "SELECT paused FROM awa_fast.queue_meta") == [(True,)]


def test_an_async_connect_to_the_standby_is_refused_and_closed(replicated: Replicated) -> None:
    pair = replicated

    async def connect() -> None:
        await connect_hot_async(
            Database(pair.url_of(pair.standby)), application_name="awa-fast refused"
        )

    with pytest.raises(awa_fast.ServerIsStandby):
        run(connect())
    wait_until(
        lambda: _sessions(pair, pair.standby, "awa-fast refused") == 0,
        what="the refused connection to be closed",
    )


def test_a_primary_turned_read_only_mid_run_costs_a_wait_not_a_failure(
    replicated: Replicated,
) -> None:
    """The server turns read-only under a running runner (default_transaction_read_only,
    as a disk-full guard or a fencing does): each write there fails with 25006, which every
    part takes for a lost connection. The outcome waits in the committer and commits once
    the server takes writes again: the job completes on its first attempt."""
    pair = replicated
    url = pair.url_of(pair.primary)
    client = awa_fast.AsyncClient(url)
    started, release = [], asyncio.Event()

    @client.task(Work)
    async def work(job: awa_fast.Job[Work]) -> None:
        if job.args.token == "warm":  # the committer's connection is open from here on
            return
        started.append(job.id)
        await release.wait()

    def read_only(on: bool) -> None:
        setting = "SET default_transaction_read_only = on" if on else "RESET ALL"
        pair.query(pair.primary, f"ALTER SYSTEM {setting}")
        pair.query(pair.primary, "SELECT pg_reload_conf()")

    def refused() -> bool:
        return pair.query(pair.primary, "SHOW default_transaction_read_only") == [("on",)]

    async def main() -> int:
        await client.start({"default": 1}, heartbeat_interval=0.2)
        try:
            warm = (await client.insert(Work("warm"))).id
            await await_until(
                lambda: (
                    pair.query(
                        pair.primary, "SELECT state::text FROM awa_fast.jobs WHERE id = %s", warm
                    )
                    == [("completed",)]
                ),
                what="a first outcome committed",
            )
            job_id = (await client.insert(Work("through"))).id
            await await_until(lambda: started == [job_id], what="the handler to start")
            read_only(True)
            await await_until(refused, what="the server to refuse writes")
            release.set()  # the outcome meets a read-only server
            await await_until(
                lambda: "is read-only" in "".join(caplog_lines), what="the refusal, said"
            )
            read_only(False)
            await await_until(
                lambda: (
                    pair.query(
                        pair.primary, "SELECT state::text FROM awa_fast.jobs WHERE id = %s", job_id
                    )
                    == [("completed",)]
                ),
                what="the job to complete",
            )
            return job_id
        finally:
            await client.shutdown()
            await client.close()

    caplog_lines: list[str] = []
    handler = _Lines(caplog_lines)
    logging.getLogger("awa_fast").addHandler(handler)
    try:
        job_id = run(main())
    finally:
        logging.getLogger("awa_fast").removeHandler(handler)
        read_only(False)
    [(attempt, errors)] = pair.query(
        pair.primary, "SELECT attempt, errors FROM awa_fast.jobs WHERE id = %s", job_id
    )
    assert (attempt, errors) == (1, [])
    said = "".join(caplog_lines)
    assert f"the server at 127.0.0.1:{pair.primary.port} is read-only" in said
    assert "ended by an exception" not in said  # a lost connection to each loop, no crash


class _Lines(logging.Handler):
    """The messages of the records it handles, for a test to read."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
