"""A worker's pace on a queue (awa_fast.runtime.prefetch): jobs completed per second of
the time it had one of the queue's handlers running, and the prefetch it sets."""

from __future__ import annotations

import pytest

from awa_fast.runtime.prefetch import (
    HORIZON_S,
    PACE_FIRST_JOBS,
    PACE_JOBS,
    PREFETCH_MAX,
    PREFETCH_MIN,
    PREFETCH_UNPACED_MAX,
    Pace,
    default_prefetch,
    held_for,
)


def test_the_pace_counts_busy_time_only() -> None:
    pace = Pace(now=0.0)
    at, measured = 0.0, False
    while not measured:
        pace.running_changes(0, at + 5.0)  # 5 s with nothing running
        at += 5.002
        pace.running_changes(1, at)  # then one handler for 2 ms
        measured = pace.completed()
    assert pace.per_s == pytest.approx(500.0)


def test_handlers_side_by_side_count_once() -> None:
    """Four handlers of 4 ms each, side by side: 1,000 jobs/s of busy time."""
    pace = Pace(now=0.0)
    at = 0.0
    measured = False
    while not measured:
        at += 0.004
        pace.running_changes(4, at)
        measured = any([pace.completed() for _ in range(4)])
    assert pace.per_s == pytest.approx(1000.0)


def test_a_new_measure_weighs_half() -> None:
    pace = Pace(now=0.0)
    pace.running_changes(1, 1.0)  # busy past PACE_BUSY_S: the first completion measures
    assert pace.completed() and pace.per_s == 1.0
    pace.running_changes(1, 1.5)
    assert pace.completed() and pace.per_s == (1.0 + 2.0) / 2


def test_held_ahead_is_the_horizons_worth_within_bounds() -> None:
    assert held_for(10_000.0) == PREFETCH_MAX  # fast jobs: the most
    assert held_for(100.0) == round(HORIZON_S * 100.0)  # 10 ms jobs
    assert held_for(1 / HORIZON_S - 0.01) == 0  # jobs longer than the horizon: none


def test_before_a_pace_a_worker_holds_twice_its_share_within_the_unpaced_bounds() -> None:
    """Its handlers may be slow: the guess holds no more than the lower bound of what a
    quick queue's pace would hold."""
    assert default_prefetch(1) == PREFETCH_MIN
    assert default_prefetch(10) == 20
    assert default_prefetch(250) == PREFETCH_UNPACED_MAX < PREFETCH_MAX


def test_the_first_pace_comes_after_a_few_jobs_the_next_after_more() -> None:
    """A worker holds little until its first pace: it is taken sooner than the others."""
    pace, at = Pace(now=0.0), 0.0

    def measures(jobs: int) -> list[bool]:
        nonlocal at
        measured = []
        for _ in range(jobs):
            at += 0.001  # 1 ms jobs, far from PACE_BUSY_S
            pace.running_changes(1, at)
            measured.append(pace.completed() is not None)
        return measured

    assert PACE_FIRST_JOBS < PACE_JOBS
    assert measures(PACE_FIRST_JOBS) == [False] * (PACE_FIRST_JOBS - 1) + [True]
    assert measures(PACE_JOBS) == [False] * (PACE_JOBS - 1) + [True]
    assert pace.per_s == pytest.approx(1000.0)
