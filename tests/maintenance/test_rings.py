"""The rings' rotation against a real database (migrations 0028 and 0029): a pass
truncates what the standby claims, the claim ledger and jobs_hot churned through, keeps
every row still wanted, waits for no lock, and frees what a held horizon would keep from
vacuum."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from awa_fast.db.queries import Q
from awa_fast.maintenance.rings import Rings, RingsConfig
from awa_fast.maintenance.stats import MaintenanceStats
from tests.db.test_standby import host, offer
from tests.factories import insert_job
from tests.helpers import assert_counts_exact, run
from tests.maintenance.support import leader, one_pass

CLAIM = {"queue": "default", "limit": 1, "deadline_s": 60.0, "host_id": None}
Conn = psycopg.Connection[Any]


def _pass(dsn: str, *, least: int = 1) -> dict[str, str | None]:
    config = RingsConfig(least=least, jobs_least=least)  # a single row is enough unless told
    rings = Rings(leader=leader(dsn), stats=MaintenanceStats(), config=config)
    return run(one_pass(rings.leader, rings.run_once))


def _ledger(conn: Conn, *lanes: int) -> list[tuple[int, int, int]]:
    """(priority, n, slot) of the ledger rows of ``lanes``: the others hold a row or not
    depending on how many transactions the cluster has seen (claim_jobs moves an empty
    lane to its snapshot once it lags by 1,000)."""
    rows = conn.execute(
        "SELECT priority, n, slot FROM awa_fast.claim_windows"
        " WHERE priority = ANY(%s) ORDER BY 1, 2, 3",
        (list(lanes),),
    )
    return [(p, n, s) for p, n, s in rows]


def _claims(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, queue, job_id, slot FROM awa_fast.standby_claims ORDER BY id"
    ).fetchall()


def _flushed(conn: Conn) -> None:
    """Make this session's table statistics (its dead tuples) visible to others now."""
    conn.execute("SELECT pg_stat_force_next_flush()")


def test_the_ledger_keeps_each_lanes_newest_row(dsn: str, conn: Conn) -> None:
    for priority in (1, 1, 1, 3, 3):
        insert_job(conn, priority=priority)
    for _ in range(5):
        assert conn.execute(Q.job_claim_batch, CLAIM).fetchall()
    assert _ledger(conn, 1, 3) == [(1, 1, 0), (1, 2, 0), (1, 3, 0), (3, 1, 0), (3, 2, 0)]
    assert _pass(dsn, least=4)["ledger"] is None  # 3 rows behind: too few to be worth it
    assert _pass(dsn)["ledger"] == "sealed"  # the rows behind are in the partition in use
    insert_job(conn, priority=3)
    assert conn.execute(Q.job_claim_batch, CLAIM).fetchall()  # appended to the other
    assert _pass(dsn)["ledger"] == "truncated"
    # Lane 1's newest copied over; lane 3's newest was already there.
    assert _ledger(conn, 1, 3) == [(1, 3, 1), (3, 3, 1)]
    assert _pass(dsn)["ledger"] is None  # nothing behind a newest row: left alone
    job_id = insert_job(conn, priority=1)  # claims go on from the rows kept
    [job] = conn.execute(Q.job_claim_batch, CLAIM).fetchall()
    assert job[0] == job_id
    assert _ledger(conn, 1, 3) == [(1, 3, 1), (1, 4, 0), (3, 3, 1)]  # writers moved to 0


def test_a_held_horizon_does_not_keep_the_ledger_from_being_freed(dsn: str, conn: Conn) -> None:
    for _ in range(3):
        insert_job(conn)
        assert conn.execute(Q.job_claim_batch, CLAIM).fetchall()
    with psycopg.connect(dsn) as held:
        held.execute("SELECT pg_current_xact_id()")
        assert _pass(dsn)["ledger"] == "sealed"
        insert_job(conn)
        assert conn.execute(Q.job_claim_batch, CLAIM).fetchall()
        assert _pass(dsn)["ledger"] == "truncated"
        assert _ledger(conn, 2) == [(2, 4, 1)]


def test_a_rotation_waits_for_no_lock(dsn: str, conn: Conn) -> None:
    """A claim in progress holds the sealed partition: the pass leaves it for the next."""
    for _ in range(2):
        insert_job(conn)
        assert conn.execute(Q.job_claim_batch, CLAIM).fetchall()
    assert _pass(dsn)["ledger"] == "sealed"
    with psycopg.connect(dsn) as reading:
        reading.execute("SELECT * FROM awa_fast.claim_windows")  # its lock held until the end
        assert _pass(dsn)["ledger"] == "busy"
    assert _pass(dsn)["ledger"] == "truncated"


