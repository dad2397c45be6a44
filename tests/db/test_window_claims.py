"""Window claims (migration 0027) under races: every job made available is claimed once per
time it was made available, whatever commits late, rolls back, changes or is cancelled
meanwhile, and whatever holds the xmin horizon."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg

from awa_fast.db.connections import Database, connect_hot
from awa_fast.db.queries import Q
from tests.helpers import wait_until

QUEUE = "w"
INSERT = (
    "INSERT INTO awa_fast.jobs_hot (kind, queue, priority)"
    " SELECT 'k', %(queue)s, p FROM unnest(%(priorities)s::smallint[]) AS p RETURNING id"
)


@dataclass
class Tally:
    """What the parties did, each list appended to by one party's thread."""

    committed: list[int] = field(default_factory=list)
    rolled_back: list[int] = field(default_factory=list)
    claims: list[tuple[int, int]] = field(default_factory=list)  # (id, lease)
    released: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)  # while available
    reprioritized: list[int] = field(default_factory=list)


def _produce(dsn: str, tally: Tally, *, seed: int, transactions: int) -> None:
    """Transactions of 1-5 jobs of mixed priorities, one in ten rolled back."""
    rnd = random.Random(seed)
    with psycopg.connect(dsn) as conn:
        for _ in range(transactions):
            priorities = [rnd.randint(1, 4) for _ in range(rnd.randint(1, 5))]
            rows = conn.execute(INSERT, {"queue": QUEUE, "priorities": priorities}).fetchall()
            undone = rnd.random() < 0.1
            (conn.rollback if undone else conn.commit)()
            (tally.rolled_back if undone else tally.committed).extend(row[0] for row in rows)


def _meddle(dsn: str, tally: Tally, *, seed: int, stop: threading.Event) -> None:
    """Change the priority of an available job, or cancel one, until ``stop``."""
    rnd = random.Random(seed)
    with psycopg.connect(dsn) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT id FROM awa_fast.jobs_hot WHERE queue = %s AND state = 'available'"
                " ORDER BY random() LIMIT 1 FOR UPDATE",
                (QUEUE,),
            ).fetchone()
            if row is None:
                conn.rollback()
                continue
            if rnd.random() < 0.5:
                params = {"ids": [row[0]], "priority": rnd.randint(1, 4), "queue": None}
                if conn.execute(Q.job_batch_apply_hot, params).fetchall():
                    tally.reprioritized.append(row[0])
            else:
                conn.execute(Q.job_cancel, {"id": row[0], "reason": "test"})
                tally.cancelled.append(row[0])
            conn.commit()


def _claim(dsn: str, tally: Tally, *, seed: int, done: threading.Event) -> None:
    """Claim 1-8 jobs at a time and complete them, or give one in ten back (at most twice
    a job), until a claim that began after ``done`` finds nothing."""
    rnd = random.Random(seed)
    releases: Counter[int] = Counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            finishing = done.is_set()
            params = {
                "queue": QUEUE,
                "limit": rnd.randint(1, 8),
                "deadline_s": 60.0,
                "host_id": None,
            }
            rows = conn.execute(Q.job_claim_batch, params).fetchall()
            if not rows and finishing:
                return
            for id_, lease, *_ in rows:
                tally.claims.append((id_, lease))
                ids, leases = [id_], json.dumps({str(id_): lease})
                if releases[id_] < 2 and rnd.random() < 0.1:
                    outcome = {"state": "available", "dead": False, "delay": 0}
                    given = conn.execute(
                        Q.job_transition_many,
                        {"ids": ids, "leases": leases, "outcomes": json.dumps({id_: outcome})},
                    ).fetchall()
                    assert len(given) == 1
                    releases[id_] += 1
                    tally.released.append(id_)
                else:
                    completed = conn.execute(
                        Q.job_complete_many, {"ids": ids, "leases": leases}
                    ).fetchall()
                    assert len(completed) == 1


def test_each_availability_is_claimed_once_under_races(dsn: str) -> None:
    tally = Tally()
    stop, done = threading.Event(), threading.Event()
    with (
        psycopg.connect(dsn) as horizon,
        psycopg.connect(dsn) as late,
        ThreadPoolExecutor(6) as pool,
    ):
        horizon.execute("SELECT pg_current_xact_id()")  # held until the end
        late_ids = [
            row[0] for row in late.execute(INSERT, {"queue": QUEUE, "priorities": [1, 2, 3, 4] * 5})
        ]
        claimers = [pool.submit(_claim, dsn, tally, seed=s, done=done) for s in (1, 2)]
        meddler = pool.submit(_meddle, dsn, tally, seed=3, stop=stop)
        producers = [pool.submit(_produce, dsn, tally, seed=s, transactions=150) for s in (4, 5, 6)]
        # the late transaction commits once claims have moved well past its start
        wait_until(lambda: len(tally.claims) >= 200, what="claims before the late commit")
        late.commit()
        tally.committed += late_ids
        for future in producers:
            future.result()
        stop.set()
        meddler.result()
        done.set()
        for future in claimers:
            future.result()
        left = horizon.execute(
            "SELECT count(*) FROM awa_fast.jobs_hot WHERE state = 'available'"
        ).fetchone()
        horizon.commit()
    assert left == (0,)
    assert len(tally.claims) == len(set(tally.claims))  # no attempt claimed twice
    claimed = Counter(id_ for id_, _ in tally.claims)
    expected = Counter(tally.committed) + Counter(tally.released)
    expected.subtract(Counter(tally.cancelled))
    assert claimed == +expected
    assert not set(claimed) & set(tally.rolled_back)
    assert tally.released and tally.cancelled and tally.reprioritized  # each race was run


