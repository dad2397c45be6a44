"""The runner's configuration: :class:`RunnerConfig`, and queues as callers give them
(:func:`parse_queues`). Kept apart from the runner so that what only reads settings (the
maintenance service, the CLI, the SDK's option names in :mod:`awa_fast.runtime.options`)
does not import the runtime."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from awa_fast.errors import ConfigError, ConfigTypeError
from awa_fast.lifecycle import transitions as tr
from awa_fast.maintenance.service import DEFAULTS as MAINTENANCE
from awa_fast.maintenance.service import MaintenanceConfig
from awa_fast.runtime.committer import CommitterConfig
from awa_fast.validation import MAX_NAME_LENGTH, MAX_SECONDS, check_rate_limit

DEFAULT_CONCURRENCY = 100
MIN_DESCRIPTOR_RETENTION_BEATS = 4  # the shortest descriptor retention, in heartbeats
QueueSpec = Mapping[str, int] | Sequence[tuple[str, int] | Mapping[str, Any] | str]
COMMITTER = CommitterConfig()


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    """Tuning with named defaults, validated once."""

    # Each claim waits for its commit's fsync, a few milliseconds in which its connection
    # does nothing: up to `claimers` claims run at once, each on its own connection, so
    # one flushes while the next is planned, executed and dispatched (only when there is
    # news to claim; see Claimer.loop). The batch bounds each claim; a claim waits
    # until half a batch (at most half the queue's capacity) is free (Claimer.reserve).
    claim_batch: int = 500
    claimers: int = 2
    # Jobs each worker holds per queue beyond those it runs, claimed ahead so that a worker
    # that finishes one starts the next without waiting for a claim (None: set by each
    # worker from its pace, awa_fast.runtime.prefetch; 0: none). Weighted mode holds none:
    # see held_ahead.
    prefetch: int | None = None
    poll_interval: float = 1.0
    # A claim that finds a queue drained, with capacity to spare, leaves a standby claim
    # there (awa_fast.runtime.claim.standby): the next job inserted into the queue starts in its
    # inserting transaction, without a durable claim of its own.
    standby: bool = True
    promote_interval: float = MAINTENANCE.promoter.interval
    promote_batch: int = MAINTENANCE.promoter.batch
    heartbeat_interval: float = 5.0
    deadline: float = 600.0
    # The committer's batches (awa_fast.runtime.committer.CommitterConfig): a backlog grows
    # the batch up to commit_batch_max (benches/RESULTS.md, "Design measurements").
    commit_batch: int = COMMITTER.batch
    commit_delay: float = COMMITTER.delay
    commit_batch_max: int = COMMITTER.batch_max
    sync_threads: int = 32
    shutdown_timeout: float = 30.0
    backoff: tr.Backoff = field(default_factory=tr.Backoff)
    max_jobs_per_worker: int | None = None
    max_worker_memory_mb: float | None = None
    election_interval: float = MAINTENANCE.election_interval
    rescue_interval: float = MAINTENANCE.rescuer.interval
    # The per-row sweeps read all of jobs_hot: the attempts no dead host accounts for
    # (awa_fast/db/sql/maintenance.sql, job_select_stale) wait for them this long at most.
    backstop_interval: float = MAINTENANCE.rescuer.backstop_interval
    rescue_batch: int = MAINTENANCE.rescuer.batch
    heartbeat_staleness: float = MAINTENANCE.rescuer.heartbeat_staleness
    deadline_grace: float = MAINTENANCE.rescuer.deadline_grace
    cleanup_interval: float = MAINTENANCE.cleaner.interval
    cleanup_batch: int = MAINTENANCE.cleaner.batch
    completed_retention: float = MAINTENANCE.cleaner.completed_retention
    failed_retention: float = MAINTENANCE.cleaner.failed_retention
    # A queue or kind descriptor no host has refreshed for this long is deleted by the
    # leader (0: never; the Awa SDK's descriptor_retention_days). Each host refreshes its
    # own every descriptor_refresh_interval, or more often for a short retention
    # (descriptor_refresh_every), so descriptors go only with the code that declared them.
    descriptor_retention: float = MAINTENANCE.descriptor_cleaner.retention
    descriptor_refresh_interval: float = 3600.0
    vacuum_interval: float = MAINTENANCE.vacuum.interval
    cron_interval: float = (
        MAINTENANCE.periodic.interval
    )  # how often the leader enqueues periodic jobs that fell due
    # How often the leader folds the counters' deltas into their rollup
    # (awa_fast.maintenance.counts): what a count reads beyond the rollup is at most about
    # two intervals of deltas.
    count_interval: float = MAINTENANCE.counts.interval
    vacuum_dead_tuples: int = MAINTENANCE.vacuum.dead_tuples
    # Durable batch operations (awa_fast.maintenance.batch_ops): how often the leader looks for
    # one, and how many jobs each of its transactions changes. While one has work left,
    # its chunks follow each other at the promote pace instead.
    batch_interval: float = MAINTENANCE.batch_ops.interval
    batch_chunk: int = MAINTENANCE.batch_ops.chunk
    dlq: bool = False
    dlq_queues: Mapping[str, bool] = field(default_factory=dict)
    # queue -> seconds an attempt there may run; None: no deadline (the Awa SDK's
    # deadline_duration_ms=0), an attempt's deadline_at is then NULL unless the job has one
    queue_deadlines: Mapping[str, float | None] = field(default_factory=dict)
    queue_retention: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # queue -> (max_rate jobs/s, burst) this runner may start (awa_fast.runtime.claim.ratelimit)
    queue_rate_limits: Mapping[str, tuple[float, int]] = field(default_factory=dict)
    # The Awa SDK's weighted mode (awa_fast.runtime.claim.shares): this runner starts at most
    # global_max_workers attempts; queue -> (min_workers, weight), each queue's guaranteed
    # minimum and its weight in sharing the rest.
    global_max_workers: int | None = None
    queue_weights: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # queue -> the most jobs one claim takes there (claim_batch for the others)
    queue_claim_batches: Mapping[str, int] = field(default_factory=dict)
    # queue -> seconds after which a waiting job is claimed as if a priority higher, and
    # again after each further interval (the SDK's priority_aging_interval_ms)
    queue_aging: Mapping[str, float] = field(default_factory=dict)
    # Serve /metrics and /health on 127.0.0.1 at this port (awa_fast.runtime.metrics).
    metrics_port: int | None = None
    # The database URL reaches Postgres through a transaction pooler (PgBouncer's
    # pool_mode=transaction): no prepared statements or session settings there, and LISTEN
    # only on direct_dsn, Postgres itself; without it claiming polls (docs/pgbouncer.md).
    # True for every runner of a client made with transaction_pooling=True.
    transaction_pooling: bool = False
    # A consumer span around each attempt's handler, with OpenTelemetry set up
    # (awa_fast.tracing; off for every runner of a client made with traces=False).
    traces: bool = True
    direct_dsn: str | None = field(default=None, repr=False)  # it may hold a password
    # A maintenance-only host (awa_fast.runtime.maintenance_host): leader election and the
    # maintenance services, its row and heartbeat, metrics and health; no claims, workers,
    # listener or committer, and no queues. run_maintenance=False keeps a job host out of
    # elections, for deployments whose maintenance-only hosts do the leader's work.
    maintenance_only: bool = False
    run_maintenance: bool = True

    def maintenance(self) -> MaintenanceConfig:
        """The maintenance services' configurations, from the settings that name them."""
        m = MAINTENANCE
        return MaintenanceConfig(
            election_interval=self.election_interval,
            promoter=replace(m.promoter, interval=self.promote_interval, batch=self.promote_batch),
            rescuer=replace(
                m.rescuer,
                interval=self.rescue_interval,
                backstop_interval=self.backstop_interval,
                batch=self.rescue_batch,
                heartbeat_staleness=self.heartbeat_staleness,
                deadline_grace=self.deadline_grace,
                backoff=self.backoff,
                dlq=self.dlq_params(),
            ),
            cleaner=replace(
                m.cleaner,
                interval=self.cleanup_interval,
                batch=self.cleanup_batch,
                completed_retention=self.completed_retention,
                failed_retention=self.failed_retention,
                queue_retention=self.queue_retention,
            ),
            descriptor_cleaner=replace(
                m.descriptor_cleaner,
                interval=self.cleanup_interval,
                retention=self.descriptor_retention,
            ),
            vacuum=replace(
                m.vacuum, interval=self.vacuum_interval, dead_tuples=self.vacuum_dead_tuples
            ),
            periodic=replace(m.periodic, interval=self.cron_interval),
            counts=replace(m.counts, interval=self.count_interval),
            batch_ops=replace(m.batch_ops, interval=self.batch_interval, chunk=self.batch_chunk),
        )

    def committer(self) -> CommitterConfig:
        """The committer's configuration, from the settings that name it."""
        return replace(
            COMMITTER,
            batch=self.commit_batch,
            batch_max=self.commit_batch_max,
            delay=self.commit_delay,
            retry_backoff=self.backoff,
            dlq=self.dlq_params(),
        )

    def dlq_params(self) -> dict[str, Any]:
        """The DLQ policy as job_rescue_many's parameters (it may rescue any queue's jobs)."""
        return {
            "dlq_all": self.dlq,
            "no_dlq": [q for q, on in self.dlq_queues.items() if not on],
            "dlq": [q for q, on in self.dlq_queues.items() if on],
        }

    def deadline_for(self, queue: str) -> float | None:
        """Seconds an attempt of ``queue`` may run, None for no limit (a job's own deadline
        overrides it)."""
        return self.queue_deadlines.get(queue, self.deadline)

    def dlq_for(self, queues: Sequence[str]) -> frozenset[str]:
        """The queues whose failures go to the dead-letter queue (per-queue overrides of
        the ``dlq`` default)."""
        return frozenset(q for q in queues if self.dlq_queues.get(q, self.dlq))

    def descriptor_refresh_every(self) -> float:
        """Seconds between refreshes of a host's descriptors: at most a quarter of the
        retention, so that a live host refreshes each several times before the leader
        could take it for abandoned."""
        if not self.descriptor_retention:
            # Refresh anyway: the leader applies its own retention, not this host's.
            return self.descriptor_refresh_interval
        return min(self.descriptor_refresh_interval, self.descriptor_retention / 4)

    def __post_init__(self) -> None:
        for name in (
            "claim_batch",
            "claimers",
            "promote_batch",
            "commit_batch",
            "sync_threads",
            "rescue_batch",
            "cleanup_batch",
            "batch_chunk",
        ):
            count(name, getattr(self, name), low=1)
        prefetch = self.prefetch
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
        ):
            raise ConfigError(f"prefetch must be None or an integer >= 0, got {prefetch!r}")
        if self.commit_batch_max < self.commit_batch:
            raise ConfigError(
                f"commit_batch_max must be >= commit_batch ({self.commit_batch}), "
                f"got {self.commit_batch_max}"
            )
        for name in (
            "poll_interval",
            "promote_interval",
            "heartbeat_interval",
            "deadline",
            "commit_delay",
            "shutdown_timeout",
            "election_interval",
            "rescue_interval",
            "backstop_interval",
            "heartbeat_staleness",
            "deadline_grace",
            "cleanup_interval",
            "completed_retention",
            "failed_retention",
            "descriptor_refresh_interval",
            "vacuum_interval",
            "cron_interval",
            "count_interval",
            "batch_interval",
        ):
            _seconds(name, getattr(self, name))
        for name in (
            "standby",
            "transaction_pooling",
            "traces",
            "maintenance_only",
            "run_maintenance",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.maintenance_only and not self.run_maintenance:
            raise ConfigError(
                "maintenance_only=True with run_maintenance=False would run nothing: a "
                "maintenance-only host runs the maintenance"
            )
        self._check_direct_dsn()
        self._check_descriptor_retention()
        # stored as checked: (float rate, int burst), whatever sequence the caller gave
        checked = {q: check_rate_limit(q, limit) for q, limit in self.queue_rate_limits.items()}
        object.__setattr__(self, "queue_rate_limits", checked)
        self._check_weights()
        self._check_worker_limits()
        self._check_queue_settings()
        port = self.metrics_port
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
        ):
            raise ConfigError(f"metrics_port must be None or a port in 1..65535, got {port!r}")

    def _check_queue_settings(self) -> None:
        """Each queue's own settings, as strictly as the defaults they stand in for."""
        for queue, seconds in self.queue_deadlines.items():
            if seconds is not None:
                _seconds(f"queue {queue!r}: deadline", seconds)
        for queue, kept in self.queue_retention.items():
            if not isinstance(kept, tuple | list) or len(kept) != 2:
                raise ConfigTypeError(
                    f"queue {queue!r}: retention must be (completed, failed) seconds, got {kept!r}"
                )
            for what, seconds in zip(("completed", "failed"), kept, strict=True):
                _seconds(f"queue {queue!r}: {what} retention", seconds)
        for queue, seconds in self.queue_aging.items():
            _seconds(f"queue {queue!r}: priority aging interval", seconds)
        for queue, batch in self.queue_claim_batches.items():
            count(f"queue {queue!r}: claim batch", batch, low=1)

    def _check_worker_limits(self) -> None:
        """A limit below one job or at no memory would recycle every worker after each job
        or at each look: the pool would spend itself forking."""
        jobs = self.max_jobs_per_worker
        if jobs is not None:
            count("max_jobs_per_worker", jobs, low=1)
        memory = self.max_worker_memory_mb
        if memory is not None and (
            isinstance(memory, bool)
            or not isinstance(memory, int | float)
            or not 0 < memory < math.inf
        ):
            raise ConfigError(
                f"max_worker_memory_mb must be None or a number of megabytes > 0, got {memory!r}"
            )

    def _check_direct_dsn(self) -> None:
        """A direct URL only means something behind a pooler: given alone, it would leave
        the caller believing the pooler was taken care of."""
        direct = self.direct_dsn
        if direct is None:
            return
        if not isinstance(direct, str) or not direct:
            raise ConfigError("direct_dsn must be None or a non-empty connection string")
        if not self.transaction_pooling:
            raise ConfigError(
                "direct_dsn (serve --direct-database-url) is for a database URL behind a "
                "transaction pooler: set transaction_pooling=True (serve --pgbouncer) too"
            )

    @property
    def held_ahead(self) -> int | None:
        """Each worker's prefetch per queue (None: sized from its share). Weighted mode
        holds none: a held job would be a place in the global pool that one queue keeps
        from the others while it waits."""
        return 0 if self.global_max_workers is not None else self.prefetch

    def _check_weights(self) -> None:
        """A global pool large enough for every queue's guaranteed minimum, and no
        prefetch asked of it (held_ahead)."""
        total = self.global_max_workers
        if total is not None:
            count("global_max_workers", total, low=1)
            minimums = sum(low for low, _ in self.queue_weights.values())
            if minimums > total:
                raise ConfigError(
                    f"sum of min_workers ({minimums}) exceeds global_max_workers ({total})"
                )
            if self.prefetch:
                raise ConfigError(
                    f"prefetch={self.prefetch} with global_max_workers: weighted mode holds "
                    "no jobs ahead (each would keep a place in the global pool from the "
                    "other queues); leave prefetch unset or 0"
                )

    def _check_descriptor_retention(self) -> None:
        """0 (never delete) or a finite number of seconds long enough for live hosts to
        refresh their descriptors in it: refreshes ride on heartbeats, so a retention of
        a few heartbeat intervals would delete the descriptors of hosts still running."""
        value = self.descriptor_retention
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not 0 <= value < math.inf:
            raise ConfigError(
                "descriptor_retention must be a finite number of seconds >= 0 "
                f"(0 disables retention), got {value!r}"
            )
        floor = MIN_DESCRIPTOR_RETENTION_BEATS * self.heartbeat_interval
        if 0 < value < floor:
            raise ConfigError(
                f"descriptor_retention must be 0 or at least {MIN_DESCRIPTOR_RETENTION_BEATS} "
                f"heartbeat intervals ({floor:g} s), got {value:g} s: hosts refresh their "
                "descriptors on heartbeats"
            )


