"""What both clients register before they run anything: handlers, follow-ups, lifecycle
hooks, schedules and descriptors, and the checks a run makes of them."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Unpack

from awa_fast.db.connections import Database
from awa_fast.descriptors import DescriptorOptions, descriptor
from awa_fast.errors import ConfigError
from awa_fast.lifecycle.followups import FollowupRegistry, Make
from awa_fast.lifecycle.handlers import Handlers
from awa_fast.lifecycle.hooks import Hook, HookRegistry
from awa_fast.lifecycle.schedules import PeriodicOptions, periodic_job
from awa_fast.lifecycle.transitions import Outcome
from awa_fast.runtime.config import DEFAULT_CONCURRENCY, QueueSpec
from awa_fast.runtime.serve import serve
from awa_fast.tracing import option as tracing_option
from awa_fast.worker import HandlerFunc, Registry, Worker

F = TypeVar("F", bound=HandlerFunc)


class Registration:
    """Registration shared by both clients: handlers, follow-ups, lifecycle hooks."""

    def __init__(self, dsn: str, *, transaction_pooling: bool, traces: bool = True) -> None:
        # How this client's pool and its runners connect (docs/pgbouncer.md).
        self.database = Database(dsn, pooled=transaction_pooling)
        # Its inserts' producer spans and its runners' consumer spans, with OpenTelemetry
        # set up (docs/observability.md, "Traces").
        self.traces = tracing_option(traces)
        self.handlers = Handlers(Registry(), FollowupRegistry(), HookRegistry())

    @property
    def dsn(self) -> str:
        return self.database.dsn

    def task(
        self,
        args_type: type | None = None,
        *,
        kind: str | None = None,
        queue: str = "default",
        completes_in_transaction: bool = False,
    ) -> Callable[[F], F]:
        """Register ``async def`` or plain ``def handler(job)`` for ``args_type``'s kind.
        With ``completes_in_transaction``, the handler completes each job itself with
        :meth:`~awa_fast.worker.Job.complete_in`, and returning without it fails the job."""

        def decorate(func: F) -> F:
            self.handlers.registry.add(
                func,
                args_type=args_type,
                kind=kind,
                queue=queue,
                completes_in_transaction=completes_in_transaction,
            )
            return func

        return decorate

    def worker(
        self, args_type: type | None = None, *, kind: str | None = None, queue: str = "default"
    ) -> Callable[[F], F]:
        """The Awa SDK's deprecated name for :meth:`task`, kept so code written for it runs."""
        warnings.warn(
            "client.worker() is deprecated, use client.task() instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.task(args_type, kind=kind, queue=queue)

    def periodic(
        self,
        name: str,
        cron_expr: str,
        args_type: type,
        args: object,
        **options: Unpack[PeriodicOptions],
    ) -> None:
        """Enqueue ``args`` as a job of ``args_type``'s kind at every time ``cron_expr``
        names (:mod:`awa_fast.cron`). Options: ``timezone`` ("UTC"), ``queue``,
        ``priority``, ``max_attempts``, ``tags``, ``metadata``, ``missed_fire_policy``
        ("coalesce": after downtime, only the latest missed fire; "catch_up": each).
        Validated now; the schedule is written to the database when this client starts
        handlers, and the maintenance leader enqueues its fires."""
        if name in self.handlers.schedules:
            raise ConfigError(f"periodic job {name!r} registered twice")
        self.handlers.schedules[name] = periodic_job(name, cron_expr, args_type, args, **options)

    def queue_descriptor(self, queue: str, **options: Unpack[DescriptorOptions]) -> None:
        """Describe ``queue`` for the catalog (``list_queue_descriptors``): options
        ``display_name``, ``description``, ``owner``, ``docs_url``, ``tags``, ``extra`` (a
        JSON object). Validated now; written when this client starts handlers, which must
        run ``queue`` (else :class:`ConfigError`). Declaring a queue again replaces its
        descriptor, as in the Awa SDK."""
        self.handlers.queue_descriptors[queue] = descriptor("queue", queue, **options)

    def job_kind_descriptor(self, kind: str, **options: Unpack[DescriptorOptions]) -> None:
        """Describe job kind ``kind`` (``list_job_kind_descriptors``), with the options of
        :meth:`queue_descriptor`; written when this client starts handlers. Any kind may be
        described, handled here or not."""
        self.handlers.kind_descriptors[kind] = descriptor("kind", kind, **options)

    def register(self, worker: type[Worker] | Worker) -> None:
        """Register a :class:`~awa_fast.Worker` subclass (or instance)."""
        self.handlers.registry.add_worker(worker)

    def on_event(self, trigger: type | str, hook: Hook) -> None:
        """Call ``hook(event)`` after each lifecycle event of ``trigger``'s kind commits."""
        self.handlers.hooks.add(trigger, hook)

    def on_completed_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.COMPLETED, trigger, make)

    def on_retried_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.RETRIED, trigger, make)

    def on_exhausted_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.EXHAUSTED, trigger, make)

    def on_cancelled_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.CANCELLED, trigger, make)

    def on_waiting_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.WAITING_FOR_CALLBACK, trigger, make)

    def on_rescued_enqueue(self, trigger: type | str, make: Make) -> None:
        self.handlers.followups.add(Outcome.RESCUED, trigger, make)

    def run(self, queues: QueueSpec | None = None, **config: Any) -> int:
        """Run handlers for ``queues`` in this process until SIGINT/SIGTERM."""
        return serve(self, queues, processes=None, **config)

    def serve(
        self, queues: QueueSpec | None = None, *, processes: int | None = 0, **config: Any
    ) -> int:
        """Run the multiprocess pool until SIGINT/SIGTERM (``processes`` defaults to the
        number of CPUs); returns the exit code. See :func:`awa_fast.runtime.serve.serve`."""
        return serve(self, queues, processes=processes or os.cpu_count() or 1, **config)

    def default_queues(self) -> dict[str, int]:
        """One entry per queue a handler was registered on, at the default concurrency."""
        return {h.queue: DEFAULT_CONCURRENCY for h in self.handlers.registry.handlers.values()}


def check_registered(handlers: Handlers) -> None:
    """Refuse to start what would claim nothing, before looking at its configuration, as
    the Awa SDK's ``start`` refuses it (an AwaError, in its words)."""
    if not handlers.registry.handlers:
        raise ConfigError(
            "register at least one worker before starting the runtime: a handler "
            "(client.task) or a Worker (client.register)"
        )


def check_handled(handlers: Handlers, queues: Mapping[str, int]) -> None:
    """Refuse to leave a registered handler's queue unclaimed, as the Awa SDK's ``start``
    refuses (a ValueError)."""
    registered = handlers.registry.handlers.values()
    unrun = sorted({handler.queue for handler in registered} - queues.keys())
    if unrun:
        raise ConfigError(
            f"start() must run the queues its handlers were registered on: {', '.join(unrun)} "
            "missing"
        )


# The client's own sessions (inserts, admin): autocommit, named in pg_stat_activity as
# every other part of awa-fast is.
