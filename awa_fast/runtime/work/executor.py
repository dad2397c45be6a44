"""Runs one claimed job's handler and turns what happened into one outcome record.

The executor never touches the database: it pushes ``(id, run_lease, code, kind, number,
payload)`` into the outcome ring and returns. (The writes a handler makes itself, a
callback id or flushed progress, go through ``awa_fast.runtime.work.attempt_writer``.) The same
code runs in the single-process runner and in every worker process of the pool.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Mapping
from concurrent.futures import Executor as ThreadPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from awa_fast._core import InFlight
from awa_fast.codec import ENCODE_ERRORS, check_storable, decode_json
from awa_fast.lifecycle import transitions as tr
from awa_fast.runtime.claimed import Claimed, Delivered, json_text
from awa_fast.tracing import active
from awa_fast.worker import AttemptWrites, CompletesInTransaction, Handler, Job, Registry

if TYPE_CHECKING:
    from awa_fast.tracing.otel import Tracing

log = logging.getLogger("awa_fast.executor")

# What a handler raises to end the process running it: reported as a failed attempt, then
# raised on, for the worker to decide whether it exits (awa_fast.runtime.work.pool, .local).
PROCESS_EXITS = (SystemExit, KeyboardInterrupt)


class UnstorableOutcome(Exception):
    """A handler left progress or metadata that jsonb cannot hold."""


class OutcomeSink(Protocol):
    """Where outcome records go: the Rust ``OutcomeRing`` (or anything with its ``push``)."""

    def push(
        self,
        job_id: int,
        run_lease: int,
        code: int,
        kind: int,
        number: float,
        payload: bytes = b"",
        timeout: float | None = None,
    ) -> None: ...


class CancelFlags(Protocol):
    def is_cancelled(self, slot: int) -> bool: ...

    def mark_started(self, slot: int) -> None: ...


@dataclass(slots=True)
class Executor:
    registry: Registry
    sink: OutcomeSink
    flags: CancelFlags
    backoff: tr.Backoff
    writer: AttemptWrites  # the runtime's AttemptWriter, or a test's stand-in
    threads: ThreadPool | None = None
    dlq_queues: frozenset[str] = frozenset()
    completion: CompletesInTransaction | None = None  # job.complete_in (work/completion.py)
    traces: bool = True  # the runner's option (awa_fast.tracing)

    async def run(self, row: Claimed, slot: int) -> None:
        """Run the handler for ``row``, which holds in-flight ``slot``, and push its outcome."""
        handler = self.registry.get(row.kind)
        attempt = tr.Attempt(row.attempt, row.max_attempts)
        job: Job[Any] | None = None
        if handler is None:
            transition = tr.failed_terminal(f"unknown job kind: {row.kind!r}", attempt)
        else:
            try:
                args = handler.decode(json_text(row.args))
            except Exception as exc:
                transition = tr.failed_terminal(
                    f"undecodable args for kind {row.kind!r}: {type(exc).__name__}: {exc}", attempt
                )
            else:
                job = self._job(row, args, slot)
                self.flags.mark_started(slot)  # from here, a worker that dies spent it
                try:
                    transition = await self._perform(handler, job, attempt)
                except PROCESS_EXITS as exc:
                    # The failure is reported before the exit goes on to whoever runs us.
                    failed = tr.from_exception(exc, attempt, self.backoff)
                    if not job.completed_in_transaction:
                        self._report(row, handler, job, failed)
                    raise
                if job.completed_in_transaction:
                    return  # the handler's transaction holds the outcome (work/completion.py)
        self._report(row, handler, job, transition)

    def _report(
        self,
        row: Claimed,
        handler: Handler | None,
        job: Job[Any] | None,
        transition: tr.Transition,
    ) -> None:
        """Push the attempt's outcome into the ring: with the progress and metadata the
        handler left, or, if those cannot be stored, as a failed attempt that says why."""
        kind = handler.index if handler is not None else self.registry.index_of(row.kind)
        try:
            self.sink.push(*self._record(row, kind, job, transition))
        except ENCODE_ERRORS as exc:  # not JSON, not jsonb, or too large for the ring
            attempt = tr.Attempt(row.attempt, row.max_attempts)
            unstorable = UnstorableOutcome(f"progress or metadata not storable: {exc}")
            failed = tr.from_exception(unstorable, attempt, self.backoff)
            self.sink.push(*self._record(row, kind, None, failed))

    def _record(
        self, row: Claimed, kind: int, job: Job[Any] | None, transition: tr.Transition
    ) -> tr.Record:
        if row.queue in self.dlq_queues:
            transition = tr.to_dlq(transition)
        progress = job.progress if job is not None and job.progress_changed else None
        metadata = job.metadata_updates if job is not None else None
        record = tr.record(
            row.id, row.run_lease, kind, transition, progress=progress, metadata=metadata
        )
        if progress is not None or metadata:
            check_storable("job", record[-1], {"progress": progress, "metadata": metadata})
        return record

    async def _perform(self, handler: Handler, job: Job[Any], attempt: tr.Attempt) -> tr.Transition:
        try:
            tracing = active(self.traces)  # None without OpenTelemetry: the handler, no more
            if tracing is not None:
                result = await self._traced(tracing, handler, job)
            elif handler.is_async:
                result = await handler.func(job)  # type: ignore[misc]
            elif self.threads is None:
                result = handler.func(job)  # inline: a worker process's CPU-bound path
            else:
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self.threads, handler.func, job)
        except Exception as exc:
            log.debug("job %s raised %r", job.id, exc)
            return tr.from_exception(exc, attempt, self.backoff)
        except (asyncio.CancelledError, *PROCESS_EXITS):
            raise  # cut short (reported lost by run_claimed), or an exit run() reports
        except BaseException as exc:
            log.warning("job %s raised %r, a BaseException: a failed attempt", job.id, exc)
            return tr.from_exception(exc, attempt, self.backoff)
        if handler.completes_in_transaction and not job.completed_in_transaction:
            log.error("job %s: its handler returned without job.complete_in(conn)", job.id)
            return tr.failed_terminal(
                "the handler returned without completing the job in its transaction "
                "(it is registered with completes_in_transaction: call job.complete_in(conn))",
                attempt,
            )
        if job.callback is not None:
            attempt = tr.Attempt(attempt.attempt, attempt.max_attempts, job.callback.id)
        try:
            return tr.from_result(result, attempt)
        except Exception as exc:  # a result whose fields are not what its type says
            kind = type(result).__name__
            return tr.failed_terminal(
                f"handler returned an unusable {kind}: {tr.describe(exc)}", attempt
            )

    async def _traced(self, tracing: Tracing, handler: Handler, job: Job[Any]) -> object:
        """The handler run as :meth:`_perform` runs it, in the attempt's consumer span
        (awa_fast.tracing), which records an exception it raises, then raises it on. Apart
        from the untraced path, which then costs nothing more than the check."""
        with tracing.processing(job):
            if handler.is_async:
                return await handler.func(job)  # type: ignore[misc]
            if self.threads is None:
                return handler.func(job)
            # Run in a copy of this context: the span is current in the thread too.
            run = contextvars.copy_context().run
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.threads, run, handler.func, job)

    def _job(self, row: Claimed, args: object, slot: int) -> Job[Any]:
        flags = self.flags
        return Job(
            id=row.id,
            run_lease=row.run_lease,
            kind=row.kind,
            queue=row.queue,
            args=args,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            priority=row.priority,
            tags=row.tags,
            metadata=_json(row.metadata) or {},
            errors=_json(row.errors) or [],
            progress=_json(row.progress),
            run_at_us=row.run_at,
            created_at_us=row.created_at,
            deadline_at_us=row.deadline_at,
            cancelled=lambda: flags.is_cancelled(slot),
            writer=self.writer,
            completion=self.completion,
        )


async def run_claimed(
    executor: Executor,
    inflight: InFlight,
    delivered: Delivered,
    *,
    cut_short: Mapping[tuple[int, int], str] | None = None,
) -> None:
    """Run one delivered job; free its slot and capacity unit when the handler returns.
    An attempt cut short by cancellation is reported lost (with its reason in
    ``cut_short``, by (id, run_lease), where one was given), so the committer retries it,
    or fails it on its last attempt."""
    job, slot = delivered.job, delivered.slot
    try:
        await executor.run(job, slot)
    except asyncio.CancelledError:
        why = cut_short.get((job.id, job.run_lease)) if cut_short else None
        lost = tr.lost(why or "shut down before the handler finished")
        kind = executor.registry.index_of(job.kind)
        executor.sink.push(*tr.record(job.id, job.run_lease, kind, lost))
        raise
    finally:
        inflight.release_slot(slot)  # frees its capacity unit too


def _json(payload: bytes | None) -> Any:
    """A claimed jsonb column, parsed; NULL stays None."""
    return None if payload is None else decode_json(json_text(payload))
