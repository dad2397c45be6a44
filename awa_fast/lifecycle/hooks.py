"""Lifecycle events, fired after their transition commits, on a thread of their own.

The committer only enqueues events; a slow or raising hook never blocks or breaks it. A hook
may be a plain function or an ``async def`` (run on the dispatcher's own event loop).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from awa_fast.codec import trigger_of
from awa_fast.errors import ConfigTypeError
from awa_fast.types import JobRow

log = logging.getLogger("awa_fast.hooks")


class EventType(StrEnum):
    STARTED = "Started"
    COMPLETED = "Completed"
    RETRIED = "Retried"
    EXHAUSTED = "Exhausted"
    CANCELLED = "Cancelled"
    WAITING_FOR_CALLBACK = "WaitingForCallback"
    RESCUED = "Rescued"


@dataclass(frozen=True, slots=True)
class Event:
    type: EventType
    job: JobRow
    args: Any
    error: str | None = None
    attempt: int | None = None
    next_run_at: datetime | None = None
    reason: str | None = None


Hook = Callable[[Event], Any]


@dataclass(slots=True)
class HookRegistry:
    hooks: dict[str, list[tuple[Hook, Callable[[bytes], Any]]]] = field(default_factory=dict)

    def add(self, trigger: type | str, hook: Hook) -> None:
        kind, decode = trigger_of(trigger)
        if not callable(hook):
            raise ConfigTypeError(f"the hook for kind {kind!r} must be callable, got {hook!r}")
        self.hooks.setdefault(kind, []).append((hook, decode))

    def wants(self, kind: str | None) -> bool:
        return kind is not None and kind in self.hooks


class HookDispatcher:
    """Runs hooks in order on one daemon thread."""

    def __init__(self, registry: HookRegistry) -> None:
        self.registry = registry
        self._queue: queue.SimpleQueue[tuple[EventType, JobRow, dict[str, Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self.dispatched = 0

    def start(self) -> None:
        if self._thread is None and self.registry.hooks:
            self._thread = threading.Thread(target=self._run, name="awa-fast-hooks", daemon=True)
            self._thread.start()

    def submit(self, event_type: EventType, row: JobRow, **fields: Any) -> None:
        if self._thread is not None:
            self._queue.put((event_type, row, fields))

    def stop(self) -> None:
        """Deliver what is queued, then stop."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            while (item := self._queue.get()) is not None:
                event_type, row, fields = item
                for hook, decode in self.registry.hooks.get(row.kind, ()):
                    self._call(loop, hook, decode, event_type, row, fields)
                self.dispatched += 1
        finally:
            loop.close()

    @staticmethod
    def _call(
        loop: asyncio.AbstractEventLoop,
        hook: Hook,
        decode: Callable[[bytes], Any],
        event_type: EventType,
        row: JobRow,
        fields: dict[str, Any],
    ) -> None:
        try:
            event = Event(event_type, row, decode(orjson.dumps(row.args)), **fields)
            result = hook(event)
            if inspect.isawaitable(result):
                loop.run_until_complete(result)
        except Exception:
            log.exception(
                "lifecycle hook %r raised for job %s (%s); ignored",
                hook,
                row.id,
                event_type,
                extra={"job_id": row.id, "kind": row.kind, "event": str(event_type)},
            )
