"""What a one-job pickup waits on, outside the runner: a producer thread inserts a job every
20 ms; the main thread waits for its NOTIFY and claims it. Every other claim runs in an
open transaction, timed apart from its COMMIT (the WAL flush); the rest run as the runner
runs them, autocommit. With ``--wake``, instead: how long one process takes to wake
another through a socket, both on uvloop, one message every 20 ms. With ``--floor``: what
any round trip costs from idle, ``SELECT 1`` and a durable one-row UPDATE, each either at
the scenario's pace (one every 20 ms) or back to back. With ``--task-start``: from a
message's arrival (a protocol's ``data_received``, as a worker reads its jobs) to code
starting there by each way asyncio offers, taking turns message by message, at both paces.

Prints p50 and p90 in ms. Claims alternate between the named statements, one invocation
each, so run it twice or more to compare them.

    PYTHONPATH=. python benches/pickup_probe.py URL job_claim_rows job_claim_batch
    PYTHONPATH=. python benches/pickup_probe.py --wake
    PYTHONPATH=. python benches/pickup_probe.py URL --floor
    PYTHONPATH=. python benches/pickup_probe.py --task-start
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass

import psycopg
import uvloop

from awa_fast import producer_sync
from awa_fast.bench.measure import fresh_database
from awa_fast.db.queries import Q

GAP = 0.02  # seconds between jobs, as the latency scenario's 50 jobs/s


@dataclass
class Probe:
    n: int


def _ms(values: list[float]) -> str:
    ms = [v * 1e3 for v in values]
    return f"p50 {statistics.median(ms):.3f} p90 {statistics.quantiles(ms, n=10)[-1]:.3f}"


def probe_claims(url: str, statement: str, jobs: int) -> None:
    prod, listen, claim = (psycopg.connect(url, autocommit=True) for _ in range(3))
    listen.execute("LISTEN awa_fast_jobs")
    committed = [0.0] * jobs
    notified: list[float] = []
    executed: list[float] = []
    commits: list[float] = []
    autocommits: list[float] = []

    def produce() -> None:
        for n in range(jobs):
            time.sleep(GAP)  # the producer's pace, not a wait for anything
            producer_sync.insert(prod, Probe(n))
            committed[n] = time.perf_counter()

    thread = threading.Thread(target=produce)
    thread.start()
    cur = claim.cursor(binary=True)
    params = {"queue": "default", "limit": 1, "deadline_s": 60.0, "host_id": None}
    for n in range(jobs):
        in_transaction = n % 2 == 0
        if in_transaction:
            claim.autocommit = False
            claim.execute("SELECT 1")  # the BEGIN, sent before the job exists
        next(iter(listen.notifies(timeout=5.0, stop_after=1)))
        heard = time.perf_counter()
        cur.execute(getattr(Q, statement), params)
        assert len(cur.fetchall()) == 1
        done = time.perf_counter()
        if in_transaction:
            claim.commit()
            claim.autocommit = True
            executed.append(done - heard)
            commits.append(time.perf_counter() - done)
        else:
            autocommits.append(done - heard)
        if committed[n]:
            notified.append(heard - committed[n])
    thread.join()
    print(f"{statement}: NOTIFY after the insert's commit {_ms(notified)}")
    print(f"{statement}: claim statement {_ms(executed)}; its COMMIT {_ms(commits)}")
    print(f"{statement}: claim, autocommit {_ms(autocommits)}")


def probe_floor(url: str, trips: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE floor_probe (id int PRIMARY KEY, n int)")
        conn.execute("INSERT INTO floor_probe VALUES (1, 0)")
        for what, sql in (
            ("SELECT 1", "SELECT 1"),
            ("a one-row UPDATE, autocommit", "UPDATE floor_probe SET n = n + 1 WHERE id = 1"),
        ):
            for pace, gap in (("every 20 ms", GAP), ("back to back", 0.0)):
                took = []
                for _ in range(trips):
                    time.sleep(gap)  # the pace, not a wait for anything
                    start = time.perf_counter()
                    conn.execute(sql, prepare=True)
                    took.append(time.perf_counter() - start)
                print(f"{what}, {pace}: {_ms(took)}")


def probe_wake(messages: int) -> None:
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        parent.close()
        uvloop.run(_woken(child, messages))
        os._exit(0)
    child.close()
    uvloop.run(_waking(parent, messages))
    os.waitpid(pid, 0)


START_WAYS = ("loop.call_soon", "loop.create_task", "the coroutine run inline")


def probe_task_start(messages: int) -> None:
    for pace, gap in (("every 20 ms", GAP), ("every 0.5 ms", 0.0005)):
        parent, child = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            parent.close()
            for _ in range(messages * len(START_WAYS)):
                time.sleep(gap)  # the pace, not a wait for anything
                child.send(b"x")
            os._exit(0)
        child.close()
        took = uvloop.run(_started(parent))
        os.waitpid(pid, 0)
        for way, spans in zip(START_WAYS, took, strict=True):
            print(f"{way} after data_received, {pace}: {_ms(spans)}")


async def _started(sock: socket.socket) -> list[list[float]]:
    """Until the sender closes: messages that arrive together count once."""
    took: list[list[float]] = [[] for _ in START_WAYS]
    done = asyncio.Event()
    tasks = []

    def stamp(way: int, arrived: float) -> None:
        took[way].append(time.perf_counter() - arrived)

    async def stamp_in_coroutine(way: int, arrived: float) -> None:
        stamp(way, arrived)

    class Arrivals(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            arrived = time.perf_counter()
            way = sum(map(len, took)) % len(START_WAYS)
            if way == 0:
                loop.call_soon(stamp, way, arrived)
            elif way == 1:
                tasks.append(loop.create_task(stamp_in_coroutine(way, arrived)))
            else:
                with contextlib.suppress(StopIteration):
                    stamp_in_coroutine(way, arrived).send(None)

        def connection_lost(self, exc: Exception | None) -> None:
            done.set()

    loop = asyncio.get_running_loop()
    await loop.connect_accepted_socket(Arrivals, sock)
    await done.wait()
    return took


async def _woken(sock: socket.socket, messages: int) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    delays = []
    for _ in range(messages):
        (sent,) = struct.unpack("d", await reader.readexactly(8))
        delays.append(time.perf_counter() - sent)
    writer.write(_ms(delays).encode())
    await writer.drain()
    writer.close()


async def _waking(sock: socket.socket, messages: int) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    for _ in range(messages):
        await asyncio.sleep(GAP)  # the pace, not a wait for anything
        writer.write(struct.pack("d", time.perf_counter()))
    print(f"one process waking another: {(await reader.read()).decode()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", help="a Postgres server URL (a fresh database is made)")
    parser.add_argument("statements", nargs="*", default=["job_claim_rows", "job_claim_batch"])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--wake", action="store_true")
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--task-start", action="store_true")
    args = parser.parse_args()
    if args.wake:
        probe_wake(args.jobs)
        return
    if args.task_start:
        probe_task_start(args.jobs)
        return
    if not args.url:
        parser.error("a server URL is needed, unless --wake or --task-start")
    if args.floor:
        with fresh_database(args.url) as url:
            probe_floor(url, args.jobs)
        return
    for statement in args.statements:
        with fresh_database(args.url) as url:
            probe_claims(url, statement, args.jobs)


if __name__ == "__main__":
    main()
