"""Two ways to claim from a Postgres queue, side by side under a held xmin horizon: the row
store awa-fast claims from today, and append-only ready entries claimed by snapshot windows.

**Rows** (``wc_rows``): a job is a row that a claim UPDATEs to running (``FOR UPDATE SKIP
LOCKED`` on a partial index of available rows, in claim order) and a completion DELETEs. Each
job leaves two dead tuples, and each claimed job's index entry stays in the claim index until
a vacuum can remove it: while any session pins the xmin horizon, none can, so every claim
walks every job claimed since the pin.

**Windows** (``wc_windows``): a job is an immutable ready entry stamped with its inserting
transaction's id. Claims of a lane are serialized by a transaction-scoped advisory lock and
consume the lane in *windows*, as PgQ's batches do: a window holds the entries whose
transactions committed between two snapshots, ``lo`` and ``hi``. Entries of a transaction
that was in progress at ``lo`` are found by their id, one index probe per transaction of
``lo``'s in-progress list; the rest lie in the id range ``[xmax(lo), xmax(hi))``. So a window
is exact whatever commits late or rolls back, and a claim reads only its window, never the
entries claimed before it. A claim appends a ledger row (the window and the position reached
in it) and one lease per job; a completion appends a done entry. Nothing is updated or
deleted, so nothing is left for vacuum; the tables would rotate and be truncated, which no
horizon holds up.

Both run at once on one database, each with its own producer at ``--rate`` jobs/s (single
inserts, some in transactions that roll back or wait before committing) and one claimer
that claims up to ``--batch`` jobs and completes them. One extra session holds an xid from
the end of ``--clean`` seconds for ``--hold`` seconds. Printed per 10 s window and per
design: claims' p50, pickup p50/p99 (claim time minus the entry's insert time, both by the
database's clock), then each design's dead tuples per job, and an exactness check: every
committed job claimed exactly once, none of a rolled-back transaction.

    PYTHONPATH=. python benches/window_claim.py URL [--rate 3000] [--clean 30] [--hold 60]
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psycopg

from awa_fast.bench.measure import fresh_database

ROWS_SCHEMA = """
CREATE SCHEMA wc_rows;
CREATE TABLE wc_rows.jobs (
    id bigserial PRIMARY KEY,
    priority smallint NOT NULL DEFAULT 2,
    run_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    state text NOT NULL DEFAULT 'available'
);
CREATE INDEX jobs_claim ON wc_rows.jobs (priority, run_at, id) WHERE state = 'available';
"""

ROWS_CLAIM = """
UPDATE wc_rows.jobs SET state = 'running'
WHERE id = ANY (ARRAY(
    SELECT id FROM wc_rows.jobs WHERE state = 'available'
    ORDER BY priority, run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED))
