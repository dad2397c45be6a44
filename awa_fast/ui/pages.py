"""The dashboard's pages: what each reads, through the admin package's Ops and the
dashboard's own (ui/ops.py), and which template shows it. Nothing here changes a row;
the actions are in ui/actions.py."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from awa_fast import admin, cron, validation
from awa_fast import batch_ops as batch
from awa_fast.errors import AwaError, ValidationError
from awa_fast.runtime.config import RunnerConfig
from awa_fast.types import JOB_STATES
from awa_fast.ui import ops
from awa_fast.ui.chart import DEFAULT_RANGE, RANGES, Chart, chart
from awa_fast.ui.dashboard import Dashboard
from awa_fast.ui.throughput import Throughput, Window

PAGE_SIZE = 50
BIG_CHART = {"width": 1200, "height": 140}  # in the SVG's units; the page scales it
SPARKLINE = {"width": 120, "height": 24}
# A host whose heartbeat is older than this is shown as stale: the leader's rescue takes
# hosts for dead past the same age by default.
STALE_HOST_S = RunnerConfig().heartbeat_staleness
_UNFINISHED_BATCH = ("pending", "scanning", "running", "cancelling")
_COUNTS = (  # QueueStat's counts
    "total_queued",
    "available",
    "running",
    "scheduled",
    "retryable",
    "waiting_external",
    "failed",
    "cancelled",
    "completed_last_hour",
)


def text(params: Mapping[str, str], name: str) -> str | None:
    """A query or form field, None when absent or blank."""
    value = validation.storable_text(name, params.get(name, "").strip())
    return value or None


def number(params: Mapping[str, str], name: str) -> int | None:
    value = text(params, name)
    if value is None:
        return None
    if not value.isdigit():
        raise ValidationError(name, f"must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True)
class Served:
    """How the live hosts serve a queue: their concurrency summed, and the rate limits
    (rate, burst) each applies on its own, distinct."""

    concurrency: int
    rate_limits: list[tuple[float, int]]


def served(hosts: list[ops.Host]) -> dict[str, Served]:
    """Each queue's settings over the hosts not shown as stale, from their rows."""
    concurrency: dict[str, int] = {}
    limits: dict[str, set[tuple[float, int]]] = {}
    for host in hosts:
        if host.heartbeat_age > STALE_HOST_S:
            continue
        for queue, setting in host.queues.items():
            concurrency[queue] = concurrency.get(queue, 0) + setting["concurrency"]
            limit = setting.get("rate_limit")
            limits.setdefault(queue, set()).update([] if limit is None else [tuple(limit)])
    return {queue: Served(n, sorted(limits[queue])) for queue, n in concurrency.items()}


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A queue as the overview shows it: its stats, finished jobs over the chart's window,
    its dead-letter depth, its small chart, and how the live hosts serve it (None: none
    does)."""

    stat: admin.QueueStat
    completed: int
    failed: int
    dead: int
    spark: Chart
    served: Served | None

    @property
    def failure_rate(self) -> float | None:
        done = self.completed + self.failed
        return self.failed / done if done else None


def _no_stat(queue: str) -> admin.QueueStat:
    """A queue known only by its history (no job waits or runs there)."""
    zero = dict.fromkeys(_COUNTS, 0)
    return admin.QueueStat(queue=queue, **zero, lag_seconds=None, paused=False, paused_by=None)


class Pages:
    def __init__(self, dashboard: Dashboard) -> None:
        self.dash = dashboard
        # Every page and viewer shares them: each refresh reads only the newest buckets.
        self.windows = {name: Window(*sizes) for name, sizes in RANGES.items()}

    async def _window(self, request: Request) -> tuple[str, Throughput]:
        name = request.query_params.get("range", DEFAULT_RANGE)
        if name not in RANGES:
            raise ValidationError("range", f"must be one of {', '.join(RANGES)}")
        return name, await self.windows[name].read(self.dash.read)

    async def _fleet(self) -> tuple[ops.Leader, list[ops.Host]]:
        leader = await self.dash.read(ops.leader())
        return leader, await self.dash.read(ops.hosts(leader))

    async def overview(self, request: Request) -> Response:
        (range_name, through), stats, dead, (leader, hosts), batches = await asyncio.gather(
            self._window(request),
            self.dash.read(admin.queue_stats()),
            self.dash.read(admin.dlq_depth_by_queue()),
            self._fleet(),
            self.dash.read(batch.list_operations(limit=20)),
        )
        by_queue = {stat.queue: stat for stat in stats}
        depth = dict(dead)
        settings = served(hosts)
        names = sorted({*by_queue, *through.by_queue, *depth, *settings})
        queues = [
            QueueRow(
                by_queue.get(name) or _no_stat(name),
                *through.sums(name),
                depth.get(name, 0),
                chart(through.starts, through.series(name), **SPARKLINE),
                settings.get(name),
            )
            for name in names
        ]
        context = {
            "queues": queues,
            "range": range_name,
            "ranges": list(RANGES),
            "chart": chart(through.starts, through.total(), **BIG_CHART),
            "leader": leader,
            "hosts": hosts,
            "stale_s": STALE_HOST_S,
            "batches": [b for b in batches if b.get("state") in _UNFINISHED_BATCH],
        }
        return self.dash.render(request, "overview", context)

    async def queue(self, request: Request) -> Response:
        name = text(request.query_params, "name")
        if name is None:
            raise ValidationError("name", "which queue? give ?name=")
        (range_name, through), stats, dead, (_, hosts), recent = await asyncio.gather(
            self._window(request),
            self.dash.read(admin.queue_stats()),
            self.dash.read(ops.count_dlq(kind=None, queue=name, tag=None)),
            self._fleet(),
            self.dash.read(ops.job_page(ops.JobFilter(queue=name), before=None, limit=10)),
        )
        stat = next((s for s in stats if s.queue == name), None) or _no_stat(name)
        completed, failed = through.sums(name)
        context = {
            "name": name,
            "stat": stat,
            "completed": completed,
            "failed": failed,
            "dead": dead,
            "range": range_name,
            "ranges": list(RANGES),
            "chart": chart(through.starts, through.series(name), **BIG_CHART),
            "served": served(hosts).get(name),
            "hosts": [host for host in hosts if name in host.running],
            "stale_s": STALE_HOST_S,
            "recent": recent.jobs,
        }
        return self.dash.render(request, "queue", context)

    async def jobs(self, request: Request) -> Response:
        params = request.query_params
        where = ops.JobFilter(
            state=text(params, "state"),
            kind=text(params, "kind"),
            queue=text(params, "queue"),
            tag=text(params, "tag"),
            search=text(params, "q"),
        )
        before = number(params, "before")
        if (
            where.search is not None
            and where.search.isdigit()
            and int(where.search) < validation.MAX_JOB_ID
        ):
            # A number is a job's id: that job, wherever it is.
            page = ops.JobPage(await self.dash.read(admin.get_jobs([int(where.search)])), None)
        else:
            page = await self.dash.read(ops.job_page(where, before=before, limit=PAGE_SIZE))
        context = {
            "where": where,
            "states": JOB_STATES,
            "jobs": page.jobs,
            "before": before,
            "next_before": page.next_before,
            "page_size": PAGE_SIZE,
            "queued_filter": where.search is None and where.state in (None, *batch.QUEUED_STATES),
        }
        return self.dash.render(request, "jobs", context)

    async def job(self, request: Request) -> Response:
        job_id = validation.int_in(
            "job_id", request.path_params["job_id"], 1, validation.MAX_JOB_ID
        )
        dumped, followups = await asyncio.gather(
            self.dash.read(admin.dump_job(job_id)),
            self.dash.read(admin.list_followups(job_id, limit=PAGE_SIZE)),
        )
        dump = orjson.loads(dumped)
        job = dump["job"]
        context = {
            "job": job,
            "summary": dump["summary"],
            "timeline": dump["timeline"],
            "dlq": dump.get("dlq"),
            "errors": list(reversed(job["errors"])),  # the latest attempt first
            "finished": job["state"] in ("completed", "failed", "cancelled"),
            "followups": followups,
            "page_size": PAGE_SIZE,
        }
        return self.dash.render(request, "job", context)

    async def dlq(self, request: Request) -> Response:
        params = request.query_params
        filters = {name: text(params, name) for name in ("kind", "queue", "tag")}
        before_id = number(params, "before_id")
        before_at = text(params, "before_at")
        entries = await self.dash.read(
            admin.list_dlq(
                **filters,
                before_id=before_id,
                before_dlq_at=None if before_at is None else _instant(before_at),
                limit=PAGE_SIZE,
            )
        )
        count = await self.dash.read(ops.count_dlq(**filters))
        last = entries[-1] if len(entries) == PAGE_SIZE else None
        context = {
            "filters": filters,
            "entries": entries,
            "count": count,
            "paged": before_id is not None,
            "next": None
            if last is None
            else {**filters, "before_id": last.job.id, "before_at": last.dlq_at.isoformat()},
        }
        return self.dash.render(request, "dlq", context)

    async def periodic(self, request: Request) -> Response:
        schedules = await self.dash.read(admin.list_cron_jobs())
        now = datetime.now(UTC)
        rows = [{**row, "next_fire": _next_fire(row, now)} for row in schedules]
        return self.dash.render(request, "periodic", {"schedules": rows})

    async def batches(self, request: Request) -> Response:
        operations = await self.dash.read(batch.list_operations(limit=PAGE_SIZE))
        context = {"operations": operations, "unfinished": _UNFINISHED_BATCH}
        return self.dash.render(request, "batches", context)


def _instant(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError("before_at", f"not a time: {value!r}") from None


def _next_fire(row: dict[str, Any], now: datetime) -> datetime | None:
    """When the schedule fires next (None for one that never will, or cannot be read)."""
    try:
        return cron.parse(row["cron_expr"]).next_fire(now, cron.zone(row["timezone"]))
    except AwaError:
        return None
