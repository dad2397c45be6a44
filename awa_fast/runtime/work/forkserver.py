"""The fork server: the one process that forks worker processes, and reaps them.

A process forked while another of its threads holds a lock inside a C library inherits
that lock held, by a thread that does not exist in the child, for good. The running
supervisor always has such threads (the committer, ``asyncio.to_thread`` calls, hook
dispatch), and libpq takes process-wide mutexes on every connect (its GSSAPI probe, in
krb5): a replacement worker forked while one of them was connecting hung on its own first
connect, with the job it had been handed, until the job's deadline killed it.

So the supervisor forks once, before it starts a thread or opens a connection, and that
child, the fork server, forks every worker: it never starts a thread, connects or runs a
handler, so nothing of it is ever held at a fork. It is the workers' parent: it reaps
them and reports each exit status to the supervisor, which acts on deaths as before.

Both ends speak over a ``SOCK_SEQPACKET`` socket pair, one fixed-size message at a time:
the supervisor asks for a worker (its index, with the read end of its job pipe passed as
ancillary data); the server answers with the new process's pid or the fork's errno, and
reports every exit it reaps. The server dies with the supervisor (``PR_SET_PDEATHSIG``),
and its workers with it; it exits when the supervisor closes its end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import struct
from collections.abc import Callable
from typing import Any

from awa_fast.runtime.work.worker_process import prepare_child

log = logging.getLogger("awa_fast.pool")

REQUEST = struct.Struct("<i")  # the worker index; its job pipe's read end rides along
REPLY = struct.Struct("<Bii")  # a kind below, then two values
FORKED, FAILED, EXITED = range(3)  # (worker, pid), (worker, errno), (pid, wait status)
REPLY_TIMEOUT = 30.0  # a fork takes milliseconds; a server this slow is lost

# Runs in the new worker process with (worker index, job pipe read end); its exit code.
StartWorker = Callable[[int, int], int]


class ForkServerLost(OSError):
    """The fork server has ended (killed from outside): no worker can be forked, and its
    workers died with it."""


class ForkServer:
    """The supervisor's end of the fork server."""

    def __init__(self, start_worker: StartWorker) -> None:
        self._start_worker = start_worker
        self._sock: socket.socket | None = None
        self.pid = 0
        self.lost = False
        self._exits: dict[int, int] = {}  # pid -> wait status, read and not yet collected

    def start(self) -> None:
        """Fork the server; call before this process starts a thread."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ours.close()
                prepare_child(supervisor)
                _serve(theirs, self._start_worker)
                code = 0
            except ConnectionError:  # the supervisor has gone
                code = 0
            except BaseException:
                log.exception("the fork server failed")
            finally:
                os._exit(code)
        theirs.close()
        ours.setblocking(False)
        self._sock, self.pid = ours, pid

    def fileno(self) -> int:
        """Readable when the server has reported an exit, or ended."""
        assert self._sock is not None
        return self._sock.fileno()

    def fork(self, worker: int, read_fd: int) -> int:
        """A new worker process's pid, its job pipe's read end handed over (the caller
        still closes its own copy). Raises OSError when the fork failed, and
        ForkServerLost once the server has ended."""
        if self.lost or self._sock is None:
            raise ForkServerLost("the fork server has ended")
        try:
            socket.send_fds(self._sock, [REQUEST.pack(worker)], [read_fd])
        except OSError as exc:
            self._lose()
            raise ForkServerLost(f"the fork server has ended: {exc}") from exc
        while True:
            kind, first, second = self._next_reply()
            if kind == EXITED:
                self._exits[first] = second
            elif kind == FORKED and first == worker:
                return second
            elif kind == FAILED and first == worker:
                raise OSError(second, f"fork failed: {os.strerror(second)}")
            else:
                raise ForkServerLost(f"the fork server answered out of turn: {kind}, {first}")

    @property
    def pending(self) -> bool:
        """Exits read while waiting for a fork's answer, not collected yet: the socket
        will not turn readable for them again."""
        return bool(self._exits)

    def _next_reply(self) -> tuple[int, int, int]:
        """The next message, waiting for it (a fork is under way)."""
        assert self._sock is not None
        readable, _, _ = select.select([self._sock], [], [], REPLY_TIMEOUT)
        message = self._recv() if readable else None
        if message is None:
            self._lose()
            raise ForkServerLost("the fork server did not answer")
        return message

    def exits(self) -> dict[int, int]:
        """Exits reported since the last call: pid -> wait status. Notices the server's own
        end (``lost``)."""
        while not self.lost:
            try:
                message = self._recv()
            except BlockingIOError:
                break
            if message is None:
                break
            kind, pid, status = message
            if kind == EXITED:
                self._exits[pid] = status
        exits, self._exits = self._exits, {}
        return exits

    def _recv(self) -> tuple[int, int, int] | None:
        """One message; None (and ``lost``) when the server has ended."""
        assert self._sock is not None
        try:
            data = self._sock.recv(REPLY.size)
        except ConnectionError:
            data = b""
        if len(data) != REPLY.size:
            self._lose()
            return None
        kind, first, second = REPLY.unpack(data)
        return kind, first, second

    def _lose(self) -> None:
        if not self.lost:
            self.lost = True
            log.error(
                "the fork server (process %d) has ended: no worker can be forked until this"
                " host is restarted",
                self.pid,
                extra={"fork_server_pid": self.pid},
            )

    def stop(self) -> None:
        """Close our end (the server exits when it sees that) and reap the server."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.pid:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0


def _serve(sock: socket.socket, start_worker: StartWorker) -> None:
    """The server's loop: fork on request, report what it reaps, until the supervisor
    closes its end."""
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, _on_sigchld)  # the wakeup fd hears only handled signals
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    server = os.getpid()
    while True:
        for fd, _ in poller.poll():
            if fd == wake_read:
                while _drain(wake_read):
                    pass
                _report_exits(sock)
                continue
            data, fds, _, _ = socket.recv_fds(sock, REQUEST.size, 1)
            if not data:
                return
            (worker,) = REQUEST.unpack(data)
            wake = (wake_read, wake_write)
            _fork_worker(sock, worker, fds[0], start_worker, server=server, wake=wake)


def _on_sigchld(signum: int, frame: Any) -> None:
    """Nothing: the wakeup fd has told the loop."""


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def _report_exits(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(REPLY.pack(EXITED, pid, status))


def _fork_worker(
    sock: socket.socket,
    worker: int,
    read_fd: int,
    start_worker: StartWorker,
    *,
    server: int,
    wake: tuple[int, int],
) -> None:
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        sock.send(REPLY.pack(FAILED, worker, exc.errno or 0))
        return
    if pid == 0:
        code = 1
        try:
            prepare_child(server)
            sock.close()
            for fd in wake:
                os.close(fd)
            code = start_worker(worker, read_fd)
        except BaseException:
            log.exception("worker process %d failed", os.getpid())
        finally:
            os._exit(code)
    os.close(read_fd)
    sock.send(REPLY.pack(FORKED, worker, pid))
