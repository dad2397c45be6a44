"""What a client registers that its runtime runs: handlers, follow-ups, hooks, schedules."""

from __future__ import annotations

from dataclasses import dataclass, field

from awa_fast.descriptors import Descriptor
from awa_fast.lifecycle.followups import FollowupRegistry
from awa_fast.lifecycle.hooks import HookRegistry
from awa_fast.lifecycle.schedules import PeriodicJob
from awa_fast.worker import Registry


@dataclass(slots=True)
class Handlers:
    registry: Registry
    followups: FollowupRegistry
    hooks: HookRegistry
    schedules: dict[str, PeriodicJob] = field(default_factory=dict)  # by name
    queue_descriptors: dict[str, Descriptor] = field(default_factory=dict)  # by queue
    kind_descriptors: dict[str, Descriptor] = field(default_factory=dict)  # by kind
