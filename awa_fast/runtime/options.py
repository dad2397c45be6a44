"""Runner options as callers give them: :class:`RunnerConfig`'s own names, or the Awa
SDK's, so that ``client.start(queues, poll_interval_ms=200)`` written for the SDK runs here.

Each SDK option with a counterpart becomes that field, milliseconds, hours and days turned
into seconds. The SDK's three rescue intervals set the one sweep that rescues here, at the
shortest given: sweeping more often serves each of them. An SDK option given as None means
its default, as in the SDK. The SDK's storage-engine options tune an engine awa-fast does
not have: they are accepted, their values checked as the SDK's ``start`` checks them, and
a warning says once that they change nothing. Any other name is refused as Python refuses
an unknown keyword (a TypeError).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from awa_fast.errors import ConfigError, ConfigTypeError
from awa_fast.runtime.config import QueueSpec, RunnerConfig, above_zero, count

log = logging.getLogger("awa_fast.runtime.options")

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
    "descriptor_retention_days": ("descriptor_retention", 86400.0),
    "cleanup_batch_size": ("cleanup_batch", None),
}

_TRANSITION_ROLES = ("auto", "canonical_drain", "queue_storage_target")


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ConfigTypeError(f"{name} must be a str, got {value!r}")
    return value


def _transition_role(name: str, value: object) -> None:
    if _text(name, value) not in _TRANSITION_ROLES:
        *first, last = map(repr, _TRANSITION_ROLES)
        raise ConfigError(f"{name} must be one of {', '.join(first)}, or {last} (got {value!r})")


# The SDK's storage-engine options: awa-fast has one storage, which they do not tune. Each
# has the check the SDK's start() gives its value, so that a value it refuses is refused
# here too; what its engine checks as it starts (slot minimums, the schema against the
# storage transition's) has no engine here to check for.
AWA_STORAGE_OPTIONS: Mapping[str, Callable[[str, object], object]] = {
    "terminal_count_rollup_interval_ms": above_zero,
    "storage_transition_role": _transition_role,
    "queue_storage_schema": _text,
    "queue_storage_queue_slot_count": above_zero,
    "queue_storage_lease_slot_count": above_zero,
    "queue_storage_claim_slot_count": above_zero,
    "queue_storage_queue_stripe_count": above_zero,
    "queue_storage_queue_rotate_interval_ms": above_zero,
    "queue_storage_lease_rotate_interval_ms": above_zero,
    "queue_storage_claim_rotate_interval_ms": above_zero,
}
_warned_ignored: set[str] = set()  # each storage option is logged once a process

_FIELDS = frozenset(f.name for f in dataclasses.fields(RunnerConfig))


def runner_config(
    options: Mapping[str, Any],
    *,
    queues: QueueSpec | None = None,
    pooled: bool = False,
    traces: bool = True,
) -> RunnerConfig:
    """A validated :class:`RunnerConfig` from ``options`` and the per-queue settings of
    ``queues`` given as the SDK's dicts (:func:`queue_settings`); a name it cannot honour
    raises :class:`ConfigError` naming it. A queue's ``claimers`` raises the runner's,
    whose claim loops serve every queue, to at least that many. ``pooled``: the client's
    URL goes through a transaction pooler, so its runner's does too
    (:func:`_pooled_runner`). Weighted mode needs ``queues`` given, as the SDK's: it
    cannot tell each handler's queue a minimum and a weight. ``traces`` False: the client's
    option turns the runner's spans off, whatever ``options`` says."""
    config = _runner_options(_pooled_runner(options) if pooled else options)
    if not traces:
        config = dataclasses.replace(config, traces=False)
    if queues is None and config.global_max_workers is not None:
        raise ConfigError(
            "weighted mode requires explicit queue configs (global_max_workers set but "
            "queues=None): give start() a dict for each queue, with min_workers and weight"
        )
    settings = queue_settings(queues or (), config)
    per_queue_claimers = settings.pop("claimers")
    merged: dict[str, Any] = {
        field: _merged(field, getattr(config, field), s) for field, s in settings.items()
    }
    claimers = max(config.claimers, *per_queue_claimers.values(), 0)
    return dataclasses.replace(config, claimers=claimers, **merged)


def _merged(field: str, given: Mapping[str, Any], from_queues: dict[str, Any]) -> dict[str, Any]:
    twice = sorted(given.keys() & from_queues.keys())
    if twice:
        raise ConfigError(f"{field}: queue(s) {', '.join(twice)} given in two places")
    return {**given, **from_queues}


