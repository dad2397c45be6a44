"""The scenarios' job args and handlers, and the shared board handlers in forked workers
write one number per job into (the ``latency`` handler its start time, the ``cpu`` handler
the CPU time its burn took).
"""

from __future__ import annotations

import asyncio
import functools
import math
import mmap
import os
import struct
import time
from dataclasses import dataclass

from awa_fast.worker import Job


@dataclass
class Noop:
    n: int


@dataclass
class Burn:
    n: int
    loops: int


@dataclass
class Sleep:
    ms: float


@dataclass
class FailOnce:
    n: int


@dataclass
class Stamp:
    n: int


def _spin(loops: int) -> float:
    """The CPU work of the ``cpu`` scenario; the same loop as the peers' drivers
    (benches/peers/_common.py), so every system does identical work per job."""
    clock = time.perf_counter
    total = 0.0
    for _ in range(loops):
        total += clock()
    return total


@functools.cache
def burn_loops(ms: float = 1.0) -> int:
    """How many ``_spin`` iterations take ``ms`` of CPU on an idle core here: a fixed amount
    of work per job (a wall-clock busy loop would count time spent descheduled as work).
    ``AWA_FAST_BENCH_CPU_ITERATIONS`` fixes the count, as the peer harness honours too."""
    fixed = os.environ.get("AWA_FAST_BENCH_CPU_ITERATIONS")
    if fixed:
        return int(fixed)
    loops = 20_000
    best = math.inf
    for _ in range(5):
        started = time.process_time()
        _spin(loops)
        best = min(best, time.process_time() - started)
    return max(1, round(loops * (ms / 1000) / max(best, 1e-9)))


def burn_cpu(loops: int) -> float:
    """Pure-Python CPU for ``loops`` iterations; returns the CPU seconds it took: what a job
    cost here and now, since the same loop's cost drifts on a shared VM."""
    started = time.thread_time()
    _spin(loops)
    return time.thread_time() - started


async def nap(job: Job[Sleep]) -> None:
    await asyncio.sleep(job.args.ms / 1000)


def fail_once(job: Job[FailOnce]) -> None:
    if job.attempt == 1:
        raise RuntimeError("the first attempt fails by design")


class Board:
    """One float per job number in an anonymous shared mapping: created before the pool
    forks, so every worker writes where the benchmark process reads."""

    _slot = struct.Struct("d")

    def __init__(self, size: int) -> None:
        self.size = size
        self.map = mmap.mmap(-1, self._slot.size * max(size, 1))

    def put(self, n: int, value: float) -> None:
        self._slot.pack_into(self.map, n * self._slot.size, value)

    def stamp(self, n: int) -> None:
        self.put(n, time.time())

    def read(self) -> list[float]:
        return [t for (t,) in self._slot.iter_unpack(self.map[: self.size * self._slot.size])]

    def close(self) -> None:
        self.map.close()
