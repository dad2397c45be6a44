"""Forked worker processes, from the supervisor's side: fork, deliver, reap, replace.

Workers are forked by the fork server (awa_fast.runtime.work.forkserver), itself forked before
the supervisor opens a connection or starts a thread, so that no fork, a replacement's
included, copies a lock another thread holds. Each worker gets its
jobs over a pipe (awa_fast.runtime.work.worker_process); outcomes come back through the shared
outcome ring, and capacity and cancel flags live in the shared in-flight table. The
supervisor, not the worker, sends heartbeats and reads a worker's memory, so a long sync
handler is safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from awa_fast.lifecycle import transitions as tr
from awa_fast.runtime.claimed import Delivered
from awa_fast.runtime.work.context import WorkerContext
from awa_fast.runtime.work.forkserver import ForkServer, ForkServerLost
from awa_fast.runtime.work.worker_process import FRAME, RECYCLED_EXIT, WorkerProcess
from awa_fast.worker import UNKNOWN_KIND

log = logging.getLogger("awa_fast.pool")

# evicted: killed for a handler past its deadline; recycled: its job or memory limit;
# retired: asked to drain; crashed: any other end (a signal, os._exit, a fault, a
# handler's SystemExit).
EXIT_CAUSES = ("evicted", "recycled", "retired", "crashed")
_PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031
# How a worker ends when the fork server, its parent, does (PR_SET_PDEATHSIG).
_KILLED_WITH_SERVER = signal.SIGKILL.value
# A worker that crashes within this many seconds of its start, before it was handed a job,
# is respawned after a delay doubling from RESPAWN_DELAY up to RESPAWN_DELAY_MAX, so one
# that cannot start (a descriptor limit, a broken import) is not forked in a tight loop;
# one killed while it worked is replaced at once, for its queue is waiting.
STARTUP_SECONDS = 5.0
RESPAWN_DELAY = 0.5
RESPAWN_DELAY_MAX = 30.0
MEMORY_CHECK_INTERVAL = 0.5


def _grow_pipe(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES)


def exit_cause(code: int, *, evicted: bool) -> str:
    """Why a worker process ended, as the awa_fast_worker_exits_total metric labels it."""
    if evicted:
        return "evicted"
    if code == RECYCLED_EXIT:
        return "recycled"
    return "retired" if code == 0 else "crashed"


def respawn_delay(quick_deaths: int) -> float:
    """How long to wait before replacing a worker after ``quick_deaths`` crashes in a row,
    each soon after its start and before it was handed a job."""
    if quick_deaths == 0:
        return 0.0
    return min(RESPAWN_DELAY * 2.0 ** (quick_deaths - 1), RESPAWN_DELAY_MAX)


def resident_mb(pid: int) -> float | None:
    """A process's resident memory in MB, from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            pages = int(statm.read().split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def describe_exit(pid: int, code: int) -> str:
    if code < 0:
        return f"worker process {pid} was killed by {signal.Signals(-code).name}"
    return f"worker process {pid} exited with code {code}"


class _JobPipe(asyncio.Protocol):
    """The supervisor's end of a worker's job pipe. ``closed`` resolves once the loop has
    let go of the pipe's descriptor, so its number may safely be handed out again."""

    def __init__(self) -> None:
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


@dataclass(slots=True)
class Proc:
    pid: int
    write_fd: int  # owned by ``transport`` once connected
    transport: asyncio.WriteTransport | None = None
    pipe: _JobPipe | None = None
    ended: bool = False  # reaped; a connect still under way must let go of the pipe
    started: float = field(default_factory=time.monotonic)
    recycling: bool = False  # asked to retire for its memory
    worked: bool = False  # has been handed a job