# The keys of a queue given as a dict, as the Awa SDK's queue configs have them: its
# concurrency here (max_workers; min_workers and weight in weighted mode); the others
# become RunnerConfig's per-queue settings (awa_fast.runtime.options.queue_settings).
QUEUE_KEYS = frozenset(
    {
        "name",
        "max_workers",
        "min_workers",
        "weight",
        "rate_limit",
        "deadline_duration_ms",
        "retention",
        "claim_batch_size",
        "claimers",
        "priority_aging_interval_ms",
    }
)
WEIGHTED_KEYS = frozenset({"min_workers", "weight"})


def _seconds(what: str, value: object) -> float:
    """A duration setting: a TypeError for a non-number (a bool too), and a ConfigError
    outside (0, MAX_SECONDS)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigTypeError(f"{what} must be a number of seconds, got {value!r}")
    if not 0 < value < MAX_SECONDS:
        raise ConfigError(f"{what} must be > 0 seconds and below {MAX_SECONDS:g}, got {value!r}")
    return value


def count(what: str, value: object, *, low: int) -> int:
    """An integer setting: a TypeError for another type (a bool too), as the Awa SDK
    raises one, and a ConfigError below ``low``."""
    number = _integer(what, value)
    if number < low:
        raise ConfigError(f"{what} must be an integer >= {low}, got {value!r}")
    return number


def above_zero(what: str, value: object, *, queue: str | None = None) -> int:
    """A setting the Awa SDK takes as an integer above 0 (a weight, a claim batch, a
    storage slot count), refused in its words ("weight must be > 0") and then which
    value and, for a queue's own, which queue."""
    where = "" if queue is None else f" for queue {queue!r}"
    number = _integer(what, value, where=where)
    if number < 1:
        raise ConfigError(f"{what} must be > 0, got {value!r}{where}")
    return number


