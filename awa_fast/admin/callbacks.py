"""Answers to jobs waiting on a callback: complete, fail, retry, resolve by the handler's
CEL rules, resume a waiting handler, or extend its timeout, all by callback id."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from awa_fast import callback_rules, validation
from awa_fast.admin.ops import Locked, Op, Rows
from awa_fast.codec import encode_json
from awa_fast.db.queries import Q
from awa_fast.errors import CallbackNotFound, ValidationError
from awa_fast.types import DEFAULT_CALLBACK_TIMEOUT, JobRow


def _callback_id(callback_id: str) -> str:
    try:
        return str(uuid.UUID(str(callback_id)))
    except ValueError:
        raise ValidationError("callback_id", f"not a callback id: {callback_id!r}") from None


def _payload(payload: object) -> str | None:
    return None if payload is None else encode_json("payload", payload).decode()


def _answered(callback_id: str) -> Callable[[Rows], JobRow]:
    """The job a callback statement answered, as it now is; CallbackNotFound if none."""

    def shape(rows: Rows) -> JobRow:
        if not rows:
            raise CallbackNotFound(callback_id)
        return JobRow.from_row(rows[0])

    return shape


def _resolve(
    callback_id: str,
    state: str,
    *,
    payload: str | None = None,
    error: dict[str, str] | None = None,
) -> Op[JobRow]:
    """The job on ``callback_id`` completed with ``payload`` (JSON text), failed with the
    ``error`` entry (its text under "error", and any detail), or made available again."""
    params = {
        "callback_id": _callback_id(callback_id),
        "state": state,
        "payload": payload,
        "error": None if error is None else orjson.dumps(error).decode(),
    }
    return Op(Q.callback_resolve, params, _answered(callback_id))


def complete_external(callback_id: str, payload: object = None) -> Op[JobRow]:
    """Complete the job waiting on ``callback_id``, with ``payload`` as its callback_result."""
    return _resolve(callback_id, "completed", payload=_payload(payload))


def fail_external(callback_id: str, error: str) -> Op[JobRow]:
    return _resolve(callback_id, "failed", error={"error": f"callback failed: {error}"})


def retry_external(callback_id: str) -> Op[JobRow]:
    """Give the parked job another attempt (the callback's attempt counts as used)."""
    return _resolve(callback_id, "available")


@dataclass(frozen=True, slots=True)
class ResolveResult:
    """What :func:`resolve_callback` did: ``outcome`` is "completed" (``job`` completed with
    ``payload``, transformed when on_complete matched), "failed" (``job`` failed) or
    "ignored" (the job still waits on its callback; ``reason`` says why)."""

    outcome: Literal["completed", "failed", "ignored"]
    job: JobRow | None = None
    payload: Any = None
    reason: str | None = None

    def is_completed(self) -> bool:
        return self.outcome == "completed"

    def is_failed(self) -> bool:
        return self.outcome == "failed"

    def is_ignored(self) -> bool:
        return self.outcome == "ignored"


def resolve_callback(
    callback_id: str, payload: object = None, default_action: str = "ignore"
) -> Locked[ResolveResult]:
    """Decide the job waiting on ``callback_id`` by the CEL expressions its handler gave
    ``register_callback`` (callback_rules.py has the SDK's rules), falling back on
    ``default_action`` ("complete", "fail" or "ignore"). The row stays locked from reading
    the expressions to acting on them, so of two resolves of one callback only the first
    acts; the second finds it spent (CallbackNotFound), as after any other answer."""
    action = callback_rules.default_action_of(default_action)
    params = {"callback_id": _callback_id(callback_id)}
    given = _payload(payload)

    def decide(rows: Rows) -> ResolveResult | Op[ResolveResult]:
        if not rows:
            raise CallbackNotFound(callback_id)
        verdict = callback_rules.decide(rows[0]["callback_rules"], given, action)
        if verdict.outcome == "ignored":
            return ResolveResult("ignored", reason=verdict.reason)
        state = "completed" if verdict.outcome == "completed" else "failed"
        op = _resolve(callback_id, state, payload=verdict.payload, error=verdict.error)
        return Op(op.sql, op.params, lambda rows: _resolved_as(verdict, op.shape(rows)))

    return Locked(Op(Q.callback_lock, params, decide))


def _resolved_as(verdict: callback_rules.Verdict, job: JobRow) -> ResolveResult:
    if verdict.outcome == "completed":
        return ResolveResult("completed", job=job, payload=job.callback_result)
    return ResolveResult("failed", job=job)


def resume_external(callback_id: str, payload: object = None) -> Op[JobRow]:
    """Hand ``payload`` to the job on ``callback_id``: it goes back to running, the same
    attempt, with ``payload`` as its callback_result. A handler waiting on the callback
    (``job.wait_for_callback``) carries on and decides the outcome; a parked job (its
    handler returned WaitForCallback) has none to carry on, so, as in the Awa SDK, the
    leader rescues it once its heartbeat is stale, for another attempt."""
    params = {"callback_id": _callback_id(callback_id), "payload": _payload(payload)}
    return Op(Q.callback_resume, params, _answered(callback_id))


def heartbeat_callback(
    callback_id: str, timeout_seconds: float = DEFAULT_CALLBACK_TIMEOUT
) -> Op[JobRow]:
    """The external system behind ``callback_id`` is still at work: its job, waiting on it,
    times out ``timeout_seconds`` from now instead."""
    params = {
        "callback_id": _callback_id(callback_id),
        "timeout_s": validation.positive_seconds("timeout_seconds", timeout_seconds),
    }
    return Op(Q.callback_heartbeat, params, _answered(callback_id))