class ForkedWorkers:
    """The supervisor's view of its worker processes."""

    def __init__(self, context: WorkerContext, count: int) -> None:
        self.context = context
        self.count = count
        self.procs: list[Proc | None] = [None] * count
        self.exits = dict.fromkeys(EXIT_CAUSES, 0)  # workers ended, by exit_cause
        self._encoder = msgspec.msgpack.Encoder()
        self._stopping = False
        self._changed: asyncio.Event | None = None
        self._evicted: dict[int, str] = {}  # pid -> why the supervisor killed it
        self._connecting: set[asyncio.Task[None]] = set()
        self._quick_deaths = [0] * count  # crashes in a row before any job, per worker
        self._stop_requested: asyncio.Event | None = None
        self._memory_watch: asyncio.Task[None] | None = None
        self._server = ForkServer(self._run_worker)
        self._server_watched = False  # its socket is on the loop

    # -- forking --------------------------------------------------------------------------

    def prefork(self) -> None:
        """Fork the fork server (once), then through it the workers not running."""
        if not self._server.pid:
            self._server.start()
        for worker in range(self.count):
            if self.procs[worker] is None:
                self._fork(worker)

    def _run_worker(self, worker: int, read_fd: int) -> int:
        """A new worker process's life, in that process."""
        return WorkerProcess(self.context, worker, read_fd).run()

    def _fork(self, worker: int) -> None:
        read_fd, write_fd = os.pipe()
        _grow_pipe(write_fd)
        try:
            pid = self._server.fork(worker, read_fd)
        except OSError:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        self.procs[worker] = Proc(pid, write_fd)

    async def start(self) -> None:
        self._changed = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self.prefork()
        for proc in self.procs:
            if proc is not None:
                await self._connect(proc)
        asyncio.get_running_loop().add_reader(self._server.fileno(), self._reap)
        self._server_watched = True
        self._reap()  # a worker that died before it was watched
        limit = self.context.config.max_worker_memory_mb
        if limit:
            self._memory_watch = asyncio.get_running_loop().create_task(self._watch_memory(limit))

    async def _connect(self, proc: Proc) -> None:
        """Open the process's job pipe."""
        if proc.ended:  # reaped before it was connected
            os.close(proc.write_fd)
            return
        loop = asyncio.get_running_loop()
        file = os.fdopen(proc.write_fd, "wb", buffering=0, closefd=True)
        proc.transport, proc.pipe = await loop.connect_write_pipe(_JobPipe, file)
        if proc.ended:
            proc.transport.abort()

    # -- dispatch -------------------------------------------------------------------------

    def accepting(self) -> Sequence[int]:
        """Workers connected, not killed and not yet reaped, and not running a flagged
        attempt (awa_fast.runtime.host.flags): a job sent to any other would be lost with it."""
        flagged = self.context.flagged_workers()
        return [
            w
            for w, p in enumerate(self.procs)
            if p is not None
            and p.transport is not None
            and p.pid not in self._evicted
            and w not in flagged
        ]

    @property
    def down(self) -> tuple[str, ...]:
        """ "fork server" once it has ended: this host can run no job until restarted."""
        return ("fork server",) if self._server.lost else ()

    def alive(self) -> int:
        """Worker processes forked and not yet reaped."""
        return sum(proc is not None for proc in self.procs)

    @property
    def pids(self) -> list[int]:
        """The worker processes forked and not yet reaped (the benchmark reads their peak
        RSS)."""
        return [proc.pid for proc in self.procs if proc is not None]

    def deliver(self, worker: int, jobs: list[Delivered]) -> None:
        proc = self.procs[worker]
        if proc is None or proc.transport is None or proc.transport.is_closing():
            self.context.release_unstarted(
                jobs, reason="its worker process ended before the job was delivered"
            )
            return
        proc.worked = True
        self._send(proc, ("jobs", jobs))

    def _send(self, proc: Proc, message: object) -> None:
        assert proc.transport is not None
        payload = self._encoder.encode(message)
        proc.transport.write(FRAME.pack(len(payload)) + payload)

    # -- deaths ---------------------------------------------------------------------------

    def _reap(self) -> None:
        """Collect every exited worker (called when the fork server reports an exit): its
        unfinished attempts are lost (retried or failed by the committer, after anything it
        already put in the ring), and unless the pool is stopping, a replacement is forked:
        at once, or after a backoff for a worker that crashed at its start. Once the fork
        server has ended, every worker has died with it and none is replaced."""
        exits = self._server.exits()
        for worker, proc in enumerate(self.procs):
            if proc is None:
                continue
            status = exits.pop(proc.pid, _KILLED_WITH_SERVER if self._server.lost else None)
            if status is not None:
                self._ended(worker, proc, os.waitstatus_to_exitcode(status))
        if self._server.lost and self._server_watched:
            asyncio.get_running_loop().remove_reader(self._server.fileno())
            self._server_watched = False
        if self._changed is not None:
            self._changed.set()
        self.context.wake()

    def _ended(self, worker: int, proc: Proc, code: int) -> None:
        why = self._evicted.pop(proc.pid, None)
        cause = exit_cause(code, evicted=why is not None)
        self.exits[cause] += 1
        young = time.monotonic() - proc.started < STARTUP_SECONDS
        quick = cause == "crashed" and not proc.worked and young
        self._quick_deaths[worker] = self._quick_deaths[worker] + 1 if quick else 0
        pid = proc.pid
        ended = f"worker process {pid} was recycled: {why}" if why else describe_exit(pid, code)
        self.procs[worker] = None
        _close_handles(proc)
        self._lose_attempts(worker, ended)
        if code not in (0, RECYCLED_EXIT):
            log.error(
                "%s; its unfinished jobs will be retried",
                ended,
                extra={"worker_pid": pid, "exit_code": code, "cause": cause},
            )
        if not self._stopping and not self._server.lost:
            self._replace(worker, proc)

    def _lose_attempts(self, worker: int, reason: str) -> None:
        """The attempts of a dead worker: those whose handler started are lost (retried,
        the attempt spent); those queued behind them go back to available unspent."""
        ring = self.context.ring
        lost = tr.lost(reason)
        unstarted = tr.released(f"{reason} before the job started")
        for job_id, lease, _cap, started in self.context.inflight.release_worker(worker):
            transition = lost if started else unstarted
            ring.push(*tr.record(job_id, lease, UNKNOWN_KIND, transition))

    def _replace(self, worker: int, ended: Proc) -> None:
        capacity = self.context.capacity
        for queue_index in range(len(capacity.queues)):
            held = capacity.held(queue_index, worker)
            self.context.inflight.set_capacity(capacity.index(queue_index, worker), held)
        delay = respawn_delay(self._quick_deaths[worker])
        if delay:
            log.warning(
                "worker %d crashed %d times in a row soon after its start; replacing it in %.1fs",
                worker,
                self._quick_deaths[worker],
                delay,
                extra={"worker": worker, "respawn_delay": delay},
            )
        task = asyncio.get_running_loop().create_task(self._respawn(worker, ended, delay))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)
        task.add_done_callback(lambda _: self.context.wake())

    async def _respawn(self, worker: int, ended: Proc, delay: float) -> None:
        """Fork and connect the replacement once the loop has let go of the ended worker's
        pipe (forked at once, the new pipe could take a descriptor number the loop still
        tracked for the old transport), and ``delay`` has passed or the pool is stopping. A
        fork that fails counts as a crash at start."""
        if ended.pipe is not None:
            await ended.pipe.closed
        if delay:
            assert self._stop_requested is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_requested.wait(), delay)
        if self._stopping:
            return
        try:
            self._fork(worker)
        except ForkServerLost:
            self._reap()  # its workers died with it
            return
        except OSError as exc:
            log.error("could not fork worker %d: %s", worker, exc, extra={"worker": worker})
            self._quick_deaths[worker] += 1
            self._replace(worker, ended)
            return
        proc = self.procs[worker]
        assert proc is not None
        log.info(
            "worker %d replaced by process %d",
            worker,
            proc.pid,
            extra={"worker": worker, "worker_pid": proc.pid},
        )
        await self._connect(proc)
        if self._server.pending:  # another worker's exit, read while this fork was answered
            self._reap()

    def evict(self, job_id: int, run_lease: int, *, reason: str) -> None:
        """Kill the worker process running this attempt: the only way to stop a handler
        that ignores its cancel flag (for example a CPU loop). Its other attempts are lost
        and retried; a replacement is forked."""
        for worker, proc in enumerate(self.procs):
            if proc is not None and (job_id, run_lease) in self.context.inflight.held_by(worker):
                log.warning(
                    "job %s: killing worker %d: %s",
                    job_id,
                    proc.pid,
                    reason,
                    extra={"job_id": job_id, "run_lease": run_lease, "worker_pid": proc.pid},
                )
                self._evicted[proc.pid] = f"job {job_id} {reason}"
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                return

    async def _watch_memory(self, limit_mb: float) -> None:
        """Ask each worker resident past ``limit_mb`` to retire once its running jobs end.
        Read from here, not by the worker itself: a sync handler holds the worker's loop
        for as long as it runs."""
        while True:
            for proc in self.procs:
                if proc is not None and not proc.recycling and proc.transport is not None:
                    self._recycle_if_past(proc, limit_mb)
            await asyncio.sleep(MEMORY_CHECK_INTERVAL)

    def _recycle_if_past(self, proc: Proc, limit_mb: float) -> None:
        rss_mb = resident_mb(proc.pid)
        assert proc.transport is not None
        if rss_mb is None or rss_mb <= limit_mb or proc.transport.is_closing():
            return
        log.info(
            "worker %d: %.0f MB resident > %s MB; recycling it after its jobs",
            proc.pid,
            rss_mb,
            limit_mb,
            extra={"worker_pid": proc.pid, "rss_mb": round(rss_mb), "limit_mb": limit_mb},
        )
        proc.recycling = True
        self._send(proc, ("retire",))

    # -- stopping -------------------------------------------------------------------------

    async def drain(self, timeout: float) -> None:
        """Ask every worker to finish what it holds and exit; past ``timeout``, set cancel
        flags, allow a short grace, then kill what is left (its attempts are lost and
        retried)."""
        self._stopping = True
        assert self._stop_requested is not None
        self._stop_requested.set()
        if self._memory_watch is not None:
            self._memory_watch.cancel()
        # A replacement forked just before the signal may still be connecting: it must get
        # its drain message too, or it would wait out the whole timeout.
        await asyncio.gather(*self._connecting, return_exceptions=True)
        for proc in self.procs:
            if proc is not None and proc.transport is not None:
                self._send(proc, ("drain",))
        if not await self._wait_all_exited(timeout):
            for worker in range(self.count):
                self.context.inflight.cancel_worker(worker)
            if not await self._wait_all_exited(min(timeout, 2.0)):
                for proc in self.procs:
                    if proc is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(proc.pid, signal.SIGKILL)
                await self._wait_all_exited(10.0)
        self._stop_server()

    def _stop_server(self) -> None:
        if self._server_watched:
            asyncio.get_running_loop().remove_reader(self._server.fileno())
            self._server_watched = False
        self._server.stop()

    async def _wait_all_exited(self, timeout: float) -> bool:
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(p is not None for p in self.procs):
            self._changed.clear()
            self._reap()
            if not any(p is not None for p in self.procs):
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))
        return True


def _close_handles(proc: Proc) -> None:
    """Close an exited worker's pipe. The pipe's transport may have closed itself already
    (asyncio notices the reader's end closing, in the same loop iteration as the exit
    report or before it): aborting one whose ``connection_lost`` has run raises on the
    standard loop, so only a transport not yet lost is aborted, closing or
    not (a uvloop pipe left closing with unsent data never finishes by itself, and its
    replacement waits for it). A pipe not connected yet is closed by its ``_connect``,
    which sees ``ended``."""
    proc.ended = True
    if proc.transport is not None and proc.pipe is not None and not proc.pipe.closed.done():
        proc.transport.abort()
