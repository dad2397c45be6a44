"""How the supervisor looks after its worker processes: one that cannot start, or cannot
be forked, is replaced after a growing delay, not in a tight loop; and the memory limit
recycles a worker whose sync handler holds its loop."""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from typing import Any

import psycopg

import awa_fast
from awa_fast.runtime.work.pool import ForkedWorkers
from tests.helpers import (
    await_until,
    free_port,
    job,
    parent_pid,
    run,
    scrape,
    wait_until,
    worker_exits,
)
from tests.runtime.work.pool.endings_app import End, Hog

# Long enough that respawning with no delay would crash hundreds of workers in it.
WINDOW = 3.0


def _exits(port: int) -> dict[str, float]:
    """Worker exits by cause, or none while the supervisor does not answer yet."""
    try:
        return worker_exits(scrape(port))
    except OSError:
        return {}


def test_a_worker_that_cannot_start_is_respawned_with_a_growing_delay(serve: Any) -> None:
    port = free_port()
    server = serve(
        "--processes", "1", "--metrics-port", str(port),
        app="tests.runtime.work.pool.unstartable_app",
    )  # fmt: skip
    wait_until(lambda: _exits(port).get("crashed", 0) >= 3, what="three crashed workers")
    time.sleep(WINDOW)  # an observation window: how many more crash in it
    assert _exits(port)["crashed"] <= 8
    log = server.log()
    assert "Too many open files" in log
    for delay in ("0.5s", "1.0s", "2.0s"):
        assert f"replacing it in {delay}" in log
    server.signal(signal.SIGTERM)  # the supervisor still drains as asked
    assert server.wait(30) == 0


def test_a_host_whose_fork_server_is_killed_says_so_and_forks_no_worker(
    dsn: str, caplog: Any
) -> None:
    """Its workers die with it (they are its children); with no process left to fork
    from safely, the host reports itself down rather than serve on a half-measure."""

    async def main() -> None:
        async with awa_fast.AsyncClient(dsn) as client:
            client.task(kind="idle", queue="q")(lambda job: None)
            runner = await client.start({"q": 2}, processes=2)
            workers = runner.workers
            assert isinstance(workers, ForkedWorkers)
            servers = {parent_pid(pid) for pid in workers.pids}
            [server] = servers
            assert server is not None and server != os.getpid()
            os.kill(server, signal.SIGKILL)
            check = client.health_check
            await await_until(
                lambda: workers.alive() == 0, what="both workers reaped", explain=workers.exits
            )
            assert "fork server" in (await check()).loops_down
            assert not (await check()).healthy
            assert workers.exits["crashed"] == 2

    with caplog.at_level(logging.INFO, logger="awa_fast.pool"):
        run(main())
    assert "the fork server (process" in caplog.text
    assert "replaced by process" not in caplog.text


def _pid(dsn: str, job_id: int, note: str) -> int:
    with psycopg.connect(dsn) as conn:
        query = "SELECT pid FROM calls WHERE job_id = %s AND note = %s"
        [(pid,)] = conn.execute(query, (job_id, note)).fetchall()
    return int(pid)


def test_the_memory_limit_recycles_a_worker_whose_sync_handler_holds_its_loop(
    serve: Any, dsn: str
) -> None:
    """The hog holds 300 MB, its worker's loop blocked, until the supervisor has said it
    saw the worker past the 150 MB limit; then it returns, and its worker is recycled."""
    with awa_fast.Client(dsn) as client:
        hog = client.insert(Hog(mb=300)).id
    port = free_port()
    server = serve(
        "--processes", "1", "--max-worker-memory-mb", "150", "--metrics-port", str(port),
        app="tests.runtime.work.pool.endings_app",
    )  # fmt: skip
    wait_until(lambda: "MB resident > 150" in server.log(), what="the limit to be seen")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO calls (job_id, note) VALUES (%s, 'release')", (hog,))
    wait_until(lambda: job(dsn, hog)["state"] == "completed", what="the hog to return")
    wait_until(lambda: _exits(port).get("recycled") == 1, what="its worker recycled")
    with awa_fast.Client(dsn) as client:
        after = client.insert(End("record")).id
    wait_until(lambda: job(dsn, after)["state"] == "completed", what="a job on the replacement")
    assert _pid(dsn, after, "done") != _pid(dsn, hog, "holding")


def test_a_replacement_that_cannot_be_forked_is_forked_again_later(
    dsn: str, monkeypatch: Any, caplog: Any
) -> None:
    """The first two forks of the killed worker's replacement fail (as at a process or
    descriptor limit); the third, after its delay, succeeds. The forks are the fork
    server's: it counts on from the copy of ``forks`` it was forked with (its own fork,
    then the first worker's)."""
    real_fork = os.fork
    forks: list[str] = []

    def fork() -> int:
        forks.append("tried")
        if len(forks) in (3, 4):
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return real_fork()

    async def main() -> None:
        async with awa_fast.AsyncClient(dsn) as client:
            client.task(kind="idle", queue="q")(lambda job: None)  # start() needs a handler
            monkeypatch.setattr(os, "fork", fork)
            runner = await client.start({"q": 1}, processes=1)
            assert isinstance(runner.workers, ForkedWorkers)
            workers = runner.workers
            [first] = workers.pids
            os.kill(first, signal.SIGKILL)
            await await_until(
                lambda: workers.pids not in ([], [first]), timeout=60, what="a replacement"
            )
            assert workers.exits["crashed"] == 1

    with caplog.at_level(logging.WARNING, logger="awa_fast.pool"):
        run(main())
    assert caplog.text.count("could not fork worker 0: [Errno 11]") == 2
    assert "replacing it in 2.0s" in caplog.text  # each failed fork waited longer
