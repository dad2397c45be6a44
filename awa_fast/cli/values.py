"""The command line's argument types: each turns a string into a value, or fails naming
what it expected."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from awa_fast.errors import ConfigError
from awa_fast.runtime.config import RunnerConfig
from awa_fast.validation import check_rate_limit


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` (to ``high``), else an error naming both."""
    bounds = f">= {low}" if high is None else f"from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected an integer {bounds}, got {text!r}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def queue_arg(text: str) -> tuple[str, int]:
    name, sep, concurrency = text.partition("=")
    if not sep or not name or not concurrency.isdigit() or int(concurrency) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=CONCURRENCY (>= 1), got {text!r}")
    return name, int(concurrency)


def rate_limit_arg(text: str) -> tuple[str, tuple[float, int]]:

    name, sep, limit = text.partition("=")
    rate, _, burst = limit.partition(":")
    try:
        if not sep or not name:
            raise ValueError
        return name, check_rate_limit(name, (float(rate), int(burst or 1)))
    except (ValueError, ConfigError) as exc:
        detail = f" ({exc})" if isinstance(exc, ConfigError) else ""
        raise argparse.ArgumentTypeError(
            f"expected NAME=RATE[:BURST] (jobs a second, burst default 1), got {text!r}{detail}"
        ) from None


def setting_arg(text: str) -> tuple[str, float | int]:
    from dataclasses import fields

    name, sep, value = text.partition("=")
    names = {f.name for f in fields(RunnerConfig)}
    if not sep or name not in names:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {sorted(names)}")
    try:
        return name, int(value) if value.isdigit() else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a number") from None
