"""A host killed outright is seen by its lock, long before its heartbeat would go stale:
its running jobs are rescued and its prefetched ones given back uncharged, and both run
on the host that is left. A host whose connection is merely cut keeps its jobs."""

from __future__ import annotations

from typing import Any

import psycopg

import awa_fast
from awa_fast.maintenance.rescuer import GONE
from tests.helpers import job, wait_until
from tests.runtime.work.pool.conftest import Serve
from tests.runtime.work.pool.runs_app import NAP, Hold, Nap

APP = "tests.runtime.work.pool.runs_app"
SETTINGS = (
    "--set", "heartbeat_staleness=60",  # far beyond the test: only a lock can say gone
    "--set", "heartbeat_interval=1", "--set", "election_interval=0.3",
    "--set", "rescue_interval=0.2", "--set", "promote_interval=0.05",
)  # fmt: skip
# The killed host: two workers, each running one job and holding two more.
HOLDER = ("--processes", "2", "--queue", "default=2", "--prefetch", "2", *SETTINGS)
SETTLE = 5.0  # awa_fast.maintenance.rescuer.SETTLE: the leader's wait before a lock counts


def _query(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def _tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE runs (job_id bigint, attempt int, run_lease bigint, pid int,"
            " at timestamptz DEFAULT clock_timestamp())"
        )
        conn.execute("CREATE TABLE released ()")


def _host_id(dsn: str, server: Serve) -> int | None:
    rows = _query(dsn, "SELECT id FROM awa_fast.hosts WHERE name LIKE %s", f"%:{server.proc.pid}")
    return rows[0][0] if rows else None


def _leads(dsn: str, server: Serve) -> bool:
    rows = _query(dsn, "SELECT holder FROM awa_fast.leader WHERE expires_at > now()")
    return bool(rows) and f" pid {server.proc.pid} " in rows[0][0]


def _held_and_started(dsn: str, host_id: int) -> tuple[int, int]:
    """The host's running attempts marked held at its last beat, and the others."""
    [counts] = _query(
        dsn,
        "SELECT count(*) FILTER (WHERE held_lease = run_lease),"
        " count(*) FILTER (WHERE held_lease IS DISTINCT FROM run_lease)"
        " FROM awa_fast.jobs_hot WHERE state = 'running' AND host_id = %s",
        host_id,
    )
    return counts


def _settled_leader(dsn: str, serve: Any) -> Serve:
    """A host that leads, its capacity taken by two jobs that hold until released, up
    for longer than the leader's wait before a free lock counts."""
    _tables(dsn)
    # No standby claim there: a job started on one while the holds take the capacity
    # would be given back, and wait for the other host's next claim.
    leader: Serve = serve(
        "--processes", "1", "--queue", "default=2", "--prefetch", "0", "--no-standby",
        *SETTINGS, app=APP,
    )  # fmt: skip
    wait_until(lambda: _leads(dsn, leader), what="the first host to lead")
    with awa_fast.Client(dsn) as client:
        client.insert_many([Hold(), Hold()])
    wait_until(lambda: len(_query(dsn, "SELECT 1 FROM runs")) == 2, what="the holds to run")
    wait_until(
        lambda: (
            _query(
                dsn,
                "SELECT bool_and(started_at < now() - %s * interval '1 second')"
                " AND pg_postmaster_start_time() < now() - %s * interval '1 second'"
                " FROM awa_fast.hosts",
                SETTLE + 1,
                SETTLE + 1,
            )
            == [(True,)]
        ),
        what="the leader to be up long enough",
    )
    return leader


def _holding(
    dsn: str, serve: Any, *, nap: float, env: dict[str, str]
) -> tuple[Serve, int, list[int]]:
    """A second host that runs two of six jobs (of ``nap`` seconds) and holds the four
    others unstarted."""
    holder: Serve = serve(*HOLDER, app=APP, env=env, own_group=True)
    wait_until(lambda: _host_id(dsn, holder) is not None, what="the second host to register")
    host_id = _host_id(dsn, holder)
    assert host_id is not None
    with awa_fast.Client(dsn) as client:
        ids = client.insert_many([Nap(nap) for _ in range(6)])
    wait_until(
        lambda: _held_and_started(dsn, host_id) == (4, 2),
        what="two jobs running and four held there",
        explain=lambda: _held_and_started(dsn, host_id),
    )
    return holder, host_id, ids


def _runs(dsn: str, job_id: int) -> list[tuple[int, int]]:
    """Each run of ``job_id``: its attempt and the process it ran in."""
    return _query(dsn, "SELECT attempt, pid FROM runs WHERE job_id = %s ORDER BY at", job_id)


def test_a_killed_hosts_jobs_run_on_the_other_host_seen_by_its_lock(dsn: str, serve: Any) -> None:
    """SIGKILL the whole process group of a host (supervisor and workers) while it runs
    two jobs and holds four: the leader sees its lock free and takes it for gone, well
    before the 60 s staleness. Its two running jobs run again on the other host, charged
    an attempt; its four held jobs run there too, at attempt 1 still."""
    leader = _settled_leader(dsn, serve)
    doomed, _, ids = _holding(dsn, serve, nap=0.2, env={NAP: "3600"})  # hung there
    ran_on_doomed = {job_id for (job_id,) in _query(dsn, "SELECT job_id FROM runs")} & set(ids)
    assert len(ran_on_doomed) == 2
    [(killed_at,)] = _query(dsn, "SELECT clock_timestamp()")
    doomed.kill_group()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO released DEFAULT VALUES")  # the leader has room again
    wait_until(
        lambda: {job(dsn, j)["state"] for j in ids} == {"completed"},
        what="every job of the killed host completed",
        explain=lambda: [job(dsn, j)["state"] for j in ids],
    )
    for job_id in ids:
        final, runs = job(dsn, job_id), _runs(dsn, job_id)
        if job_id in ran_on_doomed:
            assert final["attempt"] == 2 and [a for a, _ in runs] == [1, 2]
            assert final["errors"][0]["error"] == GONE
        else:
            assert final["attempt"] == 1 and [a for a, _ in runs] == [1]
            assert final["errors"][0]["given_back"] is True
    log = leader.log()
    assert "are gone (their connections closed)" in log and "stopped heartbeating" not in log
    [(held, running)] = _query(
        dsn,
        "SELECT max(at - %s) FILTER (WHERE attempt = 1), max(at - %s) FILTER (WHERE attempt = 2)"
        " FROM runs WHERE at > %s",
        killed_at,
        killed_at,
        killed_at,
    )
    print(f"from SIGKILL to running on the other host: held {held}, running {running}")


def test_a_host_whose_connection_is_cut_takes_its_lock_again_and_keeps_its_jobs(
    dsn: str, serve: Any
) -> None:
    """The session holding a host's lock ends (pg_terminate_backend) while the host runs
    two jobs and holds four: the host opens another and takes its lock again before the
    leader, looking, can take it for gone. Its row stays; each job runs once."""
    leader = _settled_leader(dsn, serve)
    holder, host_id, ids = _holding(dsn, serve, nap=3.0, env={})
    lock = (
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = 1635213670 AND objid = %s AND objsubid = 2"
    )
    [(cut,)] = _query(dsn, lock, host_id)
    _query(dsn, "SELECT pg_terminate_backend(%s)", cut)
    wait_until(
        lambda: {job(dsn, j)["state"] for j in ids} == {"completed"},
        what="every job completed",
        explain=lambda: [job(dsn, j)["state"] for j in ids],
    )
    assert [(job(dsn, j)["attempt"], len(_runs(dsn, j))) for j in ids] == [(1, 1)] * 6
    assert _host_id(dsn, holder) == host_id
    [(again,)] = _query(dsn, lock, host_id)
    assert again != cut
    assert "are gone" not in leader.log()
