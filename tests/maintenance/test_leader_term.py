"""Leadership as a term that expires, and maintenance fenced by it (migration 0020): a
leader that stops renewing is replaced within a bounded time, and once its term is over
its steps change nothing, however late it wakes."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.db.connections import Database
from awa_fast.maintenance.leader import FENCE_KEY, Deposed, Leader
from awa_fast.maintenance.service import Maintenance
from tests.helpers import await_until, job, leading, lock_waiters, run, wait_until
from tests.maintenance.support import STALENESS, maintenance, until_up, work_for_every_pass
from tests.runtime.work.pool.app import Step
from tests.runtime.work.pool.conftest import Serve

# Every table a maintenance pass writes.
TABLES = (
    "jobs_hot",
    "jobs_deferred",
    "jobs_done",
    "dlq",
    "hosts",
    "standby_claims",
    "cron_jobs",
    "batch_operations",
)
Step_ = Callable[[Maintenance, psycopg.AsyncConnection[Any], datetime], Awaitable[object]]
# Each fenced pass of the leader, on a connection, with the cron pass's clock.
STEPS: dict[str, Step_] = {
    "promote": lambda m, c, now: m.promoter.run_once(c),
    "rescue": lambda m, c, now: m.rescuer.run_once(c),
    "clean": lambda m, c, now: m.cleaner.run_once(c),
    "periodic": lambda m, c, now: m.periodic.run_once(c, now=now),
    "batch": lambda m, c, now: m.batch_ops.run_once(c),
}


def _rows(dsn: str) -> dict[str, list[str]]:
    """Every row of every table a step writes, as text."""
    with psycopg.connect(dsn) as conn:
        return {
            table: [row for (row,) in conn.execute(f"SELECT t::text FROM awa_fast.{table} t")]
            for table in TABLES
        }


def _term_expired(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT expires_at <= now() FROM awa_fast.leader").fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("ended", ["expired", "succeeded"])
def test_no_step_of_a_term_that_ended_changes_a_row(
    dsn: str, conn: psycopg.Connection[Any], ended: str
) -> None:
    """A leader that has not noticed its term ended (it expired unrenewed, and another
    host may have begun the next) runs each step: each raises Deposed and changes
    nothing. The next term's steps act on the same rows."""
    cron_now = work_for_every_pass(dsn, conn)
    before = _rows(dsn)
    old = maintenance(dsn, election_interval=0.1, heartbeat_staleness=STALENESS)
    successor = maintenance(dsn, election_interval=10.0, heartbeat_staleness=STALENESS)

    async def main() -> list[object]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            assert await old.leader.check()
            term = old.leader.term
            await await_until(lambda: _term_expired(dsn), what="the unrenewed term to end")
            await until_up(old.leader)  # else its rescue would find no host to take
            if ended == "succeeded":
                assert await successor.leader.check()
            for name, step in STEPS.items():
                old.leader.term = term  # not noticed yet
                with pytest.raises(Deposed):
                    await step(old, c, cron_now)
                assert not old.leader.is_leader, name
            assert _rows(dsn) == before
            await old.leader.close()
            async with leading(successor):
                await until_up(successor.leader)
                return [await step(successor, c, cron_now) for step in STEPS.values()]

    promoted, rescued, cleaned, fired, stepped = run(main())
    assert (promoted, cleaned, fired) == (1, 1, 1)
    assert rescued == {"host_take_dead": 1, "job_select_stale": 1}
    assert stepped is not None and stepped.state == "running"  # type: ignore[attr-defined]


