"""A unique key raced: the second inserter waits on the first one's claim of the key, and
whatever the first does (commit, roll back), at most one live job holds the key after. The
first holds its transaction open; the test waits until the second is blocked on its lock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import awa_fast
from awa_fast import admin
from tests.factories import finish_jobs
from tests.helpers import lock_waiters, states, wait_until

UNIQUE = {"by_args": True}


@dataclass
class Report:
    day: str


Step = Callable[[psycopg.Connection[Any]], Any]


def _insert(conn: psycopg.Connection[Any]) -> awa_fast.JobRow:
    return awa_fast.insert(conn, Report("mon"), unique=UNIQUE)


def _race(dsn: str, first: Step, *, commit: bool, second: Step = _insert) -> Any:
    """``first`` in an open transaction; then ``second`` (by default an insert of the same
    unique job) on another connection, which blocks; then commit or roll back ``first``.
    Returns what ``first`` returned, and what ``second`` returned or raised."""
    outcome: list[Any] = []

    def run_second() -> None:
        with psycopg.connect(dsn, autocommit=True, application_name="racer") as conn:
            try:
                outcome.append(second(conn))
            except awa_fast.UniqueConflict as exc:
                outcome.append(exc)

    with psycopg.connect(dsn) as holder:
        held = first(holder)
        racer = threading.Thread(target=run_second)
        racer.start()
        wait_until(
            lambda: lock_waiters(dsn, application_name="racer") > 0,
            timeout=10,
            what="the second insert to block",
        )
        holder.commit() if commit else holder.rollback()
    racer.join(timeout=10)
    assert not racer.is_alive() and len(outcome) == 1
    return held, outcome[0]


@pytest.mark.parametrize("commit", [True, False])
def test_the_second_of_two_racing_inserts_conflicts_only_if_the_first_commits(
    dsn: str, commit: bool
) -> None:
    first, second = _race(dsn, _insert, commit=commit)
    if commit:
        assert isinstance(second, awa_fast.UniqueConflict) and second.job_id == first.id
    else:
        assert isinstance(second, awa_fast.JobRow) and second.id != first.id
    assert states(dsn) == {"available": 1}


def test_two_takeovers_of_a_key_whose_holder_finished_leave_one_holder(dsn: str) -> None:
    """The key's holder failed, so the key is free; both racers take it over (an UPDATE
    of the claim, not an INSERT), and the second must see the first's job once it waits."""
    with awa_fast.Client(dsn) as client:
        done = client.insert(Report("mon"), unique=UNIQUE)
    with psycopg.connect(dsn) as conn:
        finish_jobs(conn, "failed", [done.id])

    first, second = _race(dsn, _insert, commit=True)
    assert first.id != done.id
    assert isinstance(second, awa_fast.UniqueConflict) and second.job_id == first.id
    assert states(dsn) == {"available": 1, "failed": 1}


def test_an_insert_on_a_fresh_non_autocommit_connection_joins_its_implicit_transaction(
    dsn: str,
) -> None:
    """psycopg opens a non-autocommit connection's transaction at its first statement; the
    insert must run inside it (and go with a rollback), not commit a transaction of its own."""
    with psycopg.connect(dsn) as conn:
        awa_fast.insert(conn, Report("plain"))
        awa_fast.insert(conn, Report("unique"), unique=UNIQUE)
        awa_fast.insert_many(conn, [Report("a"), Report("b")])
        conn.rollback()
        kept = awa_fast.insert(conn, Report("kept"), unique=UNIQUE)
        conn.commit()
    assert states(dsn) == {"available": 1}
    with awa_fast.Client(dsn) as client:
        row = client.get_job(kept.id)
    assert row is not None and row.args == {"day": "kept"}


@pytest.mark.parametrize("revival", ["retry", "retry_from_dlq"])
def test_a_job_revived_while_an_insert_takes_its_key_stays_finished(dsn: str, revival: str) -> None:
    """Reviving a failed job (retry) or a dead-lettered one (retry_from_dlq) takes its key
    back as an insert does: once the racing insert commits, its job holds the key, and the
    revival is refused, the old job left where it was."""
    with awa_fast.Client(dsn) as client:
        dead = client.insert(Report("mon"), unique=UNIQUE)
        with psycopg.connect(dsn) as conn:
            finish_jobs(conn, "failed", [dead.id])
        if revival == "retry_from_dlq":
            assert client.move_failed_to_dlq(dead.id, "gave up") is not None

    def revive(conn: psycopg.Connection[Any]) -> Any:
        op = getattr(admin, revival)(dead.id)
        return op.shape(conn.cursor(row_factory=dict_row).execute(op.sql, op.params).fetchall())

    first, second = _race(dsn, _insert, commit=True, second=revive)
    assert isinstance(second, awa_fast.UniqueConflict) and second.job_id == first.id
    with awa_fast.Client(dsn) as client:
        if revival == "retry_from_dlq":
            assert client.dlq_depth() == 1
        else:
            assert client.get_job(dead.id).state == "failed"
    assert states(dsn).get("available") == 1


def test_a_failed_unique_job_retried_takes_its_key_back(dsn: str) -> None:
    with awa_fast.Client(dsn) as client:
        dead = client.insert(Report("mon"), unique=UNIQUE)
        with psycopg.connect(dsn) as conn:
            finish_jobs(conn, "failed", [dead.id])
        assert client.insert(Report("mon"), unique=UNIQUE).id != dead.id  # key free: failed
        with pytest.raises(awa_fast.UniqueConflict):
            client.retry(dead.id)  # the new job holds it now
        retried = client.retry_failed()
        assert (retried.jobs, retried.matched) == ([], 1)  # found, and left failed
