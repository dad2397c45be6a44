"""The multiprocess pool end to end: a real `awa-fast serve` supervisor, real worker
processes, real signals, a real Postgres. Handler calls are counted in the `calls` table."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import orjson
import psycopg
import pytest

import awa_fast
from awa_fast.runtime.work import collector
from tests.helpers import free_port, job, scrape, states, wait_until, worker_exits
from tests.runtime.work.pool.app import Burn, Step


def _insert(dsn: str, items: list[Any], **options: Any) -> list[int]:
    with awa_fast.Client(dsn) as client:
        return client.insert_many(items, **options)


def _query(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def _completed(dsn: str, n: int) -> bool:
    return states(dsn).get("completed", 0) == n


def test_ten_thousand_jobs_over_two_processes_each_run_once(serve: Any, dsn: str) -> None:
    _insert(dsn, [Step("record") for _ in range(10_000)])
    server = serve("--processes", "2", "--queue", "default=200")
    wait_until(lambda: _completed(dsn, 10_000), timeout=120, what="10,000 completions")
    [(total, distinct)] = _query(dsn, "SELECT count(*), count(DISTINCT job_id) FROM calls")
    assert (total, distinct) == (10_000, 10_000)
    per_pid = _query(dsn, "SELECT pid, count(*) FROM calls GROUP BY pid")
    assert len(per_pid) == 2, per_pid  # spread over every worker process
    assert all(count > 0 for _, count in per_pid)
    server.signal()
    assert server.wait(30) == 0


def test_sigkill_mid_handler_retries_on_a_new_worker(serve: Any, dsn: str) -> None:
    """...and the crash is counted, and logged with what it was about as fields."""
    [job_id] = _insert(dsn, [Step("hang_once")])
    port = free_port()
    server = serve("--processes", "2", "--metrics-port", str(port), "--log-format", "json")
    wait_until(lambda: bool(_query(dsn, "SELECT 1 FROM calls WHERE note = 'started'")))
    [(victim,)] = _query(dsn, "SELECT pid FROM calls WHERE note = 'started'")
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: job(dsn, job_id)["state"] == "completed", what="retry to complete")
    final = job(dsn, job_id)
    assert final["attempt"] == 2
    assert final["errors"][0]["error"] == f"worker process {victim} was killed by SIGKILL"
    assert final["errors"][0]["attempt"] == 1
    [(finisher,)] = _query(dsn, "SELECT pid FROM calls WHERE note = 'done'")
    assert finisher != victim
    assert worker_exits(scrape(port)) == {"evicted": 0, "recycled": 0, "retired": 0, "crashed": 1}
    server.signal()
    assert server.wait(30) == 0
    lines = [orjson.loads(line) for line in server.log().splitlines()]
    [crash] = [line for line in lines if line["level"] == "ERROR"]
    assert crash["worker_pid"] == victim and crash["pid"] == server.proc.pid
    assert (crash["cause"], crash["exit_code"]) == ("crashed", -signal.SIGKILL)
    assert crash["message"] == f"worker process {victim} was killed by SIGKILL; " + (
        "its unfinished jobs will be retried"
    )
    assert crash["logger"] == "awa_fast.pool" and crash["time"].endswith("+00:00")


@pytest.mark.parametrize("in_process", [False, True], ids=["worker", "client.run"])
def test_handlers_run_where_the_collector_is_settled(
    serve: Any, dsn: str, in_process: bool
) -> None:
    """In a forked worker or in the process of `client.run()`, a served handler's process
    keeps what it held at start out of the collector's walks and collects young objects
    seldom."""
    _insert(dsn, [Step("collector")])
    server = serve(*([] if in_process else ["--processes", "1"]), in_process=in_process)
    wait_until(lambda: _completed(dsn, 1), what="the job")
    [(note,)] = _query(dsn, "SELECT note FROM calls")
    assert note == f"young {collector.YOUNG_THRESHOLD}, frozen True"
    server.signal(signal.SIGTERM)
    assert server.wait(30) == 0, server.log()


def test_handler_calling_os_exit_is_retried(serve: Any, dsn: str) -> None:
    [job_id] = _insert(dsn, [Step("exit_once")])
    serve("--processes", "1")
    wait_until(
        lambda: job(dsn, job_id)["state"] == "completed",
        what="retry to complete",
        explain=lambda: job(dsn, job_id),
    )
    final = job(dsn, job_id)
    assert final["attempt"] == 2
    assert final["errors"][0]["error"].endswith("exited with code 1")


def test_outcomes_pushed_just_before_a_worker_dies_are_committed(serve: Any, dsn: str) -> None:
    first, dying = _insert(dsn, [Step("first"), Step("die_after_first")])
    serve("--processes", "1")
    wait_until(lambda: job(dsn, dying)["state"] == "completed", what="the dying job's retry")
    done = job(dsn, first)
    assert (done["state"], done["attempt"], done["errors"]) == ("completed", 1, [])
    assert job(dsn, dying)["attempt"] == 2


def test_sigterm_drains_long_handlers_and_exits_zero(serve: Any, dsn: str) -> None:
    ids = _insert(dsn, [Step("sleep", seconds=1.5) for _ in range(10)])
    server = serve("--processes", "2", "--shutdown-timeout", "30")
    wait_until(lambda: states(dsn).get("running", 0) == 10, what="10 running")
    server.signal(signal.SIGTERM)
    assert server.wait(30) == 0, server.log()
    assert states(dsn) == {"completed": 10}
    assert [job(dsn, i)["attempt"] for i in ids] == [1] * 10


def test_second_sigterm_exits_at_once_leaving_jobs_for_rescue(serve: Any, dsn: str) -> None:
    _insert(dsn, [Step("sleep", seconds=60) for _ in range(4)])
    server = serve("--processes", "2")
    wait_until(lambda: len(_query(dsn, "SELECT 1 FROM calls")) == 4, what="4 started")
    workers = {pid for (pid,) in _query(dsn, "SELECT pid FROM calls")}
    server.signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM: draining" in server.log(), what="the first signal's drain")
    started = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.wait(10) == 1
    assert time.monotonic() - started < 5
    assert states(dsn) == {"running": 4}  # nothing lost: rescue returns them later
    wait_until(lambda: not any(_alive(pid) for pid in workers), what="workers to die")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cpu_bound_sync_handlers_keep_both_processes_busy(serve: Any, dsn: str) -> None:
    _insert(dsn, [Burn(ms=5) for _ in range(400)])
    serve("--processes", "2", "--queue", "default=2")
    wait_until(lambda: _completed(dsn, 400), timeout=60)
    per_pid = dict(_query(dsn, "SELECT pid, count(*) FROM calls GROUP BY pid"))
    assert len(per_pid) == 2, per_pid
    assert min(per_pid.values()) >= 100, per_pid


def test_killing_the_claim_connections_loses_nothing(serve: Any, dsn: str) -> None:
    """Each claimer reconnects on its own; a claim cut off mid-flight rolls back, and its
    rows are claimed again, once."""
    _insert(dsn, [Step("record") for _ in range(5000)])
    server = serve("--processes", "2", "--queue", "default=100")

    def kill_claimers() -> int:
        row = _query(
            dsn,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'awa-fast claimer' AND datname = current_database()",
        )[0]
        return int(row[0])

    for _ in range(3):  # three rounds of kills under load, each after progress again
        done = states(dsn).get("completed", 0)
        if done >= 5000:
            break
        wait_until(lambda: kill_claimers() >= 1, what="a claim connection to kill")
        wait_until(lambda d=done: states(dsn).get("completed", 0) > d, what="progress")
    wait_until(lambda: _completed(dsn, 5000), timeout=60, what="5,000 completions")
    [(total, distinct)] = _query(dsn, "SELECT count(*), count(DISTINCT job_id) FROM calls")
    assert (total, distinct) == (5000, 5000)
    assert "reconnecting" in server.log()
    server.signal()
    assert server.wait(30) == 0


def test_killing_the_committer_connection_loses_nothing(serve: Any, dsn: str) -> None:
    _insert(dsn, [Step("record") for _ in range(5000)])
    serve("--processes", "2", "--queue", "default=100")

    def kill_committer() -> int:
        row = _query(
            dsn,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'awa-fast committer' AND datname = current_database()",
        )[0]
        return int(row[0])

    kills = 0
    for _ in range(5):  # five kills under load, each after the committer made progress again
        done = states(dsn).get("completed", 0)
        if done >= 5000:
            break
        wait_until(lambda: kill_committer() == 1, what="a committer connection to kill")
        kills += 1
        wait_until(lambda d=done: states(dsn).get("completed", 0) > d, what="progress")
    wait_until(lambda: _completed(dsn, 5000), timeout=60, what="5,000 completions")
    assert kills >= 1
    [(total, distinct)] = _query(dsn, "SELECT count(*), count(DISTINCT job_id) FROM calls")
    assert (total, distinct) == (5000, 5000)
    assert states(dsn) == {"completed": 5000}


def test_recycling_after_n_jobs_replaces_workers_and_loses_nothing(serve: Any, dsn: str) -> None:
    _insert(dsn, [Step("record") for _ in range(600)])
    port = free_port()
    server = serve(
        "--processes", "2", "--queue", "default=10", "--max-jobs-per-worker", "50",
        "--metrics-port", str(port),
    )  # fmt: skip
    wait_until(lambda: _completed(dsn, 600), timeout=60)
    [(total, distinct, pids)] = _query(
        dsn, "SELECT count(*), count(DISTINCT job_id), count(DISTINCT pid) FROM calls"
    )
    assert (total, distinct) == (600, 600)
    # A worker's running jobs (its share, 5) may end past its 50th; jobs it held it hands back.
    [(most,)] = _query(dsn, "SELECT max(n) FROM (SELECT count(*) n FROM calls GROUP BY pid) c")
    assert most <= 50 + 5
    assert pids >= 600 // (50 + 5)
    # Every worker that ran a job and is gone was recycled; none crashed.
    exits = worker_exits(scrape(port))
    assert exits["recycled"] >= pids - 2, exits
    assert exits["evicted"] == exits["retired"] == exits["crashed"] == 0, exits
    server.signal()
    assert server.wait(30) == 0
    log = server.log()
    assert "killed by" not in log and " ERROR " not in log, log[-4000:]


def _running(dsn: str) -> int:
    [(count,)] = _query(dsn, "SELECT count(*) FROM awa_fast.jobs_hot WHERE state = 'running'")
    return int(count)


def test_jobs_held_by_a_killed_worker_go_back_unspent(serve: Any, dsn: str) -> None:
    """One worker, concurrency 1, three jobs held behind a hanging one: the worker is
    killed; the hanging job's attempt is spent and retried, the held ones run later on
    their first attempt."""
    with awa_fast.Client(dsn) as client:
        hang, *held = client.insert_many([Step("hang_once"), *[Step("record")] * 3])
    server = serve("--processes", "1", "--queue", "default=1", "--prefetch", "3")
    started = "SELECT 1 FROM calls WHERE note = 'started'"
    wait_until(
        lambda: _running(dsn) == 4 and bool(_query(dsn, started)),
        what="one job running and three held",
    )
    with psycopg.connect(dsn) as conn:
        [(victim,)] = conn.execute("SELECT pid FROM calls WHERE note = 'started'").fetchall()
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: states(dsn) == {"completed": 4}, what="all four to complete")
    assert job(dsn, hang)["attempt"] == 2
    assert [(job(dsn, j)["attempt"], job(dsn, j)["errors"]) for j in held] == [(1, [])] * 3
    server.signal()
    assert server.wait(30) == 0


def test_client_run_takes_the_sdks_weighted_mode(serve: Any, dsn: str) -> None:
    """`client.run(queues, global_max_workers=2)`: of six long jobs, two run at once."""
    _insert(dsn, [Step("sleep", seconds=2) for _ in range(6)])
    weighted = "client.run([{'name': 'default', 'min_workers': 1}], global_max_workers=2)"
    server = serve(in_process=True, run=weighted)
    started = "SELECT count(*) FROM calls WHERE note = 'started'"
    wait_until(lambda: _query(dsn, started) == [(2,)], what="two handlers started")
    assert _query(dsn, started) == [(2,)]  # the others wait for the global pool
    wait_until(lambda: _completed(dsn, 6), what="all six to complete")
    server.signal()
    assert server.wait(30) == 0
