"""The dashboard's own page reads, as admin Ops: what no client call reads, each one
statement of awa_fast/db/sql/ui.sql, so that the dashboard runs them as it runs the admin
package's. Its actions are all the admin package's."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from awa_fast import validation
from awa_fast.admin import dlq_depth
from awa_fast.admin.ops import Op, Rows
from awa_fast.db.queries import Q
from awa_fast.errors import ValidationError
from awa_fast.types import JOB_STATES, JobRow

# What one page of the jobs list reads at most: job rows down the primary keys, and packs
# (of up to 512 jobs each). A filter that matches little shows a short page, then the next.
PAGE_SCAN = 5000
PAGE_PACKS = 8


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The jobs list's filters, each None for any; ``search`` is text the args hold."""

    state: str | None = None
    kind: str | None = None
    queue: str | None = None
    tag: str | None = None
    search: str | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in JOB_STATES:
            raise ValidationError("state", f"must be one of {', '.join(JOB_STATES)}")


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of jobs, newest first, and the cursor of the next (None: this was the last)."""

    jobs: list[JobRow]
    next_before: int | None


def job_page(
    where: JobFilter, *, before: int | None, limit: int, scan: int = PAGE_SCAN
) -> Op[JobPage]:
    """The jobs matching ``where`` below the id ``before``, at most ``limit`` of them: a
    keyset page whose read is bounded by ``scan`` rows however rare the matches."""
    if before is not None:
        validation.int_in("before", before, 1, validation.MAX_JOB_ID)
    params = {
        "before": before,
        "scan": validation.int_in("scan", scan, 1, 10**6),
        "packs": PAGE_PACKS,
        "limit": validation.int_in("limit", limit, 1, 1000),
        "state": where.state,
        "kind": where.kind,
        "queue": where.queue,
        "tag": where.tag,
        "search": where.search,
    }

    def shape(rows: Rows) -> JobPage:
        jobs = [JobRow.from_row(row) for row in rows if row["id"] is not None]
        floor = rows[0]["window_floor"]
        if len(jobs) == limit:
            return JobPage(jobs, jobs[-1].id)
        return JobPage(jobs, floor or None)

    return Op(Q.job_list_page, params, shape)


def _count(rows: Rows) -> int:
    return int(rows[0]["count"])


# A count by queue alone is read from the counters (migration 0025); one by kind or tag,
# which they do not keep, counts the rows an action would take.


def count_failed(*, kind: str | None, queue: str | None) -> Op[int]:
    """The failed jobs ``retry_failed`` and ``discard_failed`` would take."""
    if kind is None:
        return Op(Q.state_count, {"state": "failed", "queue": queue}, _count)
    return Op(Q.job_count_failed, {"kind": kind, "queue": queue}, _count)


def count_dlq(*, kind: str | None, queue: str | None, tag: str | None) -> Op[int]:
    """The dead-lettered jobs a bulk retry or purge with these filters would take."""
    if kind is None and tag is None:
        return dlq_depth(queue=queue)
    return Op(Q.dlq_count, {"kind": kind, "queue": queue, "tag": tag}, _count)


Counts = dict[str, tuple[int, int]]  # queue -> (completed, failed)


@dataclass(frozen=True, slots=True)
class Finished:
    """Jobs finished per bucket (its start, in epoch seconds), and the database's clock."""

    now: float
    buckets: dict[float, Counts]


def finished(*, since: float | None, window_s: int, bucket_s: int) -> Op[Finished]:
    """Completed and failed jobs per ``bucket_s`` and queue since the epoch second
    ``since`` (None: over the last ``window_s`` seconds)."""
    params = {
        "since": None if since is None else datetime.fromtimestamp(since, UTC),
        "window_s": window_s,
        "bucket_s": bucket_s,
    }

    def shape(rows: Rows) -> Finished:
        buckets: dict[float, Counts] = {}
        for row in rows:
            buckets.setdefault(row["bucket"], {})[row["queue"]] = (row["completed"], row["failed"])
        # With nothing finished, which buckets are empty does not depend on whose clock.
        return Finished(rows[0]["now"] if rows else time.time(), buckets)

    return Op(Q.job_throughput, params, shape)


@dataclass(frozen=True, slots=True)
class Host:
    """A supervisor's row in awa_fast.hosts: its heartbeat's age in seconds, how it serves
    each queue (runtime/host/row.py's QueueSettings), its running attempts by queue, and
    whether it holds the leader's term."""

    id: int
    name: str
    started_at: datetime
    heartbeat_age: float
    queues: dict[str, dict[str, Any]]
    running: dict[str, int]
    leader: bool


@dataclass(frozen=True, slots=True)
class Leader:
    term: int
    holder: str | None
    expires_at: datetime | None  # None before the first term
    live: bool


def leader() -> Op[Leader]:
    return Op(Q.leader_get, {}, lambda rows: Leader(**rows[0]))


def hosts(current: Leader) -> Op[list[Host]]:
    """Every host, the one holding ``current``'s live term marked as the leader."""

    def shape(rows: Rows) -> list[Host]:
        return [_host(row, current) for row in rows]

    return Op(Q.host_list, {}, shape)


def _host(row: dict[str, Any], current: Leader) -> Host:
    return Host(
        id=row["id"],
        name=row["name"],
        started_at=row["started_at"],
        heartbeat_age=row["heartbeat_age"],
        queues=dict(row["queues"]),
        running=dict(row["running"]),
        leader=current.live and holds(row["name"], current.holder),
    )


def holds(host_name: str, holder: str | None) -> bool:
    """Whether the leader's ``holder`` is the process of ``host_name``: a host is named
    "machine:pid" (runtime/host/row.py), a holder "machine pid PID id" (maintenance/leader.py)."""
    machine, _, pid = host_name.rpartition(":")
    return holder is not None and holder.startswith(f"{machine} pid {pid} ")
