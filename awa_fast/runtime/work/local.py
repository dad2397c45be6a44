"""Workers in this process: handlers run as tasks on the runner's own event loop.

Sync handlers run on a thread pool here, so they never block claiming, heartbeats or other
handlers. (In forked worker processes they run inline instead; see ``pool.py``.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from awa_fast.runtime.claimed import Delivered
from awa_fast.runtime.work.context import WorkerContext
from awa_fast.runtime.work.executor import PROCESS_EXITS, run_claimed
from awa_fast.runtime.work.starts import Starts

log = logging.getLogger("awa_fast.local")


class LocalWorkers:
    count = 1

    def __init__(self, context: WorkerContext) -> None:
        self.context = context
        self.threads = ThreadPoolExecutor(
            context.config.sync_threads, thread_name_prefix="awa-fast-sync"
        )
        self.executor = context.make_executor(self.threads)
        self.starts = Starts(
            context.capacity, 0, inflight=context.inflight, give_back=self._give_back
        )
        # Running handlers' tasks by attempt (the loop holds tasks only weakly); each task
        # drops its own entry as it ends, which costs less than a done-callback.
        self.running: dict[tuple[int, int], asyncio.Task[None]] = {}
        self.evicted: dict[tuple[int, int], str] = {}
        self.exits: Mapping[str, int] = {}  # no worker processes to end

    def prefork(self) -> None:
        """Nothing to fork."""

    async def start(self) -> None:
        """Nothing to start: tasks are created per delivery."""

    def accepting(self) -> Sequence[int]:
        return (0,)

    def alive(self) -> int:
        """This process runs the handlers."""
        return 1

    @property
    def down(self) -> tuple[str, ...]:
        """Nothing of its own: its handlers run on the runner's loop."""
        return ()

    def deliver(self, worker: int, jobs: list[Delivered]) -> None:
        for delivered in jobs:
            self._start(self.starts.admit(delivered))

    def _start(self, ready: list[Delivered]) -> None:
        for delivered in ready:
            attempt = (delivered.job.id, delivered.job.run_lease)
            self.running[attempt] = asyncio.create_task(self._run(delivered, attempt))

    def _give_back(self, delivered: list[Delivered], reason: str) -> None:
        self.context.release_unstarted(delivered, reason=reason)

    def evict(self, job_id: int, run_lease: int, *, reason: str) -> None:
        """Cancel the attempt's task. (A sync handler on the thread pool cannot be stopped
        from outside; its later outcome is stale and dropped.)"""
        task = self.running.get((job_id, run_lease))
        if task is not None:
            log.warning(
                "job %s: cancelling its task: %s",
                job_id,
                reason,
                extra={"job_id": job_id, "run_lease": run_lease},
            )
            self.evicted[(job_id, run_lease)] = reason
            task.cancel()

    async def _run(self, delivered: Delivered, attempt: tuple[int, int]) -> None:
        try:
            await run_claimed(
                self.executor, self.context.inflight, delivered, cut_short=self.evicted
            )
        except asyncio.CancelledError:
            if self.evicted.pop(attempt, None) is None:
                raise  # shutdown: propagate; an evicted attempt's task just ends
        except PROCESS_EXITS as exc:
            # Reported as a failed attempt already; the process is the application's, which
            # a job does not get to end (nor could it from a sync handler's thread).
            log.error(
                "job %s raised %r: its attempt failed; the runner carries on",
                attempt[0],
                exc,
                extra={"job_id": attempt[0], "run_lease": attempt[1]},
            )
        finally:
            del self.running[attempt]
            self._start(self.starts.ended(delivered.capacity))
            self.context.capacity_freed()

    async def drain(self, timeout: float) -> None:
        """Wait for running handlers; past ``timeout`` set their cancel flags, give them a
        short grace, then cancel what is left (reported lost, so it is retried). Jobs not
        started yet go back at once."""
        self._give_back(self.starts.take_waiting(), "shutting down before the job started")
        if self.running:
            _, pending = await asyncio.wait(list(self.running.values()), timeout=timeout)
            if pending:
                self.context.inflight.cancel_worker(0)
                _, pending = await asyncio.wait(pending, timeout=min(timeout, 2.0))
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        self.threads.shutdown(wait=False, cancel_futures=True)
        await self.executor.writer.close()
