"""Runner options as callers give them: :class:`RunnerConfig`'s own names, or the Awa
SDK's, so that ``client.start(queues, poll_interval_ms=200)`` written for the SDK runs here.

Each SDK option with a counterpart becomes that field, milliseconds and hours turned into
seconds. The SDK's three rescue intervals set the one sweep that rescues here, at the
shortest given: sweeping more often serves each of them. An SDK option given as None means
its default, as in the SDK. Any other name, or an SDK option with nothing to act on here
(a fleet-wide worker cap, the SDK's storage engine and descriptor catalog), is refused by
name: dropping it silently would leave the caller believing it took effect.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from awa_fast.errors import ConfigError
from awa_fast.runtime.runner import RunnerConfig

# SDK name -> (RunnerConfig field, factor to that field's unit; None for a count)
AWA_OPTIONS: Mapping[str, tuple[str, float | None]] = {
    "poll_interval_ms": ("poll_interval", 1e-3),
    "heartbeat_interval_ms": ("heartbeat_interval", 1e-3),
    "promote_interval_ms": ("promote_interval", 1e-3),
    "leader_election_interval_ms": ("election_interval", 1e-3),
    "heartbeat_rescue_interval_ms": ("rescue_interval", 1e-3),
    "deadline_rescue_interval_ms": ("rescue_interval", 1e-3),
    "callback_rescue_interval_ms": ("rescue_interval", 1e-3),
    "heartbeat_staleness_ms": ("heartbeat_staleness", 1e-3),
    "completed_retention_hours": ("completed_retention", 3600.0),
    "failed_retention_hours": ("failed_retention", 3600.0),
    "cleanup_batch_size": ("cleanup_batch", None),
}

_NO_COUNTERPART = "an Awa SDK option with no counterpart in awa-fast"
AWA_UNSUPPORTED: Mapping[str, str] = {
    "global_max_workers": "there is no fleet-wide cap; give each queue its concurrency",
    "descriptor_retention_days": "there is no descriptor catalog",
    "terminal_count_rollup_interval_ms": "it tunes the SDK's storage engine",
    "storage_transition_role": "it tunes the SDK's storage engine",
    "queue_storage_schema": "it tunes the SDK's storage engine",
    "queue_storage_queue_slot_count": "it tunes the SDK's storage engine",
    "queue_storage_lease_slot_count": "it tunes the SDK's storage engine",
    "queue_storage_claim_slot_count": "it tunes the SDK's storage engine",
    "queue_storage_queue_stripe_count": "it tunes the SDK's storage engine",
    "queue_storage_queue_rotate_interval_ms": "it tunes the SDK's storage engine",
    "queue_storage_lease_rotate_interval_ms": "it tunes the SDK's storage engine",
    "queue_storage_claim_rotate_interval_ms": "it tunes the SDK's storage engine",
}

_FIELDS = frozenset(f.name for f in dataclasses.fields(RunnerConfig))


def runner_config(options: Mapping[str, Any]) -> RunnerConfig:
    """A validated :class:`RunnerConfig` from ``options``; a name it cannot honour raises
    :class:`ConfigError` naming it."""
    own = {name: value for name, value in options.items() if name in _FIELDS}
    translated: dict[str, Any] = {}
    for name, value in options.items():
        if name in own:
            continue
        if name in AWA_OPTIONS:
            if value is not None:
                field = AWA_OPTIONS[name][0]
                converted = _converted(name, value)
                # The rescue intervals share one field: the shortest serves each.
                translated[field] = min(translated.get(field, converted), converted)
        elif name in AWA_UNSUPPORTED:
            if value is not None:
                raise ConfigError(f"{name}: {_NO_COUNTERPART} ({AWA_UNSUPPORTED[name]})")
        else:
            known = ", ".join(sorted(_FIELDS))
            raise ConfigError(f"unknown runner option {name!r}; the options are {known}")
    for field in own.keys() & translated.keys():
        given = [n for n, (f, _) in AWA_OPTIONS.items() if f == field and n in options]
        raise ConfigError(f"{field}: given twice, as {field} and as {', '.join(given)}")
    return RunnerConfig(**own, **translated)


def _converted(name: str, value: object) -> float:
    factor = AWA_OPTIONS[name][1]
    if factor is None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    return value * factor
