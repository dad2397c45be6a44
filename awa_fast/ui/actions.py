"""The dashboard's actions, as data: each first shows what it would touch (a preview
count, a sample, read by the admin package or the dashboard's own ui/ops.py) and asks,
then acts through an admin Op or a durable batch operation, and logs who did it.

Every action is a POST to ``/actions/NAME`` carrying the form's CSRF token; without
``confirm=yes`` it changes nothing and answers with the question.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from awa_fast import admin, validation
from awa_fast import batch_ops as batch
from awa_fast.admin import Op
from awa_fast.errors import UniqueConflict, ValidationError
from awa_fast.types import JobRow
from awa_fast.ui import ops
from awa_fast.ui.dashboard import Dashboard
from awa_fast.ui.pages import number, text

log = logging.getLogger("awa_fast.ui")
MAX_SELECTED = 1000  # jobs one action takes by id (a page shows 50)


@dataclass(frozen=True, slots=True)
class Target:
    """What an action's form names: jobs by id, or a queue, kind, tag, schedule or
    batch operation, and for a batch operation what it sets."""

    ids: tuple[int, ...] = ()
    queue: str | None = None
    kind: str | None = None
    tag: str | None = None
    state: str | None = None
    name: str | None = None
    priority: int | None = None
    to_queue: str | None = None

    @classmethod
    def of(cls, form: FormData) -> Target:
        ids = tuple(_id(value) for value in form.getlist("id"))
        if len(ids) > MAX_SELECTED:
            raise ValidationError("id", f"at most {MAX_SELECTED} jobs at once")
        values = {key: value for key, value in form.items() if isinstance(value, str)}
        names = {name: text(values, name) for name in ("queue", "kind", "tag", "state", "name")}
        priority, to_queue = number(values, "priority"), text(values, "to_queue")
        return cls(ids=ids, **names, priority=priority, to_queue=to_queue)

    def described(self) -> dict[str, Any]:
        """The fields given, for the log line."""
        return {k: v for k, v in asdict(self).items() if v not in (None, ())}

    def batch_filter(self) -> batch.BatchOperationFilter:
        """The filters as a batch operation takes them: only those given."""
        where = batch.BatchOperationFilter()
        for key in ("kind", "queue", "tag", "state"):
            value = getattr(self, key)
            if value is not None:
                where[key] = value
        return where


def _id(value: object) -> int:
    if not isinstance(value, str) or not value.isdigit():
        raise ValidationError("id", f"not a job id: {value!r}")
    return validation.int_in("id", int(value), 1, validation.MAX_JOB_ID)


@dataclass(frozen=True, slots=True)
class Preview:
    """What the confirmation page shows: the question, how many jobs the action would
    touch now (None when it touches none), and some of them."""

    question: str
    count: int | None = None
    jobs: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Action:
    label: str
    preview: Callable[[Dashboard, Target], Awaitable[Preview]]
    perform: Callable[[Dashboard, Target, str], Awaitable[str]]
    danger: bool = False


def _row(job: JobRow) -> dict[str, Any]:
    return {"id": job.id, "kind": job.kind, "queue": job.queue, "state": str(job.state)}


def _need(value: str | None, name: str) -> str:
    if value is None:
        raise ValidationError(name, "this action needs it")
    return value


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _scope(target: Target) -> str:
    """The filters of a bulk action in words: 'of queue "x", kind "y"'."""
    given = [
        f'{n} "{v}"'
        for n, v in (("queue", target.queue), ("kind", target.kind), ("tag", target.tag))
        if v is not None
    ]
    return f" of {', '.join(given)}" if given else ""


# ---- jobs by id -------------------------------------------------------------------------


def _by_id(verb: str) -> Callable[[Dashboard, Target], Awaitable[Preview]]:
    async def preview(dash: Dashboard, target: Target) -> Preview:
        if not target.ids:
            raise ValidationError("id", "select at least one job")
        jobs = await dash.run(admin.get_jobs(target.ids))
        return Preview(
            f"{verb} {_plural(len(target.ids), 'job')}?", len(jobs), [_row(j) for j in jobs]
        )

    return preview


async def _revive_each(
    dash: Dashboard, target: Target, revive: Callable[[int], Op[int | None]]
) -> tuple[int, str]:
    """Revive the jobs one by one: how many came back, and a note on any that a live job
    holding the same unique key kept where they were."""
    revived = held = 0
    for job_id in target.ids:
        try:
            revived += await dash.run(revive(job_id)) is not None
        except UniqueConflict:
            held += 1
    return revived, f"; {held} held off by a live job with the same unique key" if held else ""


async def _retry(dash: Dashboard, target: Target, actor: str) -> str:
    retried, note = await _revive_each(dash, target, admin.retry)
    return f"Retried {retried} of {_plural(len(target.ids), 'job')}{note}."


async def _cancel(dash: Dashboard, target: Target, actor: str) -> str:
    cancelled = sum([await dash.run(admin.cancel(job_id)) for job_id in target.ids])
    return f"Cancelled {cancelled} of {_plural(len(target.ids), 'job')}."


async def _delete(dash: Dashboard, target: Target, actor: str) -> str:
    deleted = await dash.run(admin.delete_jobs(target.ids))
    return f"Deleted {len(deleted)} of {_plural(len(target.ids), 'job')} (running jobs stay)."


# ---- failed jobs by filter --------------------------------------------------------------


async def _retry_failed_preview(dash: Dashboard, target: Target) -> Preview:
    count = await dash.run(ops.count_failed(kind=target.kind, queue=target.queue))
    return Preview(f"Retry every failed job{_scope(target)}?", count)


async def _retry_failed(dash: Dashboard, target: Target, actor: str) -> str:
    result = await dash.run(admin.retry_failed(kind=target.kind, queue=target.queue))
    return f"Retried {len(result.jobs)} of {_plural(result.matched, 'failed job')}."


async def _discard_failed_preview(dash: Dashboard, target: Target) -> Preview:
    kind = _need(target.kind, "kind")
    count = await dash.run(ops.count_failed(kind=kind, queue=None))
    return Preview(f'Delete every failed job of kind "{kind}", in every queue?', count)


async def _discard_failed(dash: Dashboard, target: Target, actor: str) -> str:
    deleted = await dash.run(admin.discard_failed(_need(target.kind, "kind")))
    return f"Deleted {_plural(deleted, 'failed job')}."


# ---- queues -----------------------------------------------------------------------------


def _queue_question(question: str) -> Callable[[Dashboard, Target], Awaitable[Preview]]:
    async def preview(dash: Dashboard, target: Target) -> Preview:
        return Preview(question.format(queue=_need(target.queue, "queue")))

    return preview


async def _pause(dash: Dashboard, target: Target, actor: str) -> str:
    await dash.run(admin.pause_queue(_need(target.queue, "queue"), paused_by=actor))
    return f'Paused queue "{target.queue}".'


async def _resume(dash: Dashboard, target: Target, actor: str) -> str:
    await dash.run(admin.resume_queue(_need(target.queue, "queue")))
    return f'Resumed queue "{target.queue}".'


async def _drain_preview(dash: Dashboard, target: Target) -> Preview:
    queue = _need(target.queue, "queue")
    stat = next((s for s in await dash.run(admin.queue_stats()) if s.queue == queue), None)
    waiting = 0 if stat is None else stat.total_queued - stat.running
    return Preview(f'Cancel every job waiting in queue "{queue}"? Running jobs go on.', waiting)


async def _drain(dash: Dashboard, target: Target, actor: str) -> str:
    cancelled = await dash.run(admin.drain_queue(_need(target.queue, "queue")))
    return f'Cancelled {_plural(cancelled, "job")} of queue "{target.queue}".'


# ---- the dead-letter queue --------------------------------------------------------------


def _dlq_by_id(verb: str) -> Callable[[Dashboard, Target], Awaitable[Preview]]:
    async def preview(dash: Dashboard, target: Target) -> Preview:
        if not target.ids:
            raise ValidationError("id", "select at least one entry")
        entries = [await dash.run(admin.get_dlq_job(job_id)) for job_id in target.ids]
        found = [_row(entry.job) for entry in entries if entry is not None]
        question = f"{verb} {_plural(len(target.ids), 'dead-lettered job')}?"
        return Preview(question, len(found), found)

    return preview


async def _dlq_retry(dash: Dashboard, target: Target, actor: str) -> str:
    revived, note = await _revive_each(dash, target, admin.retry_from_dlq)
    return f"Moved {revived} of {_plural(len(target.ids), 'job')} back to available{note}."


async def _dlq_purge(dash: Dashboard, target: Target, actor: str) -> str:
    purged = sum([await dash.run(admin.purge_dlq_job(job_id)) for job_id in target.ids])
    return f"Deleted {purged} of {_plural(len(target.ids), 'dead-lettered job')}."


def _dlq_matching(verb: str) -> Callable[[Dashboard, Target], Awaitable[Preview]]:
    async def preview(dash: Dashboard, target: Target) -> Preview:
        count = await dash.run(ops.count_dlq(kind=target.kind, queue=target.queue, tag=target.tag))
        return Preview(f"{verb} every dead-lettered job{_scope(target)}?", count)

    return preview


async def _dlq_retry_matching(dash: Dashboard, target: Target, actor: str) -> str:
    # allow_all: an empty filter was asked for by name, after its count was shown.
    revived = await dash.run(
        admin.bulk_retry_from_dlq(
            kind=target.kind, queue=target.queue, tag=target.tag, allow_all=True
        )
    )
    return f"Moved {_plural(revived, 'dead-lettered job')} back to available."


async def _dlq_purge_matching(dash: Dashboard, target: Target, actor: str) -> str:
    purged = await dash.run(
        admin.purge_dlq(kind=target.kind, queue=target.queue, tag=target.tag, allow_all=True)
    )
    return f"Deleted {_plural(purged, 'dead-lettered job')}."


# ---- periodic jobs and batch operations -------------------------------------------------


async def _run_now_preview(dash: Dashboard, target: Target) -> Preview:
    name = _need(target.name, "name")
    return Preview(f'Insert a job of periodic job "{name}" now? Its schedule stays as it is.')


async def _run_now(dash: Dashboard, target: Target, actor: str) -> str:
    job_id = await dash.run(admin.run_cron_job_now(_need(target.name, "name"), actor=actor))
    if job_id is None:
        raise ValidationError("name", f"no periodic job named {target.name!r}")
    return f'Inserted job {job_id} of periodic job "{target.name}".'


def _spec(op_kind: str, target: Target) -> dict[str, Any]:
    if op_kind == "move_queue":
        return batch.move_spec(_need(target.to_queue, "to_queue"), target.priority)
    return {"priority": target.priority}


def _batch(
    op_kind: str,
) -> tuple[
    Callable[[Dashboard, Target], Awaitable[Preview]],
    Callable[[Dashboard, Target, str], Awaitable[str]],
]:
    """A durable batch operation over the queued jobs the filters match: previewed by
    the batch module, applied later by the maintenance leader, in chunks."""

    async def preview(dash: Dashboard, target: Target) -> Preview:
        spec, where = _spec(op_kind, target), target.batch_filter()
        found = await dash.run(batch.preview(op_kind, spec=spec, filter=where))
        what = (
            "Move to queue " + f'"{target.to_queue}"'
            if op_kind == "move_queue"
            else (f"Set priority {target.priority} for")
        )
        return Preview(
            f"{what} every queued job{_scope(target)}? The maintenance leader applies it "
            "in chunks.",
            found.get("total_matched", 0),
            [dict(row) for row in found.get("sample", [])],
        )

    async def perform(dash: Dashboard, target: Target, actor: str) -> str:
        operation = await dash.run(
            batch.submit(
                op_kind,
                spec=_spec(op_kind, target),
                filter=target.batch_filter(),
                submitted_by=actor,
                allow_all=True,
            )
        )
        return f"Submitted batch operation {operation.get('id')} ({op_kind})."

    return preview, perform


async def _batch_cancel_preview(dash: Dashboard, target: Target) -> Preview:
    operation = await dash.run(batch.get(_need(target.name, "name")))
    return Preview(
        f"Stop batch operation {operation.get('id')} ({operation.get('op_kind')}) between "
        "chunks? Jobs it already changed stay changed."
    )


async def _batch_cancel(dash: Dashboard, target: Target, actor: str) -> str:
    operation = await dash.run(batch.cancel(_need(target.name, "name")))
    return f"Batch operation {operation.get('id')} is {operation.get('state')}."


ACTIONS: dict[str, Action] = {
    "retry": Action("Retry", _by_id("Retry"), _retry),
    "cancel": Action("Cancel", _by_id("Cancel"), _cancel, danger=True),
    "delete": Action("Delete", _by_id("Delete"), _delete, danger=True),
    "retry_failed": Action("Retry failed", _retry_failed_preview, _retry_failed),
    "discard_failed": Action(
        "Delete failed", _discard_failed_preview, _discard_failed, danger=True
    ),
    "pause": Action(
        "Pause",
        _queue_question('Pause queue "{queue}"? Hosts stop claiming it; running jobs finish.'),
        _pause,
    ),
    "resume": Action("Resume", _queue_question('Resume queue "{queue}"?'), _resume),
    "drain": Action("Drain", _drain_preview, _drain, danger=True),
    "dlq_retry": Action("Retry", _dlq_by_id("Retry"), _dlq_retry),
    "dlq_purge": Action("Delete", _dlq_by_id("Delete"), _dlq_purge, danger=True),
    "dlq_retry_matching": Action("Retry all", _dlq_matching("Retry"), _dlq_retry_matching),
    "dlq_purge_matching": Action(
        "Delete all", _dlq_matching("Delete"), _dlq_purge_matching, danger=True
    ),
    "run_periodic": Action("Run now", _run_now_preview, _run_now),
    "move_queue": Action("Move", *_batch("move_queue")),
    "set_priority": Action("Set priority", *_batch("set_priority")),
    "batch_cancel": Action("Stop", _batch_cancel_preview, _batch_cancel, danger=True),
}


class Actions:
    def __init__(self, dashboard: Dashboard) -> None:
        self.dash = dashboard

    async def act(self, request: Request) -> Response:
        name = request.path_params["name"]
        action = ACTIONS.get(name)
        if action is None:
            return self._refuse(request, 404, f"no action {name!r}")
        if self.dash.read_only:
            return self._refuse(request, 403, "this dashboard is read-only")
        form = await request.form()
        token = form.get("csrf")
        if not isinstance(token, str) or not self.dash.csrf.valid(request, token):
            return self._refuse(
                request,
                403,
                "the form's security token is missing or stale: reload the page and try again",
            )
        target = Target.of(form)
        back = safe_next(form.get("next"))
        if form.get("confirm") != "yes":
            preview = await action.preview(self.dash, target)
            fields = [
                (k, v)
                for k, v in form.multi_items()
                if k not in ("csrf", "confirm") and isinstance(v, str)
            ]
            context = {
                "name": name,
                "action": action,
                "preview": preview,
                "fields": fields,
                "back": back,
            }
            return self.dash.render(request, "confirm", context)
        actor = self.dash.actor(request)
        result = await action.perform(self.dash, target, actor)
        log.info(
            "%s by %s: %s",
            name,
            actor,
            result,
            extra={"actor": actor, "action": name, "target": target.described()},
        )
        return self.dash.render(request, "done", {"result": result, "back": back})

    def _refuse(self, request: Request, status: int, why: str) -> Response:
        return self.dash.render(request, "error", {"message": why}, status=status)


def safe_next(value: object) -> str:
    """Where to go back to: a path of the dashboard's own, never another site's."""
    if isinstance(value, str) and value.startswith("/") and not value.startswith("//"):
        return value if "\\" not in value else "/"
    return "/"