def _integer(what: str, value: object, *, where: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigTypeError(f"{what} must be an integer, got {value!r}{where}")
    return value


def parse_queues(
    queues: QueueSpec,
    *,
    default_concurrency: int = DEFAULT_CONCURRENCY,
    config: RunnerConfig | None = None,
) -> dict[str, int]:
    """``{"email": 64}``, ``[("email", 64)]``, ``[{"name": "email", "max_workers": 64}]`` or
    ``["email"]`` → ``{"email": 64}``; bad input raises :class:`ConfigError` naming it. In
    ``config``'s weighted mode a queue is a dict of min_workers and weight, and may run up
    to its minimum plus what the minimums leave of the global pool."""
    if config is not None and config.global_max_workers is not None:
        return _weighted_queues(queues, config.global_max_workers, config.queue_weights)
    items: list[tuple[object, object]] = []
    if isinstance(queues, Mapping):
        items = list(queues.items())
    else:
        for entry in queues:
            if isinstance(entry, str):
                items.append((entry, default_concurrency))
            elif isinstance(entry, Mapping):
                _check_queue_keys(entry, weighted=False)
                items.append((entry.get("name"), entry.get("max_workers", default_concurrency)))
            elif isinstance(entry, tuple | list):
                items.append(tuple(entry))  # type: ignore[arg-type]
            else:
                raise ConfigTypeError(
                    f"a queue must be a name, a (name, max_workers) tuple or a dict, got {entry!r}"
                )
    parsed: dict[str, int] = {}
    for name, concurrency in items:
        _add(parsed, name, count(f"queue {name!r}: concurrency", concurrency, low=1))
    if not parsed:
        raise ConfigError("at least one queue is required")
    return parsed


def _weighted_queues(
    queues: QueueSpec, total: int, weights: Mapping[str, tuple[int, int]]
) -> dict[str, int]:
    """Weighted mode's queues, each at its ceiling: its minimum and the shared pool."""
    entries = list(queues.items()) if isinstance(queues, Mapping) else list(queues)
    others = [entry for entry in entries if not isinstance(entry, Mapping)]
    if others or not entries:
        raise ConfigError(
            "tuple queue config is not supported with global_max_workers; use dict form "
            f"with min_workers/weight: got {others[0] if others else queues!r}"
        )
    pool = total - sum(low for low, _ in weights.values())
    parsed: dict[str, int] = {}
    for entry in entries:
        assert isinstance(entry, Mapping)
        _check_queue_keys(entry, weighted=True)
        name = entry.get("name")
        _add(parsed, name, weights.get(str(name), (0, 1))[0] + pool)
    return parsed


def _add(parsed: dict[str, int], name: object, concurrency: int) -> None:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
        raise ConfigError(f"queue name must be a non-empty string, got {name!r}")
    if name in parsed:
        raise ConfigError(f"queue {name!r} configured more than once")
    parsed[name] = concurrency


def _check_queue_keys(entry: Mapping[str, Any], *, weighted: bool) -> None:
    name = entry.get("name")
    unknown = sorted(map(str, entry.keys() - QUEUE_KEYS))
    if unknown:
        raise ConfigError(
            f"queue {name!r}: unknown key(s) {', '.join(unknown)}; a queue dict takes "
            f"{', '.join(sorted(QUEUE_KEYS))}"
        )
    if {"max_workers", "min_workers"} <= entry.keys():
        raise ConfigError(
            "use max_workers for hard-reserved mode or min_workers for weighted mode, not "
            f"both: queue {name!r} gives both"
        )
    if weighted and "max_workers" in entry:
        raise ConfigError(
            f"queue {name!r}: max_workers is for hard-reserved mode; with global_max_workers "
            "(weighted mode) a queue runs its min_workers and a share of the pool by weight"
        )
    given = sorted(WEIGHTED_KEYS & entry.keys())
    if not weighted and given:
        raise ConfigError(
            f"queue {name!r}: {', '.join(given)} need global_max_workers (the SDK's "
            "weighted mode); without it, give the queue max_workers"
        )
