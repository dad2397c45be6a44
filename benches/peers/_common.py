"""Helpers shared by the peer drivers.

This module runs inside each peer's own virtualenv (it is imported by the
``*_driver.py`` scripts, which put this directory on ``sys.path``), so it may use
the standard library only.

Driver protocol (see ``harness.py``):

* ``setup`` phase: install the peer's schema and pre-insert N jobs (none for
  ``latency`` and ``scheduled``), then print one JSON line ``{"event": "setup", ...}``
  and exit.
* ``produce`` phase (``latency``): insert N jobs one at a time, each in its own
  transaction, at ``--rate`` jobs/s with the peer's own single-job insert; print one
  JSON line ``{"event": "produce", "committed": [t0, t1, ...]}`` where ``t<seq>`` is
  ``time.time()`` right after that job's commit returned. It runs in its own process,
  while the workers (other processes) are already started and idle.
* ``schedule`` phase (``scheduled``): insert N jobs all due at ``--due`` (a Unix
  time), with the peer's bulk insert; print ``{"event": "schedule", "insert_s": ...}``.
* ``work`` phase: build the worker, print ``{"event": "ready"}``, block until the
  harness writes ``go`` on stdin, run the worker, and on ``stop`` (or stdin EOF,
  or SIGTERM) shut the worker down gracefully and print one JSON line
  ``{"event": "work", ...}`` with the process's peak RSS; for ``latency`` it also
  carries ``"stamps": [[seq, t], ...]``, ``time.time()`` taken first thing in the
  handler of job ``seq``. The stamps stay in memory until then, so reporting them
  adds no database work to the measured path.

``setup`` and ``work`` get ``--concurrency`` (the share of the queue's concurrency each
work process runs, 0 for the driver's own default) and ``--processes`` (how many work
processes share the queue); each driver maps them onto its peer's own limit, as its
docstring says, and ``setup`` reports that limit in its ``config``.

Scenarios (same handler body for every peer): ``drain`` no-op; ``cpu`` burns
``--cpu-iterations``; ``io`` awaits ``asyncio.sleep(IO_SLEEP_S)``; ``latency``
stamps its start time; ``retry`` fails the first attempt (each driver asks for the
smallest retry delay its peer allows) and is a no-op on the second; ``scheduled``
no-op.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

SCENARIOS = ("drain", "cpu", "io", "latency", "retry", "scheduled")
IO_SLEEP_S = 0.01


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["setup", "work", "produce", "schedule"])
    p.add_argument("--database-url", required=True)
    p.add_argument("--jobs", type=int, default=0)
    p.add_argument("--scenario", choices=SCENARIOS, default="drain")
    p.add_argument("--rate", type=float, default=50.0, help="produce: jobs/s")
    p.add_argument("--due", type=float, default=0.0, help="schedule: Unix time due")
    # Iterations of burn_iterations() that take ~1 ms on this machine; calibrated
    # once by the harness and passed to every driver so each peer's handlers do
    # exactly the same amount of CPU work per job.
    p.add_argument("--cpu-iterations", type=int, default=0)
    # This process's share of the queue's concurrency (0: the driver's own default), and
    # how many work processes share the queue, for a peer whose limit is fleet-wide.
    p.add_argument("--concurrency", type=int, default=0)
    p.add_argument("--processes", type=int, default=1)
    return p.parse_args(argv)


def run_phase(phases: dict[str, Callable[[argparse.Namespace], Awaitable[None]]]) -> None:
    """A driver's entry point: run the phase named on the command line."""
    args = parse_args()
    asyncio.run(phases[args.phase](args))


def burn_iterations(n: int) -> float:
    """Pure-Python CPU work: n iterations of a loop around time.perf_counter (the loop of
    awa_fast.bench.handlers._spin, written out here: drivers import the standard library
    only)."""
    pc = time.perf_counter
    acc = 0.0
    for _ in range(n):
        acc += pc()
    return acc


class Bench:
    """The scenario's handler body, shared by every driver (peer-specific parts, such as
    how a retry is asked for, stay in the driver)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.scenario = args.scenario
        self.iters = args.cpu_iterations if args.scenario == "cpu" else 0
        self.handled = 0
        self.burn_s = 0.0  # cpu: CPU seconds the burns took (the harness averages them)
        self.failed_first = 0  # retry: first attempts failed on purpose
        self.stamps: list[tuple[int, float]] = []

    def fail_first(self, first_attempt: bool) -> bool:
        """retry: whether this attempt must fail (the first one does)."""
        if self.scenario == "retry" and first_attempt:
            self.failed_first += 1
            return True
        return False

    async def run(self, seq: int | None) -> None:
        if self.scenario == "latency":
            self.stamps.append((-1 if seq is None else seq, time.time()))
        elif self.scenario == "io":
            await asyncio.sleep(IO_SLEEP_S)
        elif self.iters:
            started = time.thread_time()
            burn_iterations(self.iters)
            self.burn_s += time.thread_time() - started
        self.handled += 1

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"handled": self.handled}
        if self.scenario == "cpu":
            out["burn_s"] = self.burn_s
        if self.scenario == "retry":
            out["failed_first"] = self.failed_first
        if self.scenario == "latency":
            out["stamps"] = self.stamps
        return out


async def produce_one_by_one(insert_one, rate: float, count: int) -> None:
    """``await insert_one(seq)`` for seq 0..count-1, one per ``1/rate`` s (each insert
    commits on its own); emits the commit times. The same pacing as awa-fast's
    ``awa_fast.bench.produce_one_by_one``."""
    committed: list[float] = []
    start = time.perf_counter()
    for n in range(count):
        delay = start + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await insert_one(n)
        committed.append(time.time())
    emit({"event": "produce", "committed": committed})


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def vmhwm_kb() -> int:
    """Peak resident set size of this process (VmHWM), in kB."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


class Control:
    """Reads go/stop commands from the harness on stdin (in a thread)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.go = asyncio.Event()
        self.stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self._set_stop)
        threading.Thread(target=self._reader, daemon=True).start()

    def _set_stop(self) -> None:
        self.go.set()
        self.stop.set()

    def _reader(self) -> None:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "go":
                self.loop.call_soon_threadsafe(self.go.set)
            elif cmd == "stop":
                break
        # "stop" or EOF (harness gone): shut down.
        self.loop.call_soon_threadsafe(self._set_stop)


def version_of(dist: str) -> str:
    from importlib.metadata import version

    try:
        return version(dist)
    except Exception:
        return "unknown"


def pid_info() -> dict[str, Any]:
    return {"pid": os.getpid(), "vmhwm_kb": vmhwm_kb()}