def test_a_frequent_step_fences_only_when_it_has_work(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """The steps that run every second or more often look before they fence, so an idle
    leader opens no transaction for them. With the fence lock held against them (as a new
    term's election holds it), each returns when it has nothing to do, and waits when it
    has work; each does its work once the lock is let go."""
    looking: dict[str, Step_] = {
        "promote": lambda m, c, now: m.promoter.step(c),  # the leader's round calls this
        **{name: STEPS[name] for name in ("rescue", "periodic", "batch")},
    }
    # its term outlasts the test
    leader_of = maintenance(dsn, election_interval=60.0, heartbeat_staleness=STALENESS)

    async def main(fence: psycopg.Connection[Any]) -> dict[str, object]:
        done: dict[str, object] = {}
        async with (
            leading(leader_of),
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c,
        ):
            fence.execute("SELECT pg_advisory_lock(%s)", (FENCE_KEY,))
            async with asyncio.timeout(10):  # a step that took the fence would wait here
                for step in looking.values():
                    await step(leader_of, c, datetime.now().astimezone())
            await until_up(leader_of.leader)
            cron_now = work_for_every_pass(dsn, conn)
            for name, step in looking.items():
                waiting = asyncio.create_task(step(leader_of, c, cron_now))
                await await_until(lambda: lock_waiters(dsn) == 1, what=f"{name} to wait")
                fence.execute("SELECT pg_advisory_unlock_all()")
                done[name] = await waiting
                fence.execute("SELECT pg_advisory_lock(%s)", (FENCE_KEY,))
        return done

    with psycopg.connect(dsn, autocommit=True) as fence:
        done = run(main(fence))
    assert done["periodic"] == 1
    scheduled = "SELECT count(*) FROM awa_fast.jobs_deferred WHERE state = 'scheduled'"
    assert conn.execute(scheduled).fetchone() == (0,)  # promoted
    assert done["rescue"] == {"host_take_dead": 1, "job_select_stale": 1}
    assert getattr(done["batch"], "state", None) == "running"


def test_one_leader_at_a_time_and_reelection(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """A leader that stops cleanly releases its term, and says so: the next host's next
    election begins the next term, without waiting for the last to expire."""

    async def main() -> list[bool]:
        first, second = (
            Leader(Database(dsn), interval=3600.0),
            Leader(Database(dsn), interval=3600.0),
        )
        seen = [await first.check(), await second.check(), await first.check()]
        await first.close()
        seen.append(await second.check())
        await second.close()
        return seen

    with caplog.at_level("INFO", logger="awa_fast.leader"):
        assert run(main()) == [True, False, True, True]
    said = [r.getMessage() for r in caplog.records]
    assert [line.rsplit(" ", 1)[0] for line in said] == [
        "this host is now the maintenance leader (term",
        "released the maintenance leader's term",
        "this host is now the maintenance leader (term",
        "released the maintenance leader's term",
    ]
    terms = [int(line.rsplit(" ", 1)[1].rstrip(")")) for line in said]
    assert terms[1] == terms[0] and terms[3] == terms[2] == terms[0] + 1


def test_an_open_fenced_transaction_holds_off_the_next_term_not_a_renewal(dsn: str) -> None:
    """While a leader's fenced transaction runs, it renews its term without waiting; once
    the term has expired, the next cannot begin until that transaction ends."""
    first, second = Leader(Database(dsn), interval=0.2), Leader(Database(dsn), interval=0.2)

    async def main() -> tuple[int | None, list[bool], int | None]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            assert await first.check()
            term = first.term
            async with first.fenced(c):
                renewed = await first.check()
                await await_until(lambda: _term_expired(dsn), what="the term to expire")
                held_off = await second.check()
            taken = await second.check()
        next_term = second.term
        await second.close()
        await first.close()
        return term, [renewed, held_off, taken], next_term

    term, seen, next_term = run(main())
    assert seen == [True, False, True]
    assert term is not None and next_term == term + 1


def test_a_leader_that_wakes_into_a_new_term_says_its_last_one_ended(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A leader paused past its term (nobody else took it) begins the next term at its
    next election: a new term, and it says that the last one is over, since whatever
    it had under way in that term is undone."""
    leader = Leader(Database(dsn), interval=0.1)

    async def main() -> tuple[int | None, int | None]:
        assert await leader.check()
        term = leader.term
        await await_until(lambda: _term_expired(dsn), what="the unrenewed term to end")
        assert await leader.check()
        new_term = leader.term
        await leader.close()
        return term, new_term

    with caplog.at_level("INFO", logger="awa_fast.leader"):
        term, new_term = run(main())
    assert term is not None and new_term == term + 1
    said = [r.getMessage() for r in caplog.records]
    assert said[1:] == [
        f"no longer the maintenance leader: term {term} is over",
        f"this host is now the maintenance leader (term {new_term})",
        f"released the maintenance leader's term {new_term}",
    ]


def test_a_term_nobody_renews_passes_to_another_host(dsn: str) -> None:
    """A leader that stops renewing (a paused process) keeps its term no longer than
    the term's length; another host's next election after that begins the next term."""
    first, second = Leader(Database(dsn), interval=0.2), Leader(Database(dsn), interval=0.2)

    async def main() -> float:
        began = time.monotonic()  # before the term's start by the database's clock
        assert await first.check()
        assert not await second.check()
        await await_until(second.check, timeout=10, what="the next term")
        waited = time.monotonic() - began
        await second.close()
        await first.close()
        return waited

    assert run(main()) >= first.term_s


FAST = (
    "--processes", "1",
    "--set", "election_interval=0.3", "--set", "heartbeat_interval=0.2",
    "--set", "rescue_interval=0.2", "--set", "promote_interval=0.05",
    "--set", "heartbeat_staleness=2",
)  # fmt: skip


def _leads(dsn: str, server: Serve) -> bool:
    """Whether ``server``'s supervisor holds the current term."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT holder FROM awa_fast.leader WHERE expires_at > now()")
        found = row.fetchone()
    return found is not None and f" pid {server.proc.pid} " in found[0]


def _notes(dsn: str, job_id: int) -> list[tuple[int, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT attempt, note FROM calls WHERE job_id = %s ORDER BY at", (job_id,)
        )
        return rows.fetchall()


def test_a_frozen_leader_is_replaced_and_acts_no_more_once_woken(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Two `serve` supervisors; the leader's is stopped (SIGSTOP) with an attempt running
    on it. The other takes the term within its bound, promotes what falls due meanwhile
    and rescues the frozen host's attempt. Woken (SIGCONT), the old leader learns its
    term is over and promotes and rescues nothing: each job was moved once."""
    conn.execute(
        "CREATE TABLE calls (job_id bigint, pid int, attempt int, note text,"
        " at timestamptz DEFAULT clock_timestamp())"
    )
    first = Serve(dsn, tmp_path, "--queue", "default=4", *FAST)
    second: Serve | None = None
    try:
        wait_until(lambda: _leads(dsn, first), what="the first supervisor to lead")
        with awa_fast.Client(dsn) as client:
            hung = client.insert(Step("hang_once")).id
        wait_until(lambda: _notes(dsn, hung) == [(1, "started")], what="the attempt to start")
        # "later" runs on the second only: a job due there cannot start on the frozen host
        second = Serve(dsn, tmp_path, "--queue", "default=4", "--queue", "later=4", *FAST)
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM awa_fast.hosts").fetchone() == (2,),
            what="the second supervisor to register",
        )
        first.signal(signal.SIGSTOP)
        # the term's length, another election, and a term's length more should the
        # frozen leader hold a fenced transaction open; the rest is the machine's slack
        wait_until(lambda: _leads(dsn, second), timeout=10, what="the other to take over")
        with awa_fast.Client(dsn) as client:
            due = datetime.now().astimezone() + timedelta(seconds=0.5)
            scheduled = client.insert(Step("record"), run_at=due, queue="later").id
        wait_until(lambda: job(dsn, scheduled)["state"] == "completed", what="the promotion")
        wait_until(lambda: job(dsn, hung)["state"] == "completed", what="the rescue")
        first.signal(signal.SIGCONT)
        wait_until(
            lambda: "no longer the maintenance leader" in first.log(),
            what="the woken leader to learn its term is over",
            explain=first.log,
        )
        # Who leads from here is the next elections' business: on a loaded machine the
        # woken host may begin a later term of its own. The frozen term did nothing.
        promoted = job(dsn, scheduled)
        assert (promoted["attempt"], promoted["errors"]) == (1, [])
        assert _notes(dsn, scheduled) == [(1, "done")]
        rescued = job(dsn, hung)
        assert rescued["attempt"] == 2
        assert [e["error"][:15] for e in rescued["errors"]] == ["heartbeat stale"]
        assert _notes(dsn, hung) == [(1, "started"), (2, "done")]
        assert "stopped heartbeating" in second.log()
        assert "stopped heartbeating" not in first.log()
    finally:
        for server in (first, second):
            if server is not None:
                server.signal(signal.SIGCONT)
                server.close()
