"""What counting costs: ``queue_stats()`` over a long history, polling it during a drain,
and the counters' triggers on the drain itself.

1. **calls**: a fresh database gets ``--history`` finished jobs (one INSERT ... SELECT
   generate_series into jobs_done, through the counting triggers, spread over the last
   day and 8 queues) and 10,000 waiting ones; the leader's fold runs as it would, and
   ``--calls`` ``queue_stats()`` calls are timed from a client (median, p99).
2. **poll**: on that database, ``--jobs`` no-op jobs drained by the 2-worker pool, with and
   without a thread calling ``queue_stats()`` every 200 ms (on a connection of its own,
   as a client does), in pairs whose order alternates; the median of the pairs'
   throughput ratios, and the CPU the poller's thread and backend took, of one core.
3. **triggers**: the same drain on fresh databases, with the counting triggers enabled
   and disabled (``ALTER TABLE ... DISABLE TRIGGER``), in alternating pairs; the median
   throughput ratio, and the difference in the CPU a job took.

Each drain also reads, from /proc, the CPU of the pool's processes and of their Postgres
backends over the drain: on a shared machine, CPU time a job moves less than throughput
from one minute to the next. Linux only; the server must run on this machine.

    PYTHONPATH=. python benches/stats_cost.py URL [--history 10000000] [--calls 200]
        [--jobs 50000] [--pairs 5] [--parts calls,poll,triggers]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import dict_row

from awa_fast import admin
from awa_fast.bench.handlers import Noop
from awa_fast.bench.measure import fresh_database, insert_items, percentiles, wait_done
from awa_fast.bench.run import run_as_served
from awa_fast.client import AsyncClient
from awa_fast.client_sync import Client
from awa_fast.db.dsn import database_of
from awa_fast.worker import Job
from benches.cpu_split import Processes, backend_labels, split

QUEUES = 8
POLL_S = 0.2
POLLER = "awa-fast queue_stats poller"
JOB_TABLES = ("jobs_hot", "job_packs", "jobs_deferred", "jobs_done", "dlq")
FILL = """
INSERT INTO awa_fast.jobs_done (kind, queue, state, args, attempt, attempted_at, finalized_at)
SELECT 'bench', 'q' || (i %% {queues}),
       (CASE WHEN i %% 100 = 0 THEN 'failed' ELSE 'completed' END)::awa_fast.job_state,
       jsonb_build_object('n', i), 1,
       now() - (i %% 86400) * interval '1 second', now() - (i %% 86400) * interval '1 second'
FROM generate_series(1, %(n)s) AS i
"""
WAITING = """
INSERT INTO awa_fast.jobs_hot (kind, queue, priority, args)
SELECT 'bench', 'q' || (i % {queues}), 1 + i % 4, '{{}}' FROM generate_series(1, 10000) AS i
"""


def fold_all(url: str) -> None:
    """What the leader's passes do, here and now: seal and fold both partitions."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(2):
            row = conn.execute("SELECT nextval('awa_fast.count_slot')").fetchone()
            assert row is not None
            conn.execute(
                "SELECT awa_fast.count_fold(%s::smallint, interval '10 seconds')", (1 - row[0],)
            )


def fill(url: str, history: int) -> float:
    """Seconds to insert ``history`` finished jobs and the waiting ones, and vacuum."""
    began = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FILL.format(queues=QUEUES), {"n": history})
        conn.execute(WAITING.format(queues=QUEUES))
        conn.execute("VACUUM ANALYZE awa_fast.jobs_done, awa_fast.jobs_hot")
    fold_all(url)
    return time.perf_counter() - began


def time_calls(url: str, calls: int) -> dict[str, float]:
    """Milliseconds a ``queue_stats()`` call takes, as a client sees it."""
    took = []
    with Client(url) as client:
        client.queue_stats()  # the pool's connection, opened
        for _ in range(calls):
            began = time.perf_counter()
            client.queue_stats()
            took.append((time.perf_counter() - began) * 1000)
    return percentiles(took)


@dataclass
class Poller:
    """A thread calling ``queue_stats()`` every 200 ms on a connection of its own, as a
    client does, until stopped: its calls, and its thread's and backend's pids and CPU."""

    url: str
    calls: int = 0
    cpu_s: float = 0.0  # the thread's own
    backend: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        op = admin.queue_stats()
        began = time.thread_time()
        with psycopg.connect(self.url, autocommit=True, application_name=POLLER) as conn:
            cur = conn.cursor(row_factory=dict_row)
            self.backend = conn.info.backend_pid
            while not self.stop.wait(POLL_S):
                op.shape(cur.execute(op.sql, op.params).fetchall())
                self.calls += 1
        self.cpu_s = time.thread_time() - began