def test_a_held_horizon_changes_nothing_claimed(dsn: str) -> None:
    """Claims in turn with a transaction holding the horizon throughout take each job once,
    in claim order within each claim, and leave none."""
    with (
        psycopg.connect(dsn) as horizon,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        horizon.execute("SELECT pg_current_xact_id()")
        params: dict[str, Any] = {"queue": QUEUE, "deadline_s": 60.0, "host_id": None}
        claimed: list[int] = []
        inserted: list[int] = []
        for round_ in range(30):
            priorities = [(round_ + n) % 4 + 1 for n in range(7)]
            inserted += [r[0] for r in conn.execute(INSERT, {**params, "priorities": priorities})]
            rows = conn.execute(Q.job_claim_batch, {**params, "limit": 5}).fetchall()
            order = [(row[7], row[12], row[0]) for row in rows]  # priority, run_at, id
            assert order == sorted(order)
            claimed += [row[0] for row in rows]
        while rows := conn.execute(Q.job_claim_batch, {**params, "limit": 5}).fetchall():
            claimed += [row[0] for row in rows]
        horizon.commit()
    assert sorted(claimed) == sorted(inserted)


def test_a_job_another_transaction_holds_is_passed_over_then_claimed(dsn: str) -> None:
    """A claim does not wait for a job another transaction holds locked: it takes the jobs
    after it, and the held one is claimed once its holder lets go of it unchanged."""
    params: dict[str, Any] = {"queue": QUEUE, "deadline_s": 60.0, "host_id": None}
    with (
        psycopg.connect(dsn) as holder,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        first, *rest = [r[0] for r in conn.execute(INSERT, {**params, "priorities": [2] * 4})]
        holder.execute("SELECT 1 FROM awa_fast.jobs_hot WHERE id = %s FOR UPDATE", (first,))
        rows = conn.execute(Q.job_claim_batch, {**params, "limit": 10}).fetchall()
        assert sorted(row[0] for row in rows) == rest
        later = [r[0] for r in conn.execute(INSERT, {**params, "priorities": [2] * 2})]
        rows = conn.execute(Q.job_claim_batch, {**params, "limit": 10}).fetchall()
        assert sorted(row[0] for row in rows) == later
        holder.rollback()
        rows = conn.execute(Q.job_claim_batch, {**params, "limit": 10}).fetchall()
        assert [row[0] for row in rows] == [first]
        assert conn.execute(Q.job_claim_batch, {**params, "limit": 10}).fetchall() == []


def test_a_claim_reads_from_its_lanes_position_not_its_history(dsn: str) -> None:
    """Under a held horizon the entries of claimed jobs stay in the index: a pick from the
    front of the queue, as claims were, reads more of them the more jobs were claimed,
    while a claim, which starts at its lane's position, reads as much after 20,000 claimed
    jobs as after 2,000 (24 blocks each when written; a pick 74, then 704). Counted in
    blocks, not timed."""
    with (
        psycopg.connect(dsn) as horizon,
        connect_hot(Database(dsn)) as conn,  # with the claimer's planner settings
    ):
        horizon.execute("SELECT pg_current_xact_id()")
        claims, picks = [], []
        for rounds in (20, 180):
            for _ in range(rounds):
                _insert_and_claim(conn, 100)
            conn.execute(INSERT, {"queue": QUEUE, "priorities": [2]})
            claims.append(_blocks_read(conn, Q.job_claim_batch, {**CLAIM, "limit": 1}))
            picks.append(_blocks_read(conn, PICK, CLAIM))
        horizon.commit()
    assert picks[1] - picks[0] > 400, picks  # the history shows in a pick from the front
    assert claims[1] - claims[0] < 10, claims


CLAIM: dict[str, Any] = {"queue": QUEUE, "deadline_s": 60.0, "host_id": None}
PICK = (
    "SELECT id FROM awa_fast.jobs_hot WHERE state = 'available' AND queue = %(queue)s"
    " ORDER BY priority, run_at, id LIMIT 1"
)


def _insert_and_claim(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute(INSERT, {"queue": QUEUE, "priorities": [2] * n})
    assert len(conn.execute(Q.job_claim_batch, {**CLAIM, "limit": n}).fetchall()) == n


def _blocks_read(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> int:
    """Blocks of jobs_hot and its indexes that ``query`` reads, in a transaction of its own
    that is rolled back after (so that the claimed job stays for the pick)."""
    counted = (  # its partitions and theirs (migration 0029)
        "WITH parts AS (SELECT relid FROM pg_partition_tree('awa_fast.jobs_hot') WHERE isleaf)"
        " SELECT sum(pg_stat_get_xact_blocks_fetched(c.oid))::bigint FROM pg_class c"
        " WHERE c.oid IN (SELECT relid FROM parts)"
        "    OR c.oid IN (SELECT indexrelid FROM pg_index"
        "                 WHERE indrelid IN (SELECT relid FROM parts))"
    )
    with conn.transaction(force_rollback=True):
        before = conn.execute(counted).fetchone()
        assert conn.execute(query, params).fetchall()
        after = conn.execute(counted).fetchone()
    assert before is not None and after is not None
    return int(after[0]) - int(before[0])


def _burn_xids(conn: psycopg.Connection[Any], n: int) -> None:
    """Let ``n`` transactions take an id, as a busy cluster's other work does."""
    for _ in range(n):
        conn.execute("SELECT pg_current_xact_id()")
        conn.commit()


def test_a_lane_whose_jobs_left_it_otherwise_moves_past_them(dsn: str) -> None:
    """Jobs started without a claim (on standby claims, as most are at low rates) leave
    entries behind the lane's position that a held horizon keeps; a claim that finds the
    lane empty moves it to its own snapshot once the lane lags by 1,000 transactions, so
    the claims after it read as much after 20,000 such jobs as after 2,000. Counted in
    blocks, not timed: 28 blocks each time (94, then 723, without the move)."""
    start_all = (
        "UPDATE awa_fast.jobs_hot SET state = 'running', run_lease = run_lease + 1"
        " WHERE queue = %(queue)s AND state = 'available'"
    )
    with (
        psycopg.connect(dsn) as horizon,
        connect_hot(Database(dsn)) as conn,
        psycopg.connect(dsn) as burner,
    ):
        horizon.execute("SELECT pg_current_xact_id()")
        claims = []
        for rounds in (20, 180):
            for _ in range(rounds):
                conn.execute(INSERT, {"queue": QUEUE, "priorities": [2] * 100})
                conn.execute(start_all, CLAIM)
            _burn_xids(burner, 1000)
            assert conn.execute(Q.job_claim_batch, {**CLAIM, "limit": 10}).fetchall() == []
            conn.execute(INSERT, {"queue": QUEUE, "priorities": [2]})
            claims.append(_blocks_read(conn, Q.job_claim_batch, {**CLAIM, "limit": 1}))
        horizon.commit()
    assert claims[1] - claims[0] < 10, claims


def test_a_lane_moved_past_its_end_still_claims_what_commits_late(dsn: str) -> None:
    """A job inserted by a transaction still in progress when a claim moves its lane to
    the claim's snapshot is claimed once that transaction commits."""
    params: dict[str, Any] = {"queue": QUEUE, "deadline_s": 60.0, "host_id": None, "limit": 10}
    with (
        psycopg.connect(dsn) as late,
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn) as burner,
    ):
        [(job,)] = late.execute(INSERT, {"queue": QUEUE, "priorities": [2]}).fetchall()
        _burn_xids(burner, 1000)
        assert conn.execute(Q.job_claim_batch, params).fetchall() == []
        moved = conn.execute(
            "SELECT lo::text = hi::text AND pos_id = 0 FROM awa_fast.claim_windows"
            " WHERE queue = %(queue)s AND priority = 2 ORDER BY n DESC LIMIT 1",
            params,
        ).fetchone()
        assert moved == (True,)
        late.commit()
        assert [row[0] for row in conn.execute(Q.job_claim_batch, params)] == [job]
        assert conn.execute(Q.job_claim_batch, params).fetchall() == []


def test_only_a_claim_that_took_nothing_commits_without_waiting_for_its_flush(dsn: str) -> None:
    """An empty claim's ledger rows may be lost in a crash; a claim that took a job is
    durable, as every claim was."""
    params: dict[str, Any] = {"queue": QUEUE, "deadline_s": 60.0, "host_id": None, "limit": 10}
    with psycopg.connect(dsn) as conn:
        conn.execute(INSERT, {"queue": QUEUE, "priorities": [2]})
        conn.commit()
        assert len(conn.execute(Q.job_claim_batch, params).fetchall()) == 1
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        conn.commit()
        assert conn.execute(Q.job_claim_batch, params).fetchall() == []
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
        conn.commit()
