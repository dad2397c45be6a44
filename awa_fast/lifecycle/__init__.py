"""A job's life as rules: the outcome of each attempt and the transition it makes, the
follow-up jobs and lifecycle events a transition carries, and what code registers (handlers,
hooks, schedules). The runtime and maintenance both sit on this layer; it runs nothing and
opens no connection of its own.

Its public names, re-exported by ``awa_fast``, are imported from here.
"""

from awa_fast.lifecycle.followups import OutcomeContext
from awa_fast.lifecycle.hooks import Event, EventType
from awa_fast.lifecycle.transitions import Backoff, Outcome

__all__ = ["Backoff", "Event", "EventType", "Outcome", "OutcomeContext"]
