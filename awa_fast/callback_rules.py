"""The Awa SDK's callback expressions: the CEL ``filter``, ``on_complete``, ``on_fail`` and
``transform`` a handler may give ``job.register_callback``, checked there, and the verdict
``client.resolve_callback`` reaches with them on a payload.

The Rust core evaluates CEL with the crate and version the SDK uses (rust/cel.rs); the
rules around it are the SDK's (awa-pg 0.6.9), as its behaviour shows them:

- An expression sees the payload as ``payload`` (JSON; None is ``null``) and nothing else.
- ``filter`` false: ignored (reason ``filter expression returned false``), whatever the
  default action. ``on_fail`` true, checked before ``on_complete``: failed. ``on_complete``
  true: completed, with the payload ``transform`` makes of it (the payload as given when
  there is no transform, or it fails). Otherwise the default action: ``complete`` (the
  payload as given, not transformed), ``fail`` or ``ignore``.
- An expression that fails to evaluate, or a condition that yields no bool, counts as
  neither true nor false: a filter lets the payload through, an on_fail or on_complete does
  not match. The SDK does not raise for these either; they are logged here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import orjson

from awa_fast import _core
from awa_fast.errors import ValidationError

log = logging.getLogger("awa_fast.callback_rules")

DEFAULT_ACTIONS = ("complete", "fail", "ignore")
IGNORED_BY_FILTER = "filter expression returned false"
IGNORED_BY_DEFAULT = "no expressions configured, default is ignore"  # the SDK's words, always


def checked(expressions: Mapping[str, str | None]) -> dict[str, str] | None:
    """The expressions given (by name), each parsed and using no variable but ``payload``:
    what ``register_callback`` stores. None when none is given. Raises ValidationError
    naming the first bad one, as the SDK refuses it at registration."""
    given = {name: e for name, e in expressions.items() if e is not None}
    for name, expression in given.items():
        if not isinstance(expression, str):
            raise ValidationError(name, f"a CEL expression is a str, got {type(expression)}")
        try:
            variables = _core.cel_variables(expression)
        except ValueError as exc:
            raise ValidationError(name, f"invalid CEL expression for {name}: {exc}") from None
        undeclared = [v for v in variables if v != "payload"]
        if undeclared:
            raise ValidationError(
                name,
                f"CEL expression for {name} references undeclared variable(s): "
                f"{', '.join(undeclared)}; only 'payload' is available",
            )
    return given or None


def default_action_of(default_action: str) -> str:
    """``default_action`` if the SDK knows it; ValidationError (a ValueError, as the SDK
    raises) otherwise."""
    if default_action not in DEFAULT_ACTIONS:
        raise ValidationError(
            "default_action",
            f"unknown default_action: {default_action} (expected 'complete', 'fail', or 'ignore')",
        )
    return default_action


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a payload does to its callback's job. ``payload``: the JSON text to complete
    with (None for no payload); ``error``: the failed job's error entry; ``reason``: why it
    was ignored."""

    outcome: Literal["completed", "failed", "ignored"]
    payload: str | None = None
    error: dict[str, str] | None = None
    reason: str | None = None


def decide(rules: Mapping[str, str] | None, payload: str | None, default_action: str) -> Verdict:
    """The verdict on ``payload`` (JSON text, None for none) of a callback with ``rules``
    (its stored expressions) and ``default_action`` (checked by :func:`default_action_of`)."""
    rules = rules or {}
    data = "null" if payload is None else payload
    if "filter" in rules and _truth("filter", rules["filter"], data) is False:
        return Verdict("ignored", reason=IGNORED_BY_FILTER)
    if "on_fail" in rules and _truth("on_fail", rules["on_fail"], data):
        matched = {"error": "callback failed: on_fail expression matched"}
        return Verdict("failed", error={**matched, "expression": rules["on_fail"]})
    if "on_complete" in rules and _truth("on_complete", rules["on_complete"], data):
        return Verdict("completed", payload=_transformed(rules.get("transform"), payload))
    if default_action == "complete":
        return Verdict("completed", payload=payload)
    if default_action == "fail":
        return Verdict("failed", error={"error": "callback failed: default action"})
    return Verdict("ignored", reason=IGNORED_BY_DEFAULT)


def _truth(name: str, expression: str, data: str) -> bool | None:
    """The condition's bool; None (logged) when it fails or yields something else."""
    try:
        value = orjson.loads(_core.cel_evaluate(expression, data))
    except ValueError as exc:
        log.warning("CEL expression for %s failed: %s (%r)", name, exc, expression)
        return None
    if not isinstance(value, bool):
        log.warning("CEL expression returned non-bool for %s: %r (%r)", name, value, expression)
        return None
    return value


def _transformed(transform: str | None, payload: str | None) -> str | None:
    if transform is None:
        return payload
    try:
        return _core.cel_evaluate(transform, "null" if payload is None else payload)
    except ValueError as exc:
        log.warning("CEL transform failed, payload kept as given: %s (%r)", exc, transform)
        return payload
