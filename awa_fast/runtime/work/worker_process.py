"""A forked worker process, from the inside: run delivered jobs, report outcomes, retire.

A worker is forked by the fork server (awa_fast.runtime.work.forkserver) at the supervisor's
request (awa_fast.runtime.work.pool), made safe to run a loop of its own (:func:`prepare_child`),
and fed delivered jobs over its pipe as length-prefixed
msgpack frames. Async handlers run concurrently up to the worker's share of the queue's
concurrency; sync handlers run inline, one at a time, so a CPU-bound handler gets its
core without contending for the GIL with a thread pool.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import logging
import os
import signal
import struct
import sys
import threading
from typing import Any

import msgspec
import uvloop

from awa_fast.runtime.claimed import Delivered
from awa_fast.runtime.work import collector
from awa_fast.runtime.work.context import WorkerContext
from awa_fast.runtime.work.executor import PROCESS_EXITS, run_claimed
from awa_fast.runtime.work.starts import Starts
from awa_fast.tracing import flush as flush_traces

log = logging.getLogger("awa_fast.pool")

RECYCLED_EXIT = 75  # a worker that retired after its job or memory limit
HANDLER_EXIT = 1  # a worker that retired because a handler raised SystemExit or the like
FRAME = struct.Struct("<I")  # the length prefix of a message on a job pipe
RETIRE_RECHECK_INTERVAL = 0.05
_PR_SET_PDEATHSIG = 1


def prepare_child(parent: int) -> None:
    """Make a freshly forked child (the fork server, or a worker) safe to run on its own:
    forget the parent's loop, signal handling and import locks, die with the parent, and
    never let the collector finalize the parent's objects (its connections) from here, nor
    collect as often as a short script would."""
    _forget_import_locks()
    asyncio.events._set_running_loop(None)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    # Ctrl-C, and service managers' SIGTERM, reach the whole process group: the supervisor
    # alone decides how its workers stop (a drain message, or SIGKILL past the grace).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
    collector.settle()  # for good: a worker only ever runs jobs


def _forget_import_locks() -> None:
    """Drop the import locks, and the half-imported modules, of threads that did not
    survive the fork.

    The fork server is forked from the supervisor before the runtime starts a thread, but
    the application's own threads, started at its import, may be importing a module then.
    CPython 3.11 resets only its global import lock in the child: the module's own lock
    stays held by a thread that no longer exists, and the first import of that module
    here would wait for it forever, with the job this worker was given. Imports of this
    thread (the one that forked) are left as they are.
    """
    bootstrap = sys.modules.get("importlib._bootstrap")
    locks = getattr(bootstrap, "_module_locks", None)
    if not isinstance(locks, dict):
        return
    me = threading.get_ident()
    for name, ref in list(locks.items()):
        lock = ref() if callable(ref) else ref
        owner = getattr(lock, "owner", None)
        if owner is None or owner == me:
            continue
        del locks[name]
        module = sys.modules.get(name)
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            del sys.modules[name]  # imported again, whole, when next asked for


class _FrameReader(asyncio.Protocol):
    def __init__(self, worker: WorkerProcess) -> None:
        self.worker = worker
        self.buffer = bytearray()
        self.decoder = msgspec.msgpack.Decoder()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= FRAME.size:
            (size,) = FRAME.unpack_from(self.buffer)
            end = FRAME.size + size
            if len(self.buffer) < end:
                return
            message = self.decoder.decode(self.buffer[FRAME.size : end])
            del self.buffer[:end]
            self.worker.on_message(message)

    def eof_received(self) -> bool:
        self.worker.retire(0)
        return False


class WorkerProcess:
    """The child side: run delivered rows, report outcomes, retire on request or limits."""

    def __init__(self, context: WorkerContext, index: int, read_fd: int) -> None:
        self.context = context
        self.index = index
        self.read_fd = read_fd
        self.inflight = context.inflight
        self.caps = [context.capacity.index(q, index) for q in range(len(context.capacity.queues))]
        self.registry = context.registry
        self.config = context.config
        self.executor = context.make_executor()
        self.starts = Starts(
            context.capacity, index, inflight=self.inflight, give_back=self._give_back
        )
        # Sync handlers' jobs whose turn has come: the pump runs them one at a time.
        self.inline: collections.deque[Delivered] = collections.deque()
        # Running async handlers by slot (the loop holds tasks only weakly). Keyed by slot,
        # _run drops its own entry without asking asyncio which task it is.
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.jobs_done = 0
        self.retiring = False
        self.exit_code = 0
        self.done: asyncio.Event | None = None
        self.pump_wakeup: asyncio.Event | None = None
        self.recheck: asyncio.Task[None] | None = None

    def run(self) -> int:
        return uvloop.run(self._main())

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        self.done = asyncio.Event()
        self.pump_wakeup = asyncio.Event()
        pipe = os.fdopen(self.read_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(lambda: _FrameReader(self), pipe)
        pump = asyncio.create_task(self._pump())
        await self.done.wait()
        pump.cancel()
        if self.recheck is not None:
            self.recheck.cancel()
        transport.close()
        await self.executor.writer.close()
        flush_traces()  # the process ends in os._exit, which flushes nothing
        return self.exit_code

    def on_message(self, message: list[Any]) -> None:
        if message[0] == "jobs":
            delivered = [Delivered.of(fields) for fields in message[1]]
            if self.retiring:  # sent before the supervisor saw this worker's capacity go
                self._give_back(delivered, "delivered to a worker on its way out")
                self._maybe_exit()
                return
            for one in delivered:
                self._start(self.starts.admit(one))
        elif message[0] == "drain":
            self.retire(0, give_back=True)
        elif message[0] == "retire":  # past its memory limit
            self.retire(RECYCLED_EXIT, give_back=True)

    def _start(self, ready: list[Delivered]) -> None:
        """Start jobs whose turn has come: a task each for async handlers, the pump's
        queue for sync ones."""
        inline = False
        for delivered in ready:
            handler = self.registry.get(delivered.job.kind)
            if handler is not None and not handler.is_async:
                self.inline.append(delivered)
                inline = True
                continue
            # Held here until _run's last step drops it (a worker never cancels these, so
            # that step always runs). A slot is reused only after run_claimed frees it, and
            # _run drops the entry right then, with no await between.
            task = asyncio.get_running_loop().create_task(self._run(delivered))
            self.tasks[delivered.slot] = task
        if inline:
            assert self.pump_wakeup is not None
            self.pump_wakeup.set()

    def _give_back(self, delivered: list[Delivered], reason: str) -> None:
        self.context.release_unstarted(delivered, reason=reason)

    async def _run(self, delivered: Delivered) -> None:
        try:
            await run_claimed(self.executor, self.inflight, delivered)
        except PROCESS_EXITS as exc:
            log.warning(
                "worker %d: job %s raised %r: its attempt failed; the worker exits after its"
                " running jobs, and gives back those it has not started",
                os.getpid(),
                delivered.job.id,
                exc,
                extra={"worker_pid": os.getpid(), "job_id": delivered.job.id},
            )
            self.retire(HANDLER_EXIT, give_back=True)
        finally:
            self.tasks.pop(delivered.slot, None)  # absent for jobs the pump runs inline
            self._start(self.starts.ended(delivered.capacity))
            self.jobs_done += 1
            limit = self.config.max_jobs_per_worker
            if limit and self.jobs_done >= limit:
                self.retire(RECYCLED_EXIT, give_back=True)  # not past it by its prefetch
            self._maybe_exit()

    async def _pump(self) -> None:
        """Run sync handlers one at a time, inline (their jobs wait here, unstarted)."""
        assert self.pump_wakeup is not None
        while True:
            await self.pump_wakeup.wait()
            self.pump_wakeup.clear()
            while self.inline:
                delivered = self.inline.popleft()
                if self.inflight.is_cancelled(delivered.slot):
                    self._give_back([delivered], "its attempt was flagged before it started")
                    self._start(self.starts.ended(delivered.capacity))
                    continue
                await self._run(delivered)
                await asyncio.sleep(0)  # let the pipe, async handlers and signals in

    def retire(self, code: int, *, give_back: bool = False) -> None:
        """Take no more jobs (capacity 0), finish what runs, then exit with ``code``. With
        ``give_back``, rows not started yet return to available at once."""
        if not self.retiring:
            self.retiring = True
            self.exit_code = code
            self.starts.retire()
            for cap in self.caps:
                self.inflight.set_capacity(cap, 0)
            self.recheck = asyncio.get_running_loop().create_task(self._recheck_exit())
        if give_back:
            reason = "shutting down before the job started"
            self._give_back([*self.inline, *self.starts.take_waiting()], reason)
            self.inline.clear()
        self._maybe_exit()

    async def _recheck_exit(self) -> None:
        """Look again now and then whether this retiring worker may exit: a claim under way
        holds capacity units here, and one that comes back empty frees them without a word
        to this worker."""
        while True:
            await asyncio.sleep(RETIRE_RECHECK_INTERVAL)
            self._maybe_exit()

    def _maybe_exit(self) -> None:
        if (
            self.retiring
            and not self.tasks
            and not self.inline
            and not self.starts
            and all(self.inflight.in_flight(cap) == 0 for cap in self.caps)
            and self.done is not None
        ):
            self.done.set()