def queue_settings(queues: QueueSpec, config: RunnerConfig) -> dict[str, dict[str, Any]]:
    """RunnerConfig's per-queue settings from SDK queue dicts: ``rate_limit`` (max_rate,
    burst) → queue_rate_limits, ``deadline_duration_ms`` → queue_deadlines (seconds),
    ``retention`` {completed_hours, failed_hours} → queue_retention (seconds; one left
    out keeps ``config``'s), ``claim_batch_size`` → queue_claim_batches,
    ``priority_aging_interval_ms`` → queue_aging (seconds), and in weighted mode
    ``min_workers`` (0) and ``weight`` (1) → queue_weights; ``claimers`` by queue. As in
    the SDK, a weight is checked in either mode, and 0 turns a queue's deadline (None)
    or aging (left out) off."""
    settings: dict[str, dict[str, Any]] = {
        "queue_rate_limits": {},
        "queue_deadlines": {},
        "queue_retention": {},
        "queue_weights": {},
        "queue_claim_batches": {},
        "queue_aging": {},
        "claimers": {},
    }
    entries = [] if isinstance(queues, Mapping) else queues
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name"))
        given = {key: value for key, value in entry.items() if value is not None}
        if "rate_limit" in given:
            settings["queue_rate_limits"][name] = given["rate_limit"]  # RunnerConfig checks it
        if "deadline_duration_ms" in given:
            settings["queue_deadlines"][name] = _seconds_or_off(
                name, "deadline_duration_ms", given["deadline_duration_ms"]
            )
        if "retention" in given:
            settings["queue_retention"][name] = _retention(name, given["retention"], config)
        if "priority_aging_interval_ms" in given:
            aging = _seconds_or_off(
                name, "priority_aging_interval_ms", given["priority_aging_interval_ms"]
            )
            if aging is not None:
                settings["queue_aging"][name] = aging
        for key, field in (("claim_batch_size", "queue_claim_batches"), ("claimers", "claimers")):
            if key in given:
                settings[field][name] = above_zero(key, given[key], queue=name)
        weight = above_zero("weight", given.get("weight", 1), queue=name)
        if config.global_max_workers is not None:
            settings["queue_weights"][name] = (
                count(f"queue {name!r}: min_workers", given.get("min_workers", 0), low=0),
                weight,
            )
    return settings


def _seconds_or_off(name: str, key: str, ms: object) -> float | None:
    """A queue's milliseconds as seconds; 0 turns the setting off (None), as in the SDK."""
    if isinstance(ms, int | float) and not isinstance(ms, bool) and ms == 0:
        return None
    return _number(f"queue {name!r}: {key}", ms) / 1000


def _retention(name: str, retention: object, config: RunnerConfig) -> tuple[float, float]:
    keys = {"completed_hours", "failed_hours"}
    if not isinstance(retention, Mapping) or not retention.keys() <= keys:
        raise ConfigError(
            f"queue {name!r}: retention must be a dict of completed_hours and/or "
            f"failed_hours, got {retention!r}"
        )
    hours = {k: _number(f"queue {name!r}: retention {k}", v) for k, v in retention.items()}
    return (
        hours["completed_hours"] * 3600
        if "completed_hours" in hours
        else config.completed_retention,
        hours["failed_hours"] * 3600 if "failed_hours" in hours else config.failed_retention,
    )


def _number(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigTypeError(f"{what} must be a number > 0, got {value!r}")
    if not 0 < value < math.inf:
        raise ConfigError(f"{what} must be a number > 0, got {value!r}")
    return float(value)


def _runner_options(options: Mapping[str, Any]) -> RunnerConfig:
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
        elif name in AWA_STORAGE_OPTIONS:
            if value is not None:
                AWA_STORAGE_OPTIONS[name](name, value)
                _ignored(name)
        else:
            known = ", ".join(sorted(_FIELDS))
            raise ConfigTypeError(f"unknown runner option {name!r}; the options are {known}")
    for field in own.keys() & translated.keys():
        given = [n for n, (f, _) in AWA_OPTIONS.items() if f == field and n in options]
        raise ConfigError(f"{field}: given twice, as {field} and as {', '.join(given)}")
    return RunnerConfig(**own, **translated)


def _pooled_runner(options: Mapping[str, Any]) -> Mapping[str, Any]:
    """``options`` for a runner of a client whose URL goes through a transaction pooler:
    the runner connects to that URL too, so ``transaction_pooling`` is True unless given,
    and may not be given False."""
    if options.get("transaction_pooling", True) is not True:
        raise ConfigError(
            "transaction_pooling must stay True for a runner of a client made with "
            f"transaction_pooling=True (given {options['transaction_pooling']!r}): both "
            "connect through the same pooler"
        )
    return {**options, "transaction_pooling": True}


def _ignored(name: str) -> None:
    """Log, once a process, that a storage-engine option changes nothing here."""
    if name not in _warned_ignored:
        _warned_ignored.add(name)
        log.warning(
            "%s ignored: it tunes the Awa SDK's queue storage engine, and awa-fast has one "
            "storage (docs/porting.md)",
            name,
        )


def _converted(name: str, value: object) -> float:
    factor = AWA_OPTIONS[name][1]
    if factor is None:
        return above_zero(name, value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigTypeError(f"{name} must be a number, got {value!r}")
    if not 0 <= value < math.inf:  # the SDK's own check of its durations
        raise ConfigError(f"{name} must be a non-negative finite number, got {value!r}")
    return value * factor
