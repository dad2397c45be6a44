"""Fork helpers for tests of the shared-memory structures.

A child runs a function and leaves with ``os._exit`` (never returning into pytest); its exit
status says whether the function returned normally. Synchronisation is done with pipes, never
with sleeps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable

CHILD_TIMEOUT = 60.0


def fork_child(fn: Callable[[], None]) -> int:
    """Forks; the child runs ``fn`` and exits 0 on success, 1 on any exception."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            signal.alarm(int(CHILD_TIMEOUT))  # a wedged child must not outlive the test run
            fn()
            code = 0
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    return pid


def wait_ok(pid: int) -> None:
    """Waits for a child and asserts it exited 0."""
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"child {pid} died: status {status:#x}"
    assert os.WEXITSTATUS(status) == 0, f"child {pid} failed (exit {os.WEXITSTATUS(status)})"


def reap(pid: int) -> int:
    """Waits for a child and returns its raw status."""
    return os.waitpid(pid, 0)[1]


class Pipe:
    """A one-way byte pipe for handshakes between parent and child."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def send(self, data: bytes) -> None:
        os.write(self.w, data)

    def recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = os.read(self.r, n - len(out))
            if not chunk:
                raise EOFError("pipe closed")
            out += chunk
        return out

    def close(self) -> None:
        for fd in (self.r, self.w):
            with contextlib.suppress(OSError):
                os.close(fd)
