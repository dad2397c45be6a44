"""tests.runtime.pool.app's handlers, served by a supervisor whose worker processes cannot start:
each forked child may open no descriptor more (its limit is lowered below what it holds),
as when replacement workers met EMFILE at a supervisor's descriptor limit."""

from __future__ import annotations

import os
import resource

from tests.runtime.pool.app import client

__all__ = ["client"]
STDIO = 3  # descriptors: a child keeps those it has, and may log to stderr


def _no_more_descriptors() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (STDIO, hard))


os.register_at_fork(after_in_child=_no_more_descriptors)