def test_standby_claims_are_kept_and_their_churn_truncated(dsn: str, conn: Conn) -> None:
    """A spent claim not yet collected and a waiting one both survive the rotation, with
    their ids; the collected one's dead versions go with the truncate."""
    conn.autocommit = True
    me = host(conn)
    offer(conn, me, "default")
    job_id = insert_job(conn)  # starts on the claim: a dead version
    offer(conn, me, "default")
    [(spent, *_), (waiting, *_)] = _claims(conn)
    _flushed(conn)
    assert _pass(dsn)["standby"] == "sealed"  # the dead version is in the partition in use
    assert _pass(dsn)["standby"] == "truncated"
    assert _claims(conn) == [(spent, "default", job_id, 1), (waiting, "default", None, 1)]
    conn.execute(Q.standby_forget, {"ids": [spent]})  # collected: a dead version in 1
    offer(conn, me, "other")  # written to the partition in use, 0
    _flushed(conn)
    assert _pass(dsn)["standby"] == "truncated"
    assert _claims(conn) == [(waiting, "default", None, 0), (waiting + 1, "other", None, 0)]
    stats = conn.execute(
        "SELECT relname, pg_stat_get_dead_tuples(relid) FROM pg_stat_user_tables"
        " WHERE relname LIKE 'standby_claims_%' ORDER BY 1"
    ).fetchall()
    assert stats == [("standby_claims_0", 0), ("standby_claims_1", 0)]
    # Claims go on from the rows kept: the waiting one takes the next job.
    second = insert_job(conn)
    assert second != job_id
    assert conn.execute(
        "SELECT job_id FROM awa_fast.standby_claims WHERE id = %s", (waiting,)
    ).fetchone() == (second,)


def _hot(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, state::text, run_lease, slot FROM awa_fast.jobs_hot ORDER BY id"
    ).fetchall()


def _hot_dead(conn: Conn) -> dict[str, int]:
    rows = conn.execute(
        "SELECT relname, pg_stat_get_dead_tuples(relid) FROM pg_stat_user_tables"
        " WHERE relname LIKE 'jobs_hot_%' ORDER BY 1"
    ).fetchall()
    return dict(rows)


def _run_through(conn: Conn, n: int) -> None:
    """Insert ``n`` jobs, claim and complete them: two dead versions each in jobs_hot."""
    for _ in range(n):
        insert_job(conn)
    claimed = conn.execute(Q.job_claim_batch, {**CLAIM, "limit": n}).fetchall()
    leases = {str(row[0]): row[1] for row in claimed}
    done = conn.execute(
        Q.job_complete_many, {"ids": [int(i) for i in leases], "leases": json.dumps(leases)}
    ).fetchall()
    assert len(done) == n


def test_jobs_hot_moves_its_live_jobs_and_truncates_the_rest(dsn: str, conn: Conn) -> None:
    """Waiting, running and finished jobs in the sealed partition: the live ones move with
    their leases, the finished one's dead versions go with the truncate, the counts hold,
    and claims and guarded completions go on against the moved rows."""
    conn.autocommit = True
    waiting = insert_job(conn)
    running = insert_job(conn)
    finished = insert_job(conn)
    claimed = conn.execute(Q.job_claim_batch, {**CLAIM, "limit": 2}).fetchall()
    assert [row[0] for row in claimed] == [waiting, running]
    leases = {str(finished): 1}
    conn.execute(Q.job_claim_batch, CLAIM)  # takes `finished`
    conn.execute(Q.job_complete_many, {"ids": [finished], "leases": json.dumps(leases)})
    conn.execute(  # `waiting` given back: available again, at lease 1
        Q.job_transition_many,
        {
            "ids": [waiting],
            "leases": json.dumps({str(waiting): 1}),
            "outcomes": json.dumps({waiting: {"state": "available", "dead": False, "delay": 0}}),
        },
    )
    _flushed(conn)
    assert _pass(dsn)["hot"] == "sealed"  # the dead versions are in the partition in use
    assert _pass(dsn)["hot"] == "truncated"
    assert _hot(conn) == [(waiting, "available", 1, 1), (running, "running", 1, 1)]
    assert _hot_dead(conn) == {"jobs_hot_0": 0, "jobs_hot_1": 0}
    assert_counts_exact(conn)
    # The running attempt's guarded completion finds its moved row; a stale lease does not.
    stale = conn.execute(
        Q.job_complete_many, {"ids": [running], "leases": json.dumps({str(running): 0})}
    ).fetchall()
    assert stale == []
    done = conn.execute(
        Q.job_complete_many, {"ids": [running], "leases": json.dumps({str(running): 1})}
    ).fetchall()
    assert len(done) == 1
    # The moved available job is claimed once more, from its new version.
    [again] = conn.execute(Q.job_claim_batch, CLAIM).fetchall()
    assert (again[0], again[1]) == (waiting, 2)
    assert conn.execute(Q.job_claim_batch, CLAIM).fetchall() == []
    assert_counts_exact(conn)


