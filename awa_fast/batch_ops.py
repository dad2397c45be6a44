"""Durable batch operations, the clients' side: the Awa SDK's ``set_priority`` and
``move_queue`` over queued jobs, as :class:`~awa_fast.admin.Op`\\ s.

An operation is stored (``awa_fast.batch_operations``) and applied later by the maintenance
leader in bounded chunks (:mod:`awa_fast.maintenance.batch_ops`), so a million-job move holds
no giant transaction and survives restarts. A filter selects *queued* jobs, available or
scheduled, as the SDK does. Operations, previews and filters are plain dicts in the SDK's
shapes (its TypedDicts, timestamps as RFC 3339 strings), so code written for it reads them
unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypedDict, cast, get_args

import orjson

from awa_fast import validation
from awa_fast.admin import Op, Rows
from awa_fast.db.queries import Q
from awa_fast.errors import ValidationError

BatchOperationKind = Literal["set_priority", "move_queue"]
BatchOperationState = Literal[
    "pending", "scanning", "running", "cancelling", "completed", "cancelled", "failed"
]
KINDS: tuple[str, ...] = get_args(BatchOperationKind)
# The SDK's states; `scanning` never occurs here (the step that starts an operation takes
# its snapshot), though list_batch_operations accepts it.
STATES: tuple[str, ...] = get_args(BatchOperationState)
# What a filter's `state` may ask for: the queued states an operation may change.
QUEUED_STATES = ("available", "scheduled")
PREVIEW_SAMPLE = 10  # jobs a preview shows (the SDK's sample size)


class BatchOperationFilter(TypedDict, total=False):
    kind: str
    queue: str
    ids: list[int]
    tag: str
    state: str
    created_at_gte: datetime | str
    created_at_lt: datetime | str


class BatchOperationPreview(TypedDict, total=False):
    total_matched: int
    sample: list[dict[str, Any]]


class BatchOperation(TypedDict, total=False):
    id: str
    op_kind: str
    filter: dict[str, Any]
    spec: dict[str, Any]
    state: str
    submitted_by: str | None
    submitted_at: str
    started_at: str | None
    finalized_at: str | None
    cursor: dict[str, Any] | None
    total_matched: int | None
    processed: int
    skipped: int
    errored: int
    last_error: str | None
    runner_instance: str | None
    retention_until: str | None
    updated_at: str


_FILTER_KEYS = tuple(BatchOperationFilter.__annotations__)


def _kind(op_kind: object) -> str:
    if op_kind not in KINDS:
        raise ValidationError(
            "op_kind", f"unknown batch operation kind {op_kind!r}: must be one of {KINDS}"
        )
    return str(op_kind)


def _spec(op_kind: str, spec: object) -> dict[str, Any]:
    """The spec as stored: ``op_kind`` and each field of the kind (None when optional and
    unset). ``priority`` is 1-4; ``move_queue`` needs the destination ``queue``."""
    if not isinstance(spec, dict):
        raise ValidationError("spec", f"must be a dict, got {type(spec).__name__}")
    fields = ("priority",) if op_kind == "set_priority" else ("queue", "priority")
    unknown = set(spec) - {*fields, "op_kind"}
    if unknown or spec.get("op_kind", op_kind) != op_kind:
        raise ValidationError("spec", f"{op_kind} takes {', '.join(fields)}, got {spec!r}")
    priority = spec.get("priority")
    if op_kind == "set_priority" or priority is not None:
        priority = validation.int_in("priority", priority, 1, 4)
    stored: dict[str, Any] = {"op_kind": op_kind, "priority": priority}
    if op_kind == "move_queue":
        stored["queue"] = validation.name("queue", spec.get("queue"))
    return stored


def _instant(field: str, value: object) -> str | None:
    """A filter bound as an RFC 3339 UTC string: an aware datetime or an ISO string."""
    if value is None:
        return None
    return _rfc3339(validation.instant(field, value, text=True))


def _ids(value: object) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ValidationError("filter.ids", f"must be a list of job ids, got {value!r}")
    return [validation.int_in("filter.ids", job_id, 1, validation.MAX_JOB_ID) for job_id in value]


def _filter(op_kind: str, given: object) -> dict[str, Any]:
    """The filter as stored: every key, None when unset. An unknown key is refused rather
    than ignored (the SDK ignores it): a misspelt key would widen the selection."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ValidationError("filter", f"must be a dict, got {type(given).__name__}")
    unknown = set(given) - set(_FILTER_KEYS)
    if unknown:
        raise ValidationError("filter", f"unknown keys {sorted(unknown)}: takes {_FILTER_KEYS}")
    state = given.get("state")
    if state is not None and state not in QUEUED_STATES:
        raise ValidationError(
            "filter.state", f"{op_kind} only changes queued jobs, {QUEUED_STATES}: got {state!r}"
        )
    names = {
        key: None if given.get(key) is None else validation.name(f"filter.{key}", given[key])
        for key in ("kind", "queue", "tag")
    }
    return {
        **names,
        "ids": _ids(given.get("ids")),
        "state": state,
        "created_at_gte": _instant("filter.created_at_gte", given.get("created_at_gte")),
        "created_at_lt": _instant("filter.created_at_lt", given.get("created_at_lt")),
    }


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _plain(value: object) -> object:
    """A column's value as the SDK's dicts carry it: timestamps as RFC 3339 strings, ids
    and unique keys as text."""
    if isinstance(value, datetime):
        return _rfc3339(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def _operation(row: dict[str, Any]) -> BatchOperation:
    return cast(BatchOperation, {key: _plain(row[key]) for key in BatchOperation.__annotations__})


def _one(operation_id: str) -> Callable[[Rows], BatchOperation]:
    def shape(rows: Rows) -> BatchOperation:
        if not rows:
            raise ValidationError("operation_id", f"no batch operation {operation_id}")
        return _operation(dict(rows[0]))

    return shape


def _operation_id(operation_id: object) -> str:
    try:
        return str(uuid.UUID(str(operation_id)))
    except ValueError:
        raise ValidationError(
            "operation_id", f"not a batch operation id: {operation_id!r}"
        ) from None


def _preview(rows: Rows) -> BatchOperationPreview:
    sample = [
        {key: _plain(value) for key, value in row.items() if key != "total_matched"} for row in rows
    ]
    total = int(rows[0]["total_matched"]) if rows else 0
    return BatchOperationPreview(total_matched=total, sample=sample)


def _json(value: dict[str, Any]) -> str:
    return orjson.dumps(value).decode()


def move_spec(queue: str, priority: int | None) -> dict[str, Any]:
    """``move_queue``'s spec from its arguments (``priority`` None: unchanged)."""
    return {"queue": queue} if priority is None else {"queue": queue, "priority": priority}


def preview(
    op_kind: str, *, spec: dict[str, Any], filter: BatchOperationFilter | None = None
) -> Op[BatchOperationPreview]:
    """How many queued jobs the operation would change now, and the first few by id;
    nothing changes. No filter previews every queued job (only submitting needs
    ``allow_all``)."""
    kind = _kind(op_kind)
    _spec(kind, spec)
    params = {"filter": _json(_filter(kind, filter)), "sample": PREVIEW_SAMPLE}
    return Op(Q.batch_operation_preview, params, _preview)


def submit(
    op_kind: str,
    *,
    spec: dict[str, Any],
    filter: BatchOperationFilter | None = None,
    submitted_by: str | None = None,
    allow_all: bool = False,
) -> Op[BatchOperation]:
    """Store an operation for the leader to apply (``pending`` until it starts). A filter
    with no condition (absent, empty, or only an empty ``ids``) is refused unless
    ``allow_all``, as the SDK does; with it, no condition selects every queued job."""
    kind = _kind(op_kind)
    stored_spec = _spec(kind, spec)
    stored_filter = _filter(kind, filter)
    if not allow_all and not any(stored_filter.values()):
        raise ValidationError(
            "allow_all", f"{kind} with no filter changes every queued job: give allow_all=True"
        )
    if submitted_by is not None and not isinstance(submitted_by, str):
        raise ValidationError("submitted_by", f"must be a string or None, got {submitted_by!r}")
    params = {
        "id": uuid.uuid4(),
        "op_kind": kind,
        "filter": _json(stored_filter),
        "spec": _json(stored_spec),
        "submitted_by": submitted_by,
    }
    return Op(Q.batch_operation_insert, params, lambda rows: _operation(dict(rows[0])))


def _limit(limit: object) -> int:
    """At least 1 (the SDK reads 0 as 1 for a listing and purges nothing for it)."""
    return validation.int_in("limit", limit, 1, 2**63 - 1)


def get(operation_id: str) -> Op[BatchOperation]:
    """The operation; ValidationError if there is none (as the SDK raises)."""
    op_id = _operation_id(operation_id)
    return Op(Q.batch_operation_get, {"id": op_id}, _one(op_id))


def list_operations(
    *, state: BatchOperationState | None = None, limit: int = 100
) -> Op[list[BatchOperation]]:
    """Newest first."""
    if state is not None and state not in STATES:
        raise ValidationError("state", f"must be one of {STATES}, got {state!r}")
    params = {"state": state, "limit": _limit(limit)}
    return Op(Q.batch_operation_list, params, lambda rows: [_operation(dict(r)) for r in rows])


def cancel(operation_id: str) -> Op[BatchOperation]:
    """Ask the leader to stop the operation between chunks: it is ``cancelling`` until the
    leader's next step makes it ``cancelled`` (jobs already changed stay changed). A
    finished or unknown operation raises ValidationError, as in the SDK."""
    op_id = _operation_id(operation_id)
    find = _one(op_id)

    def shape(rows: Rows) -> BatchOperation:
        operation = find(rows)
        if not rows[0]["cancelled"]:
            raise ValidationError(
                "operation_id",
                f"batch operation {op_id} is {operation['state']} and cannot be cancelled",
            )
        return operation

    return Op(Q.batch_operation_cancel, {"id": op_id}, shape)


def purge(before: datetime, *, limit: int = 1000) -> Op[int]:
    """Delete up to ``limit`` finished operations finalized before ``before``; how many."""
    params = {"before": validation.instant("before", before), "limit": _limit(limit)}
    return Op(Q.batch_operation_purge, params, len)
