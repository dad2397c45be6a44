"""A supervised loop's backoff grows while it fails in a row and starts afresh once the
loop had run steadily before failing."""

from __future__ import annotations

import time

from awa_fast.runtime.loops import STEADY_SECONDS, failures_in_a_row, retry_delay


def test_failures_in_a_row_grow_the_delay_up_to_its_cap() -> None:
    failures = 0
    delays = []
    for _ in range(8):
        failures = failures_in_a_row(failures, started=time.monotonic())
        delays.append(retry_delay(failures))
    assert delays == sorted(delays)
    assert delays[0] < delays[-1] == 2.0


def test_a_loop_that_ran_steadily_starts_its_backoff_afresh() -> None:
    steady_start = time.monotonic() - STEADY_SECONDS - 1
    assert failures_in_a_row(7, started=steady_start) == 1
