"""awa-fast: a Postgres-backed job queue with a multiprocess worker pool and a Rust core."""

from importlib.metadata import PackageNotFoundError, version

from awa_fast import _awa as _awa  # the SDK's awa._awa, for code that reaches into it
from awa_fast import callback_contract
from awa_fast.admin import DlqEntry, QueueStat, ResolveResult, RetryFailedResult
from awa_fast.batch_ops import (
    BatchOperation,
    BatchOperationFilter,
    BatchOperationKind,
    BatchOperationPreview,
    BatchOperationState,
)
from awa_fast.client import AsyncClient
from awa_fast.client_sync import Client
from awa_fast.codec import kind_of as derive_kind
from awa_fast.db.migrate import (
    current_migration_version,
    migrate,
    migrations,
    migrations_range,
    schema_patches,
)
from awa_fast.errors import (
    AwaError,
    CallbackNotFound,
    ConfigError,
    DatabaseError,
    DatabaseUnreachable,
    JobNotFound,
    LeaseLost,
    LiveRuntimesRequireExclusiveWindow,
    QueueFull,
    RuntimeVersionFloorNotMet,
    SchemaNotMigrated,
    SerializationError,
    ServerIsStandby,
    StorageNotFinalized,
    TelemetryError,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
)
from awa_fast.lifecycle import Backoff, Event, EventType, OutcomeContext
from awa_fast.outcomes import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa_fast.paced import Paced, insert_paced_async
from awa_fast.paced_sync import insert_paced
from awa_fast.partitioned import PartitionedQueue
from awa_fast.producer import insert_async, insert_many_async
from awa_fast.producer_sync import insert, insert_many
from awa_fast.raw_client import RawClient
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.health import HealthCheck, QueueHealth
from awa_fast.telemetry import init_telemetry, shutdown_telemetry
from awa_fast.transaction import Transaction
from awa_fast.transaction_sync import SyncTransaction
from awa_fast.types import InsertRequest, JobRow, JobState, UniqueOpts
from awa_fast.worker import Job, Worker

# The installed distribution's version, which maturin takes from Cargo.toml.
try:
    __version__ = version("awa-fast")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AsyncClient",
    "AwaError",
    "Backoff",
    "BatchOperation",
    "BatchOperationFilter",
    "BatchOperationKind",
    "BatchOperationPreview",
    "BatchOperationState",
    "CallbackNotFound",
    "CallbackToken",
    "Cancel",
    "Client",
    "ConfigError",
    "DatabaseError",
    "DatabaseUnreachable",
    "DlqEntry",
    "Event",
    "EventType",
    "HealthCheck",
    "InsertRequest",
    "Job",
    "JobNotFound",
    "JobRow",
    "JobState",
    "LeaseLost",
    "LiveRuntimesRequireExclusiveWindow",
    "OutcomeContext",
    "Paced",
    "PartitionedQueue",
    "QueueFull",
    "QueueHealth",
    "QueueStat",
    "RawClient",
    "ResolveResult",
    "RetryAfter",
    "RetryFailedResult",
    "RunnerConfig",
    "RuntimeVersionFloorNotMet",
    "SchemaNotMigrated",
    "SerializationError",
    "ServerIsStandby",
    "Snooze",
    "StorageNotFinalized",
    "SyncTransaction",
    "TelemetryError",
    "TerminalError",
    "Transaction",
    "UniqueConflict",
    "UniqueOpts",
    "UnknownJobKind",
    "ValidationError",
    "WaitForCallback",
    "Worker",
    "callback_contract",
    "current_migration_version",
    "derive_kind",
    "init_telemetry",
    "insert",
    "insert_async",
    "insert_many",
    "insert_many_async",
    "insert_paced",
    "insert_paced_async",
    "migrate",
    "migrations",
    "migrations_range",
    "schema_patches",
    "shutdown_telemetry",
]
