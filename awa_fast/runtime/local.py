"""Workers in this process: handlers run as tasks on the runner's own event loop.

Sync handlers run on a thread pool here, so they never block claiming, heartbeats or other
handlers. (In forked worker processes they run inline instead; see ``pool.py``.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import orjson

from awa_fast.db.transitions import Target
from awa_fast.runtime.executor import ID, KIND, LEASE, PROCESS_EXITS

log = logging.getLogger("awa_fast.local")

if TYPE_CHECKING:
    from awa_fast._core import InFlight
    from awa_fast.runtime.executor import Executor
    from awa_fast.runtime.runner import Runner


async def run_claimed(
    executor: Executor,
    inflight: InFlight,
    row: Sequence[Any],
    *,
    cut_short: Mapping[tuple[int, int], str] | None = None,
) -> None:
    """Run one delivered row ``(*claimed columns, slot, capacity index)``; free its slot and
    capacity unit when the handler returns. An attempt cut short by cancellation is
    reported lost (with its reason in ``cut_short``, by (id, run_lease), where one was
    given: a map read only then, not a closure made for every job), so the committer
    retries it, or fails it on its last attempt."""
    slot = row[-2]
    try:
        await executor.run(row, slot)
    except asyncio.CancelledError:
        why = cut_short.get((row[ID], row[LEASE])) if cut_short else None
        reason = orjson.dumps({"reason": why or "shut down before the handler finished"})
        kind = executor.registry.index_of(row[KIND])
        executor.sink.push(row[ID], row[LEASE], int(Target.LOST), kind, 0.0, reason)
        raise
    finally:
        inflight.release_slot(slot)  # frees its capacity unit too


class LocalWorkers:
    count = 1

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.threads = ThreadPoolExecutor(
            runner.config.sync_threads, thread_name_prefix="awa-fast-sync"
        )
        self.executor = runner.make_executor(self.threads)
        # Running handlers' tasks by attempt (the loop holds tasks only weakly). Each task
        # drops its own entry as it ends: a done-callback per task, with a closure and a set
        # beside the dict, cost each job 1.3 us more (benches/RESULTS.md).
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

    def deliver(self, worker: int, rows: list[tuple[Any, ...]]) -> None:
        for row in rows:
            attempt = (row[ID], row[LEASE])
            self.running[attempt] = asyncio.create_task(self._run(row, attempt))

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

    async def _run(self, row: tuple[Any, ...], attempt: tuple[int, int]) -> None:
        try:
            await run_claimed(self.executor, self.runner.inflight, row, cut_short=self.evicted)
        except asyncio.CancelledError:
            if self.evicted.pop(attempt, None) is None:
                raise  # shutdown: propagate; an evicted attempt's task just ends
        except PROCESS_EXITS as exc:
            # Reported as a failed attempt already; the process is the application's, which
            # a job does not get to end (nor could it from a sync handler's thread).
            log.error(
                "job %s raised %r: its attempt failed; the runner carries on",
                row[ID],
                exc,
                extra={"job_id": row[ID], "run_lease": row[LEASE]},
            )
        finally:
            del self.running[attempt]
            self.runner.capacity_freed()

    async def drain(self, timeout: float) -> None:
        """Wait for running handlers; past ``timeout`` set their cancel flags, give them a
        short grace, then cancel what is left (reported lost, so it is retried)."""
        if self.running:
            _, pending = await asyncio.wait(list(self.running.values()), timeout=timeout)
            if pending:
                self.runner.inflight.cancel_worker(0)
                _, pending = await asyncio.wait(pending, timeout=min(timeout, 2.0))
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        self.threads.shutdown(wait=False, cancel_futures=True)
        await self.executor.writer.close()
