"""Helpers shared by the peer drivers.

This module runs inside each peer's own virtualenv (it is imported by the
``*_driver.py`` scripts, which put this directory on ``sys.path``), so it may use
the standard library only.

Driver protocol (see ``harness.py``):

* ``setup`` phase: install the peer's schema and pre-insert N jobs, then print one
  JSON line ``{"event": "setup", ...}`` and exit.
* ``work`` phase: build the worker, print ``{"event": "ready"}``, block until the
  harness writes ``go`` on stdin, run the worker, and on ``stop`` (or stdin EOF,
  or SIGTERM) shut the worker down gracefully and print one JSON line
  ``{"event": "work", ...}`` with the process's peak RSS.
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
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["setup", "work"])
    p.add_argument("--database-url", required=True)
    p.add_argument("--jobs", type=int, default=0)
    p.add_argument("--scenario", choices=["drain", "cpu"], default="drain")
    # Iterations of burn_iterations() that take ~1 ms on this machine; calibrated
    # once by the harness and passed to every driver so each peer's handlers do
    # exactly the same amount of CPU work per job.
    p.add_argument("--cpu-iterations", type=int, default=0)
    return p.parse_args(argv)


def burn_iterations(n: int) -> float:
    """Pure-Python CPU work: n iterations of a loop around time.perf_counter."""
    pc = time.perf_counter
    acc = 0.0
    for _ in range(n):
        acc += pc()
    return acc


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