def test_a_held_horizon_leaves_jobs_hot_a_rotation_of_dead_versions(dsn: str, conn: Conn) -> None:
    """While a transaction holds the horizon, each round's dead versions are freed by the
    rotation after the next: what is left is one round's, however many rounds ran."""
    conn.autocommit = True
    per_round, rounds = 50, 8
    with psycopg.connect(dsn) as held:
        held.execute("SELECT pg_current_xact_id()")
        for _ in range(rounds):
            _run_through(conn, per_round)
            _flushed(conn)
            assert _pass(dsn)["hot"] in {"sealed", "truncated"}
        left = sum(_hot_dead(conn).values())
    assert left <= 2 * per_round < 2 * per_round * rounds
    assert _hot(conn) == []


def test_a_backlog_is_left_to_drain_before_its_partition_turns(dsn: str, conn: Conn) -> None:
    """A sealed partition that still holds more than 1,000 jobs is not moved: the pass
    seals the partition in use instead, and moves the rest once it has drained enough."""
    conn.autocommit = True
    conn.execute(
        "INSERT INTO awa_fast.jobs_hot (kind, queue) SELECT 'noop', 'backlog'"
        " FROM generate_series(1, 1100)"
    )
    _run_through(conn, 5)
    _flushed(conn)
    assert _pass(dsn)["hot"] == "sealed"
    _run_through(conn, 5)  # into partition 1
    _flushed(conn)
    assert _pass(dsn)["hot"] == "sealed"  # partition 0 holds the backlog: writers back to 0
    backlog = conn.execute(
        "SELECT count(*) FROM awa_fast.jobs_hot WHERE queue = 'backlog' AND slot = 0"
    ).fetchone()
    assert backlog == (1100,)
    conn.execute("DELETE FROM awa_fast.jobs_hot WHERE queue = 'backlog' AND id % 2 = 0")
    _flushed(conn)
    assert _pass(dsn)["hot"] == "truncated"  # partition 1, its 5 jobs done; writers to 1
    assert _pass(dsn)["hot"] == "truncated"  # partition 0, its 550 left moved to 1
    slots = conn.execute(
        "SELECT slot, count(*) FROM awa_fast.jobs_hot WHERE queue = 'backlog' GROUP BY 1"
    ).fetchall()
    assert slots == [(1, 550)]
    assert_counts_exact(conn)


def test_jobs_hot_truncates_a_partition_whose_statistics_count_jobs_it_no_longer_has(
    dsn: str, conn: Conn
) -> None:
    """A TRUNCATE zeroes a partition's counts; inserts another session reports after it are
    added to them for good. The rotation counts the sealed partition's live jobs itself
    (migration 0031): read from the statistics, 1,001 long gone kept it from truncating."""
    conn.autocommit = True
    [(in_use,)] = conn.execute("SELECT awa_fast.ring_slot('hot')").fetchall()
    partition = f"awa_fast.jobs_hot_{in_use}"
    with psycopg.connect(dsn, autocommit=True) as late:
        late.execute("SELECT pg_stat_force_next_flush()")
        late.execute("SELECT 1")  # reported now: the next report waits a second
        late.execute(
            "INSERT INTO awa_fast.jobs_hot (kind, queue, state)"
            " SELECT 'k', 'q', 'available' FROM generate_series(1, 1001)"
        )
        conn.execute(f"TRUNCATE {partition}")
        _flushed(conn)
        late.execute("SELECT pg_stat_force_next_flush()")  # its 1,001 inserts, reported late
    [(counted,)] = conn.execute(f"SELECT count(*) FROM {partition}").fetchall()
    assert counted == 0
    _run_through(conn, 3)  # dead versions to free, and nothing live
    _flushed(conn)
    assert _pass(dsn)["hot"] == "sealed"
    assert _pass(dsn)["hot"] == "truncated"
    assert _hot_dead(conn)[f"jobs_hot_{in_use}"] == 0
