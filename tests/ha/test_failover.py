"""A drain by the serve pool, with a producer inserting, through a failover: the primary
killed (``pg_ctl stop -m immediate``) and its standby promoted mid-run. Checked from the
rows of the promoted standby afterwards.

With a synchronous standby nothing acknowledged is lost: every job a call returned for is
there and completes, each runs once but for the attempts in flight at the failover (at
most the concurrency), rescued once; none is stranded; the leader's term is renewed on
the new primary. With an asynchronous one, what the standby never received is lost by
Postgres itself: inserts among it. No job whose insert was lost runs after the failover,
and every job that survived completes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import awa_fast
from awa_fast.maintenance.leader import TERM_INTERVALS
from awa_fast.maintenance.rescuer import GONE, STALE
from tests.ha import failover
from tests.ha.app import Work
from tests.ha.conftest import Replicated
from tests.ha.failover import CONCURRENCY, SETTINGS, Producer, completed, unfinished
from tests.helpers import wait_until

BACKLOG = 1500
SECONDS = 0.01  # each job's handler, past recording its run
SLOW = 0.5  # ... where the pool must hold jobs unstarted
PREFETCH = 8  # each worker holds this many beyond those it runs


def _backlog(
    pair: Replicated, prefix: str, *, count: int = BACKLOG, seconds: float = SECONDS
) -> list[str]:
    tokens = [f"{prefix}-{n}" for n in range(count)]
    with awa_fast.Client(pair.url) as client:
        client.insert_many([Work(token, seconds) for token in tokens])
    return tokens


def _jobs(pair: Replicated) -> dict[str, tuple[str, int, list[str]]]:
    """Each job of the promoted standby by token: its state, attempt and errors."""
    rows = pair.query(
        pair.standby,
        "SELECT args->>'token', state::text, attempt,"
        " coalesce(array(SELECT e->>'error' FROM jsonb_array_elements(errors) e), '{}')"
        " FROM awa_fast.jobs",
    )
    return {token: (state, attempt, list(errors)) for token, state, attempt, errors in rows}


def _runs(pair: Replicated) -> list[tuple[str, int, float]]:
    """Each run recorded on the promoted standby: token, run lease, when it started."""
    rows = pair.query(pair.standby, "SELECT token, run_lease, started FROM runs")
    return [(token, int(lease), float(started)) for token, lease, started in rows]


def _settled(pair: Replicated) -> bool:
    try:
        return unfinished(pair, pair.standby) == {}
    except awa_fast.DatabaseError:  # not promoted yet
        return False


@pytest.mark.slow
def test_a_synchronous_standby_promoted_mid_drain_loses_and_repeats_nothing(
    replicated: Replicated, tmp_path: Path
) -> None:
    pair = replicated
    pair.synchronous()
    backlog = _backlog(pair, "backlog")
    server = failover.serve(pair, tmp_path)
    producer = Producer(pair.url, "produced", seconds=SECONDS)
    try:
        wait_until(lambda: completed(pair, pair.primary) >= BACKLOG // 2, timeout=60)
        killed, promoted = pair.fail_over()
        [(promoted_db,)] = pair.query(pair.standby, "SELECT extract(epoch FROM now())")
        wait_until(lambda: producer.returned_since(promoted) >= 200, what="inserts after")
        producer.stop()
        wait_until(
            lambda: _settled(pair),
            timeout=120,
            what="every job completed",
            explain=lambda: unfinished(pair, pair.standby),
        )
        ttl = TERM_INTERVALS * SETTINGS["election_interval"]
        wait_until(
            lambda: (
                pair.query(
                    pair.standby,
                    "SELECT extract(epoch FROM expires_at) > %s FROM awa_fast.leader",
                    float(promoted_db) + ttl,
                )
                == [(True,)]
            ),
            what="the leader's term renewed on the new primary",
        )
        [(holder,)] = pair.query(pair.standby, "SELECT holder FROM awa_fast.leader")
    finally:
        producer.stop()
        server.close()
    log = server.log()
    jobs, runs = _jobs(pair), _runs(pair)
    returned = {token for token, _ in producer.returned}
    # every job a call returned for is there, and every job there completed
    assert not (set(backlog) | returned) - jobs.keys(), log[-4000:]
    assert {state for state, _, _ in jobs.values()} == {"completed"}
    # each ran, and ran once, but for the attempts in flight at the failover
    ran: dict[str, int] = {}
    for token, _, _ in runs:
        ran[token] = ran.get(token, 0) + 1
    assert jobs.keys() <= ran.keys()
    twice = {token for token, times in ran.items() if times > 1}
    assert max(ran.values()) <= 2 and len(twice) <= CONCURRENCY, (twice, log[-4000:])
    # a job that ran twice was rescued once (a rescue of one that had not started, whose
    # claim's reply or standby claim the failover lost, leaves it with one run)
    rescued = {token: errors for token, (_, attempt, errors) in jobs.items() if attempt > 1}
    assert twice <= rescued.keys()
    assert all(len(errors) == 1 and errors[0] in (GONE, STALE) for errors in rescued.values())
    assert all(jobs[token][1] == 2 for token in rescued)
    assert f" pid {server.proc.pid} " in holder
    gap = failover.pause(pair, dead=killed)
    print(f"failover: {gap}, {len(twice)} ran twice, {len(rescued)} rescued")


@pytest.mark.slow
def test_an_asynchronous_standby_loses_inserts_and_no_lost_job_runs(
    replicated: Replicated, tmp_path: Path
) -> None:
    """The standby is cut off from the primary, as a lagging asynchronous standby is from
    its primary's last moment; a burst of slow jobs is inserted, and the pool claims them,
    running some and holding others unstarted; then the primary is killed and the standby
    promoted. Postgres lost those inserts. The pool gives back what it held rather than
    start it, and every job the promoted standby has completes."""
    pair = replicated
    server = failover.serve(pair, tmp_path, prefetch=PREFETCH)
    producer = Producer(pair.url, "produced", seconds=SECONDS, batch=10, every=0.1)
    try:
        backlog = _backlog(pair, "backlog", count=300)
        wait_until(lambda: completed(pair, pair.primary) >= len(backlog), timeout=60)
        pair.cut_off()
        cut = time.time()
        burst = _backlog(pair, "lost", count=4 * CONCURRENCY, seconds=SLOW)
        wait_until(
            lambda: _running(pair, "lost-%") >= CONCURRENCY + PREFETCH,
            what="the pool to run some of the burst and hold more",
        )
        # The handlers running at the kill end while the primary is still to be chosen:
        # the held jobs' turn comes with no database to say they are gone.
        killed, promoted = pair.fail_over(deciding=3 * SLOW)
        wait_until(lambda: producer.returned_since(promoted) >= 100, what="inserts after")
        producer.stop()
        wait_until(
            lambda: _settled(pair),
            timeout=120,
            what="every job the promoted standby has completed",
            explain=lambda: unfinished(pair, pair.standby),
        )
    finally:
        producer.stop()
        server.close()
    log = server.log()
    jobs, runs = _jobs(pair), _runs(pair)
    returned = {token for token, _ in producer.returned} | set(backlog) | set(burst)
    lost = returned - jobs.keys()
    after_cut = {token for token, at in producer.returned if cut <= at < killed}
    assert set(burst) | after_cut <= lost  # Postgres lost what the standby never received
    # none of them ran from the kill on: the pool gave back what it held
    started_lost = [started for token, _, started in runs if token in lost]
    assert [at for at in started_lost if at >= killed] == [], log[-4000:]
    assert "jobs held unstarted are given back" in log, log[-4000:]
    # no stall: every job the promoted standby has completed, having run
    assert {state for state, _, _ in jobs.values()} == {"completed"}
    assert jobs.keys() <= {token for token, _, _ in runs}
    print(f"asynchronous failover: {len(lost)} inserts lost")


def _running(pair: Replicated, tokens: str) -> int:
    """Jobs whose token is like ``tokens`` running on the primary (claimed: started, or
    held unstarted by a worker)."""
    [(count,)] = pair.query(
        pair.primary,
        "SELECT count(*) FROM awa_fast.jobs WHERE state = 'running' AND args->>'token' LIKE %s",
        tokens,
    )
    return int(count)
