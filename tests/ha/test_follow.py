"""A runner on a URL naming a primary and its standby follows a failover: every connection
it keeps open is made again on the promoted standby, LISTEN included, the leader's term is
renewed there, and a job inserted afterwards runs on news, not at the next poll."""

from __future__ import annotations

import asyncio
import os

import awa_fast
from awa_fast.localpg import LocalCluster
from awa_fast.maintenance.leader import TERM_INTERVALS
from tests.ha.app import Work
from tests.ha.conftest import Replicated
from tests.helpers import await_until, run

# No claim waits for a poll here: a job that runs at all came through LISTEN.
POLL = 60.0
ELECTION = 0.5
# The connections a runner keeps open while idle; the committer's opens with an outcome.
KEPT_OPEN = {"awa-fast claimer", "awa-fast heartbeat", "awa-fast leader", "awa-fast listener"}


def _names(pair: Replicated, cluster: LocalCluster | None = None) -> set[str]:
    """The application names of the sessions on ``cluster`` (the standby, promoted)."""
    rows = pair.query(
        cluster or pair.standby,
        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()",
    )
    return {name for (name,) in rows}


def _listening(pair: Replicated) -> bool:
    rows = pair.query(
        pair.standby,
        "SELECT 1 FROM pg_stat_activity WHERE application_name = 'awa-fast listener'"
        " AND query LIKE 'LISTEN %%'",
    )
    return bool(rows)


def _renewed_since(pair: Replicated, moment: float) -> bool:
    """The leader's term, on the promoted standby, runs past what a renewal before
    ``moment`` (the database's clock, epoch seconds) could have given it."""
    rows = pair.query(
        pair.standby,
        "SELECT extract(epoch FROM expires_at) > %s FROM awa_fast.leader",
        moment + TERM_INTERVALS * ELECTION,
    )
    return rows == [(True,)]


def test_a_runner_follows_the_promoted_standby_and_listens_there(replicated: Replicated) -> None:
    pair = replicated
    pair.synchronous()
    client = awa_fast.AsyncClient(pair.url)
    ran: list[str] = []

    @client.task(Work)
    async def work(job: awa_fast.Job[Work]) -> None:
        job.set_progress(50, job.args.token)
        await job.flush_progress()  # the attempt writer's connection, on the primary
        ran.append(job.args.token)

    async def main() -> None:
        await client.start(
            {"default": 4}, poll_interval=POLL, election_interval=ELECTION, standby=False
        )
        try:
            await client.insert(Work("before"))
            await await_until(lambda: ran == ["before"], what="the job before the failover")
            await await_until(lambda: _names(pair, pair.primary) >= KEPT_OPEN, what="connected")
            await asyncio.to_thread(pair.fail_over)
            [(promoted,)] = pair.query(pair.standby, "SELECT extract(epoch FROM now())")
            await await_until(lambda: _names(pair) >= KEPT_OPEN, what="every part to follow")
            await await_until(lambda: _listening(pair), what="LISTEN on the new primary")
            await client.insert(Work("after"))
            # well within the poll interval: the claim came of the insert's NOTIFY
            await await_until(lambda: "after" in ran, timeout=POLL / 2, what="the job after")
            await await_until(
                lambda: _names(pair) >= {"awa-fast committer", "awa-fast attempt writes"},
                what="the committer and the attempt writer to follow",
            )
            await await_until(
                lambda: "awa-fast maintenance" in _names(pair), what="the leader's work"
            )
            await await_until(
                lambda: _renewed_since(pair, float(promoted)), what="the term renewed there"
            )
        finally:
            await client.shutdown()
            await client.close()

    run(main())
    assert ran == ["before", "after"]
    [(holder, state, attempt)] = pair.query(
        pair.standby,
        "SELECT l.holder, j.state::text, j.attempt FROM awa_fast.leader l, awa_fast.jobs j"
        " WHERE j.args->>'token' = 'after'",
    )
    assert f" pid {os.getpid()} " in holder
    assert (state, attempt) == ("completed", 1)  # its flush, on the new primary, went through