RETURNING id, extract(epoch FROM clock_timestamp() - run_at) * 1000
"""

ROWS_COMPLETE = "DELETE FROM wc_rows.jobs WHERE id = ANY(%(ids)s)"

WINDOWS_SCHEMA = """
CREATE SCHEMA wc_windows;
CREATE TABLE wc_windows.ready (
    lane integer NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    id bigint NOT NULL,
    ready_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ready_window ON wc_windows.ready (lane, xid, id);
CREATE SEQUENCE wc_windows.ids;
-- One row per claim: the window it read (entries committed after lo and by hi) and the
-- last entry it took there. The lane's state is its newest row: a backward index read.
CREATE TABLE wc_windows.ledger (
    lane integer NOT NULL,
    n bigint NOT NULL,
    lo pg_snapshot NOT NULL,
    hi pg_snapshot NOT NULL,
    pos_xid xid8 NOT NULL,
    pos_id bigint NOT NULL,
    PRIMARY KEY (lane, n)
);
INSERT INTO wc_windows.ledger VALUES (1, 0, '1:1:', '1:1:', '0', 0);
CREATE TABLE wc_windows.leases (
    id bigint NOT NULL, claimed_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE wc_windows.done (
    id bigint NOT NULL, done_at timestamptz NOT NULL DEFAULT clock_timestamp());

-- The lane's entries in the window (lo, hi] after (pos_xid, pos_id), in window order:
-- those of transactions in progress at lo, found by xid, then those of the xid range
-- [xmax(lo), xmax(hi)). STABLE, so it reads in its caller's snapshot, which is hi.
CREATE FUNCTION wc_windows.window_rows(
    p_lane integer, lo pg_snapshot, hi pg_snapshot, pos_xid xid8, pos_id bigint, k bigint)
RETURNS TABLE (xid xid8, id bigint, ready_at timestamptz) LANGUAGE sql STABLE AS $$
    (SELECT r.xid, r.id, r.ready_at
     FROM pg_snapshot_xip(lo) AS x(xid)
     CROSS JOIN LATERAL (
         SELECT * FROM wc_windows.ready r
         WHERE r.lane = p_lane AND r.xid = x.xid AND (x.xid > pos_xid OR r.id > pos_id)
         ORDER BY r.id LIMIT k) r
     WHERE x.xid >= pos_xid AND pg_visible_in_snapshot(x.xid, hi)
     ORDER BY r.xid, r.id LIMIT k)
    UNION ALL
    (SELECT r.xid, r.id, r.ready_at FROM wc_windows.ready r
     WHERE r.lane = p_lane AND r.xid < pg_snapshot_xmax(hi)
       AND (r.xid, r.id) > (greatest(pos_xid, pg_snapshot_xmax(lo)),
                            CASE WHEN pos_xid >= pg_snapshot_xmax(lo) THEN pos_id ELSE -1 END)
       AND pg_visible_in_snapshot(r.xid, hi)
     ORDER BY r.xid, r.id LIMIT k)
    ORDER BY 1, 2 LIMIT k
$$;

-- Claim up to k entries of a lane: the rest of the current window, then a new one from its
-- hi to now. The lock comes first, in a statement of its own, so that the claim's snapshot
-- (a new one per statement in a VOLATILE function) sees the last holder's ledger row.
CREATE FUNCTION wc_windows.claim(p_lane integer, k integer)
RETURNS TABLE (id bigint, pickup_ms float8) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_lane);
    RETURN QUERY
    WITH last AS (
        SELECT * FROM wc_windows.ledger WHERE lane = p_lane ORDER BY n DESC LIMIT 1
    ),
    now_snap AS (SELECT pg_current_snapshot() AS hi),
    rest AS (
        SELECT r.*, 0 AS w FROM last,
            wc_windows.window_rows(p_lane, last.lo, last.hi, last.pos_xid, last.pos_id, k) r
    ),
    fresh AS (
        SELECT r.*, 1 AS w FROM last, now_snap,
            wc_windows.window_rows(p_lane, last.hi, now_snap.hi, '0', 0,
                                   k - (SELECT count(*) FROM rest)) r
    ),
    taken AS (SELECT * FROM rest UNION ALL SELECT * FROM fresh),
    tail AS (SELECT * FROM taken ORDER BY w DESC, xid DESC, id DESC LIMIT 1),
    advanced AS (
        INSERT INTO wc_windows.ledger
        SELECT p_lane, last.n + 1,
               CASE WHEN tail.w = 1 THEN last.hi ELSE last.lo END,
               CASE WHEN tail.w = 1 THEN now_snap.hi ELSE last.hi END,
               tail.xid, tail.id
        FROM last, tail, now_snap
    ),
    leased AS (INSERT INTO wc_windows.leases (id) SELECT t.id FROM taken t)
    SELECT t.id, extract(epoch FROM clock_timestamp() - t.ready_at)::float8 * 1000
    FROM taken t;
END
$$;
"""

WINDOWS_INSERT = """
INSERT INTO wc_windows.ready (lane, id)
SELECT 1, nextval('wc_windows.ids') FROM generate_series(1, %(n)s) RETURNING id
"""
ROWS_INSERT = """
INSERT INTO wc_rows.jobs (priority) SELECT 2 FROM generate_series(1, %(n)s) RETURNING id
"""
PRODUCERS = 4  # connections inserting into each design at once
WINDOWS_CLAIM = "SELECT id, pickup_ms FROM wc_windows.claim(1, %(limit)s)"
WINDOWS_COMPLETE = "INSERT INTO wc_windows.done (id) SELECT unnest(%(ids)s::bigint[])"


@dataclass(frozen=True, slots=True)
class Design:
    name: str
    schema: str
    ddl: str
    insert: str
    claim: str
    complete: str


DESIGNS = (
    Design("rows", "wc_rows", ROWS_SCHEMA, ROWS_INSERT, ROWS_CLAIM, ROWS_COMPLETE),
    Design(
        "windows", "wc_windows", WINDOWS_SCHEMA, WINDOWS_INSERT, WINDOWS_CLAIM, WINDOWS_COMPLETE
    ),
)


@dataclass
class Tally:
    """What one design's producer committed and its claimer took, with timings."""

    committed: list[int] = field(default_factory=list)
    rolled_back: list[int] = field(default_factory=list)
    claimed: list[int] = field(default_factory=list)
    pickups: list[tuple[float, float]] = field(default_factory=list)  # (at, ms)
    claims: list[tuple[float, float]] = field(default_factory=list)  # (at, ms)

    def exactly_once(self) -> bool:
        """Every committed job claimed once, and nothing else claimed."""
        return len(self.claimed) == len(set(self.claimed)) and set(self.claimed) == set(
            self.committed
        )


def produce(
    url: str, design: Design, tally: Tally, *, rate: float, seed: int, stop: threading.Event
) -> None:
    """Insert at ``rate`` jobs/s, one transaction a job, or the jobs due at once when this
    connection fell behind. One in twenty transactions waits a few ms before its commit and
    one in ten rolls back, so windows see late commits and gaps."""
    rnd = random.Random(seed)
    with psycopg.connect(url) as conn:
        start, n = time.monotonic(), 0
        while not stop.is_set():
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            due = max(1, int((time.monotonic() - start) * rate) - n)
            n += due
            ids = [row[0] for row in conn.execute(design.insert, {"n": due}).fetchall()]
            if rnd.random() < 0.05:
                time.sleep(rnd.random() * 0.005)
            if rnd.random() < 0.1:
                conn.rollback()
                tally.rolled_back += ids
            else:
                conn.commit()
                tally.committed += ids


def consume(
    url: str, design: Design, tally: Tally, *, batch: int, t0: float, done: Callable[[], bool]
) -> None:
    """Claim and complete until a claim that began after ``done()`` comes back empty: one
    that began before could miss the producers' last commits."""
    with psycopg.connect(url) as conn:
        while True:
            finished = done()
            began = time.monotonic()
            rows = conn.execute(design.claim, {"limit": batch}).fetchall()
            conn.commit()
            ended = time.monotonic()
            if rows:
                ids = [row[0] for row in rows]
                conn.execute(design.complete, {"ids": ids})
                conn.commit()
                tally.claimed += ids
                tally.pickups += [(ended - t0, float(row[1])) for row in rows]
                tally.claims.append((ended - t0, (ended - began) * 1000))
            elif finished:
                return
            else:
                time.sleep(0.001)


def dead_tuples(url: str, schema: str) -> int:
    """The schema's dead tuples once the statistics settle: backends report them at most
    once a second, so read until two reads a second apart agree."""
    query = "SELECT COALESCE(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = %s"
    last = -1
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(query, (schema,)).fetchone()
            dead = int(row[0]) if row else 0
            if dead == last:
                return dead
            last = dead
            time.sleep(1.0)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def report(tallies: dict[str, Tally], *, seconds: float, hold_from: float, url: str) -> None:
    print(f"hold from {hold_from:.0f} s; per 10 s: claim p50 ms, pickup p50 / p99 ms")
    print("   s  " + "  ".join(f"{name:>26}" for name in tallies))
    for start in range(0, int(seconds), 10):
        cells = []
        for tally in tallies.values():
            picks = [ms for at, ms in tally.pickups if start <= at < start + 10]
            claims = [ms for at, ms in tally.claims if start <= at < start + 10]
            cells.append(
                f"{quantile(claims, 0.5):7.2f} {quantile(picks, 0.5):8.2f} / "
                f"{quantile(picks, 0.99):7.2f}"
            )
        print(f"{start:4d}  " + "  ".join(f"{cell:>26}" for cell in cells))
    for design in DESIGNS:
        tally = tallies[design.name]
        committed = len(tally.committed)
        dead = dead_tuples(url, design.schema)
        print(
            f"{design.name}: {committed} committed, {len(tally.rolled_back)} rolled back,"
            f" {len(tally.claimed)} claimed, exactly once: {tally.exactly_once()};"
            f" dead tuples {dead} ({dead / max(1, committed):.2f} a committed job)"
        )


def run(url: str, *, rate: float, batch: int, clean: float, hold: float) -> dict[str, Tally]:
    """Both designs at once: producers and a claimer each, the hold from ``clean`` s on for
    ``hold`` s, then a drain and the report (read while the horizon is still held)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for design in DESIGNS:
            conn.execute(design.ddl)
    tallies = {design.name: Tally() for design in DESIGNS}
    stop, produced = threading.Event(), threading.Event()
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(DESIGNS) * (PRODUCERS + 1)) as pool:
        producers = [
            pool.submit(
                produce, url, d, tallies[d.name], rate=rate / PRODUCERS, seed=seed, stop=stop
            )
            for d in DESIGNS
            for seed in range(PRODUCERS)
        ]
        consumers = [
            pool.submit(consume, url, d, tallies[d.name], batch=batch, t0=t0, done=produced.is_set)
            for d in DESIGNS
        ]
        time.sleep(clean)
        with psycopg.connect(url) as held:
            held.execute("SELECT pg_current_xact_id()")
            time.sleep(hold)
            stop.set()
            for future in producers:
                future.result()
            produced.set()
            for future in consumers:
                future.result()
            report(tallies, seconds=clean + hold, hold_from=clean, url=url)
    return tallies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a server to make a scratch database on")
    parser.add_argument("--rate", type=float, default=3000.0, help="jobs/s per design")
    parser.add_argument("--batch", type=int, default=200, help="most jobs a claim takes")
    parser.add_argument("--clean", type=float, default=30.0, help="seconds before the hold")
    parser.add_argument("--hold", type=float, default=60.0, help="seconds of the hold")
    args = parser.parse_args()
    with fresh_database(args.url) as url:
        run(url, rate=args.rate, batch=args.batch, clean=args.clean, hold=args.hold)


if __name__ == "__main__":
    main()
