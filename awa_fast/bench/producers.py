"""Producers that insert from a process of their own (``python -m awa_fast.bench
PRODUCER URL NUMBER...``), apart from the pool they measure; the answer is JSON on
stdout.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg

from awa_fast.bench.handlers import Noop, Stamp
from awa_fast.producer_sync import insert, insert_many


async def in_producer(name: str, *args: float | str) -> Any:
    """Run producer ``name`` in a fresh interpreter (``python -m awa_fast.bench``): it must
    not share an event loop with the pool it measures, nor be forked from a process that
    has threads, nor depend on how the caller's main module is written (as ``spawn`` does).
    Its JSON answer comes back on stdout."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awa_fast.bench",
        name,
        *map(str, args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"producer {name} failed ({child.returncode}): {err.decode()[-2000:]}")
    return json.loads(out)


def produce_one_by_one(url: str, rate: float, count: float) -> list[float]:
    """Insert ``Stamp(0..count-1)`` one per ``1/rate`` s, each in its own transaction;
    returns ``time.time()`` taken right after each commit returned."""
    committed = []
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for n in range(int(count)):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            insert(conn, Stamp(n))
            committed.append(time.time())
    return committed


def produce_at_rate(url: str, rate: float, duration: float, tick: float) -> tuple[int, float]:
    """Offer ``rate`` jobs/s for ``duration`` s: every ``tick`` s, one ``insert_many`` of what
    fell due since the last one; returns (jobs inserted, seconds it took)."""
    inserted = 0
    with psycopg.connect(url, autocommit=True, application_name="awa-fast bench producer") as conn:
        start = time.perf_counter()
        for step in itertools.count(1):
            now = time.perf_counter() - start
            if now >= duration:
                break
            due = int(rate * now) - inserted
            if due > 0:
                insert_many(conn, [Noop(inserted + i) for i in range(due)])
                inserted += due
            time.sleep(max(0.0, start + step * tick - time.perf_counter()))
        return inserted, time.perf_counter() - start


PRODUCERS: dict[str, Callable[..., Any]] = {
    "produce_one_by_one": produce_one_by_one,
    "produce_at_rate": produce_at_rate,
}


def main(argv: list[str]) -> None:
    """``python -m awa_fast.bench PRODUCER URL NUMBER...``: run one producer, print JSON."""
    name, url, *numbers = argv
    print(json.dumps(PRODUCERS[name](url, *map(float, numbers))))
