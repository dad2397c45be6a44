"""The fork server: workers forked through it copy nothing another thread of the
supervisor holds, and each exit comes back to the supervisor as a wait status."""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Iterator

import pytest

from awa_fast.runtime.work.forkserver import ForkServer, ForkServerLost
from tests.helpers import wait_until

LOCK = threading.Lock()
HOLD_EXIT = 3  # the child could not take LOCK: it was copied held
SEEN_EXIT = 4  # the child holds a descriptor of the pipe it was told of


def _child(worker: int, read_fd: int) -> int:
    """What a test's worker does, chosen by its index."""
    if worker == 0:
        return 0 if LOCK.acquire(timeout=5) else HOLD_EXIT
    if worker == 1:  # report whether a pipe made after the server is open here
        dev, ino = map(int, os.read(read_fd, 64).split())
        for name in os.listdir("/proc/self/fd"):
            try:
                stat = os.stat(f"/proc/self/fd/{name}")
            except OSError:
                continue
            if (stat.st_dev, stat.st_ino) == (dev, ino):
                return SEEN_EXIT
        return 0
    if worker == 2:
        os.read(read_fd, 1)  # until its pipe closes
        return 75
    if worker == 4:
        return 0
    signal.pause()
    return 0


@pytest.fixture
def server() -> Iterator[ForkServer]:
    forker = ForkServer(_child)
    forker.start()
    try:
        yield forker
    finally:
        forker.stop()


def _fork(server: ForkServer, worker: int) -> tuple[int, int]:
    """(pid, the write end of its job pipe)."""
    read_fd, write_fd = os.pipe()
    try:
        return server.fork(worker, read_fd), write_fd
    finally:
        os.close(read_fd)


def _exit_codes(server: ForkServer, *pids: int) -> list[int]:
    """Wait for the server's reports of these processes' exits; their exit codes."""
    exits: dict[int, int] = {}
    while not exits.keys() >= set(pids):
        ready, _, _ = select.select([server.fileno()], [], [], 10)
        assert ready, f"no exit reported for {set(pids) - exits.keys()}"
        exits.update(server.exits())
    return [os.waitstatus_to_exitcode(exits[pid]) for pid in pids]


def test_a_worker_forked_while_a_supervisor_thread_holds_a_lock_can_take_it(
    server: ForkServer,
) -> None:
    """The shape of libpq's connect-time mutexes: forked from this process now, the child
    would wait for LOCK forever."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with LOCK:
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(10)
        pid, pipe = _fork(server, 0)
        assert _exit_codes(server, pid) == [0]
        os.close(pipe)
    finally:
        release.set()
        holder.join(10)


def test_a_worker_holds_no_descriptor_of_pipes_the_supervisor_made(server: ForkServer) -> None:
    """Another worker's job pipe stays the supervisor's alone: were a write end copied into
    a sibling, its worker would never see the pipe close."""
    sibling_read, sibling_write = os.pipe()
    try:
        stat = os.fstat(sibling_write)
        pid, pipe = _fork(server, 1)
        os.write(pipe, f"{stat.st_dev} {stat.st_ino}".encode())
        assert _exit_codes(server, pid) == [0]
        os.close(pipe)
    finally:
        os.close(sibling_read)
        os.close(sibling_write)


def test_exits_come_back_with_their_codes_and_signals(server: ForkServer) -> None:
    recycled, recycled_pipe = _fork(server, 2)
    killed, killed_pipe = _fork(server, 3)
    os.close(recycled_pipe)
    os.kill(killed, signal.SIGKILL)
    assert _exit_codes(server, recycled, killed) == [75, -signal.SIGKILL]
    os.close(killed_pipe)


def test_an_exit_read_while_a_fork_is_answered_is_kept_for_collection(
    server: ForkServer,
) -> None:
    """The socket will not turn readable for it again: the pool asks ``pending``."""
    first, first_pipe = _fork(server, 4)
    ready, _, _ = select.select([server.fileno()], [], [], 10)
    assert ready  # its exit report waits, ahead of the next fork's answer
    second, second_pipe = _fork(server, 3)
    assert server.pending
    assert server.exits() == {first: 0}
    assert not server.pending
    os.kill(second, signal.SIGKILL)
    assert _exit_codes(server, second) == [-signal.SIGKILL]
    os.close(first_pipe)
    os.close(second_pipe)


def test_a_lost_server_takes_its_workers_and_refuses_to_fork(server: ForkServer) -> None:
    pid, pipe = _fork(server, 3)
    os.kill(server.pid, signal.SIGKILL)
    wait_until(lambda: _gone(pid), what="the worker to die with its server")
    wait_until(lambda: (server.exits(), server.lost)[1], what="the loss to be seen")
    with pytest.raises(ForkServerLost):
        _fork(server, 3)
    os.close(pipe)


def _gone(pid: int) -> bool:
    """Ended: no process, or one waiting to be reaped by whoever adopted it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