@dataclass
class Drained:
    rate: float  # jobs/s
    pool_us: float  # CPU us a job of the pool's processes and its backends
    poller_share: float  # of one core, the poller's thread and backend (0 without one)


async def drain(url: str, jobs: int, *, poll: bool) -> Drained:
    """The 2-worker pool drains ``jobs`` no-op jobs, timed from its start to the last
    commit, with the poller running or not; CPU read from /proc across the same span."""
    client = AsyncClient(url)

    @client.task(Noop)
    async def noop(job: Job[Noop]) -> None:
        return None

    await asyncio.to_thread(insert_items, url, [Noop(i) for i in range(jobs)])
    poller, processes = Poller(url), Processes()
    thread = threading.Thread(target=poller.run, name="queue_stats poller")
    try:
        runner = await client.start({"default": 1000}, processes=2)
        if poll:
            thread.start()
        before, began = processes.snapshot(), time.perf_counter()
        await wait_done(runner, jobs, timeout=600.0)
        took, after = time.perf_counter() - began, processes.snapshot()
        with psycopg.connect(url, autocommit=True) as conn:
            labels = backend_labels(conn, database_of(url))
        poller.stop.set()
        if poll:
            thread.join()
    finally:
        await client.close()
    parts = split(before, after, labels)
    poller_backend = parts.get(f"postgres: {POLLER}", 0.0)
    pool = sum(
        seconds
        for part, seconds in parts.items()
        if part in ("supervisor", "worker processes")
        or (part.startswith("postgres: awa-fast") and part != f"postgres: {POLLER}")
    )
    pool -= poller.cpu_s  # the poller's thread runs in this process
    return Drained(jobs / took, pool / jobs * 1e6, (poller.cpu_s + poller_backend) / took)


def set_triggers(url: str, *, on: bool) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in JOB_TABLES:
            for op in ("insert", "update", "delete", "truncate"):
                action = "ENABLE" if on else "DISABLE"
                conn.execute(f"ALTER TABLE awa_fast.{table} {action} TRIGGER {table}_count_{op}")


def pairs(pairs: int, first: str, second: str) -> Iterator[tuple[str, str]]:
    """``pairs`` pairs of the two variants, the order alternating."""
    for i in range(pairs):
        yield (first, second) if i % 2 == 0 else (second, first)


def report(name: str, runs: dict[str, list[Drained]], base: str, other: str) -> None:
    """Each variant's runs, and the pairs' ratios of throughput and of the pool's CPU."""
    for variant, drained in runs.items():
        print(f"  {variant}: " + ", ".join(f"{d.rate:,.0f}/s {d.pool_us:.1f}us" for d in drained))
    pairs = list(zip(runs[base], runs[other], strict=True))
    rates = [o.rate / b.rate for b, o in pairs]
    cpu = [o.pool_us - b.pool_us for b, o in pairs]
    median = statistics.median
    print(
        f"{name}: {other}/{base} jobs/s per pair {', '.join(f'{r:.3f}' for r in rates)},"
        f" median {median(rates):.3f}; the pool's CPU a job, {other} less {base}:"
        f" median {median(cpu):+.1f} us of {median(b.pool_us for b, _ in pairs):.1f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a Postgres server URL (fresh databases are made)")
    parser.add_argument("--history", type=int, default=10_000_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--parts", default="calls,poll,triggers")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if parts & {"calls", "poll"}:
        with fresh_database(args.url) as url:
            took = fill(url, args.history)
            print(f"filled {args.history:,} finished jobs in {took:.0f} s")
            if "calls" in parts:
                print(f"queue_stats() ms over {args.calls} calls: {time_calls(url, args.calls)}")
            if "poll" in parts:
                runs: dict[str, list[Drained]] = {"alone": [], "polled": []}
                for order in pairs(args.pairs, "alone", "polled"):
                    for variant in order:
                        drained = run_as_served(drain(url, args.jobs, poll=variant == "polled"))
                        runs[variant].append(drained)
                report("poll", runs, "alone", "polled")
                shares = [d.poller_share for d in runs["polled"]]
                print(f"  the poller's CPU, of one core: median {statistics.median(shares):.2%}")
    if "triggers" in parts:
        runs = {"counted": [], "uncounted": []}
        for order in pairs(args.pairs, "counted", "uncounted"):
            for variant in order:
                with fresh_database(args.url) as url:
                    set_triggers(url, on=variant == "counted")
                    runs[variant].append(run_as_served(drain(url, args.jobs, poll=False)))
        report("triggers", runs, "uncounted", "counted")


if __name__ == "__main__":
    main()
