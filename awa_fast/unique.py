"""Unique jobs: their options checked, and their keys (at most one live job per key).
Inserts and ``cancel_by_unique_key`` both hash here, so the two agree."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson

from awa_fast import validation
from awa_fast.errors import ValidationError
from awa_fast.types import JOB_STATES, UNIQUE_STATE_BITS, UniqueOpts


def checked(value: UniqueOpts | Mapping[str, Any] | None) -> UniqueOpts | None:
    """``value`` (UniqueOpts, or a dict of its fields) checked, its states as names;
    :class:`ValidationError` naming what is wrong."""
    if value is None or isinstance(value, UniqueOpts):
        opts = value
    else:
        try:
            opts = UniqueOpts(**dict(value))
        except TypeError as exc:
            raise ValidationError("unique", str(exc)) from exc
    if opts is not None:
        for flag in ("by_args", "by_queue"):
            if not isinstance(getattr(opts, flag), bool):
                raise ValidationError(
                    f"unique.{flag}", f"must be True or False, got {getattr(opts, flag)!r}"
                )
        opts = dataclasses.replace(opts, states=_states(opts.states))
        bad = [s for s in opts.states if s not in JOB_STATES]
        if bad or not opts.states:
            raise ValidationError("unique", f"states must be job states, got {list(opts.states)}")
        if opts.by_period is not None:
            validation.int_in("unique.by_period", opts.by_period, 1, 10**9)
    return opts


def _states(value: object) -> tuple[str, ...]:
    """Unique states as names, from names or from the SDK's bitmask (1-255)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 < value < 1 << len(UNIQUE_STATE_BITS):
            raise ValidationError("unique", f"states as a bitmask must be 1..255, got {value}")
        return tuple(s for bit, s in enumerate(UNIQUE_STATE_BITS) if value >> bit & 1)
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError("unique", f"states must be job states or a bitmask, got {value!r}")
    return tuple(value)


def key_of(opts: UniqueOpts, kind: str, queue: str, args: str) -> bytes:
    """The key of a job of ``kind`` in ``queue`` with encoded ``args``, by ``opts``."""
    period = opts.by_period
    return unique_key(
        kind,
        queue=queue if opts.by_queue else None,
        args=args if opts.by_args else None,
        period_bucket=None if period is None else int(datetime.now().timestamp()) // period,
    )


def unique_key(
    kind: str,
    *,
    queue: str | None = None,
    args: str | None = None,
    period_bucket: int | None = None,
) -> bytes:
    """The unique key of a kind and, each where the job's UniqueOpts take it, its queue,
    its encoded args and its period bucket (epoch seconds // by_period). Inserts and
    ``cancel_by_unique_key`` both hash here, so the two agree."""
    parts: list[object] = [kind]
    if queue is not None:
        parts.append(queue)
    if args is not None:
        parts.append(orjson.loads(args))
    if period_bucket is not None:
        parts.append(period_bucket)
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).digest()
