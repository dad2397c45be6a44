"""tests.runtime.work.pool.app's handlers, served by a supervisor whose worker processes cannot
start: each may open no descriptor more (its limit is lowered below what it holds), as when
replacement workers met EMFILE at a descriptor limit. The fork server, the supervisor's own
child, is spared: it forks the workers."""

from __future__ import annotations

import os
import resource

from tests.runtime.work.pool.app import client

__all__ = ["client"]
STDIO = 3  # descriptors: a child keeps those it has, and may log to stderr
SUPERVISOR = os.getpid()  # the app is imported by the supervisor


def _no_more_descriptors() -> None:
    if os.getppid() == SUPERVISOR:  # the fork server
        return
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (STDIO, hard))


os.register_at_fork(after_in_child=_no_more_descriptors)
