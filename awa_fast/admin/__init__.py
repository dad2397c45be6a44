"""Admin operations as data: each is one named statement plus how to shape its rows.

``Client`` runs them on a connection, ``AsyncClient`` awaits the same :class:`Op`, so the two
clients cannot drift apart. One module per concern; this one only gathers their names.
"""

from awa_fast.admin.callbacks import (
    ResolveResult,
    complete_external,
    fail_external,
    heartbeat_callback,
    resolve_callback,
    resume_external,
    retry_external,
)
from awa_fast.admin.catalog import (
    delete_cron_job,
    list_cron_jobs,
    list_job_kind_descriptors,
    list_queue_descriptors,
    run_cron_job_now,
)
from awa_fast.admin.dlq import (
    DlqEntry,
    bulk_move_failed_to_dlq,
    bulk_retry_from_dlq,
    dlq_depth,
    dlq_depth_by_queue,
    get_dlq_job,
    list_dlq,
    move_failed_to_dlq,
    purge_dlq,
    purge_dlq_job,
    retry_from_dlq,
)
from awa_fast.admin.dump import dump_job, dump_run
from awa_fast.admin.jobs import (
    RetryFailedResult,
    cancel,
    delete_jobs,
    discard_failed,
    find_job,
    get_job,
    get_jobs,
    list_followups,
    list_jobs,
    retry,
    retry_failed,
    unique_key_holder,
)
from awa_fast.admin.ops import Locked, Op, Rows
from awa_fast.admin.queues import (
    QueueStat,
    drain_queue,
    pause_queue,
    queue_stats,
    resume_queue,
    storage_status,
)

__all__ = [
    "DlqEntry",
    "Locked",
    "Op",
    "QueueStat",
    "ResolveResult",
    "RetryFailedResult",
    "Rows",
    "bulk_move_failed_to_dlq",
    "bulk_retry_from_dlq",
    "cancel",
    "complete_external",
    "delete_cron_job",
    "delete_jobs",
    "discard_failed",
    "dlq_depth",
    "dlq_depth_by_queue",
    "drain_queue",
    "dump_job",
    "dump_run",
    "fail_external",
    "find_job",
    "get_dlq_job",
    "get_job",
    "get_jobs",
    "heartbeat_callback",
    "list_cron_jobs",
    "list_dlq",
    "list_followups",
    "list_job_kind_descriptors",
    "list_jobs",
    "list_queue_descriptors",
    "move_failed_to_dlq",
    "pause_queue",
    "purge_dlq",
    "purge_dlq_job",
    "queue_stats",
    "resolve_callback",
    "resume_external",
    "resume_queue",
    "retry",
    "retry_external",
    "retry_failed",
    "retry_from_dlq",
    "run_cron_job_now",
    "storage_status",
    "unique_key_holder",
]
