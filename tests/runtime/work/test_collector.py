"""The collector settings of a process that runs jobs, and giving them back."""

from __future__ import annotations

import gc

import pytest

from awa_fast.runtime.work import collector


def test_settled_freezes_and_raises_the_young_threshold_then_gives_both_back() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0  # the test process freezes nothing of its own
    with collector.settled():
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0  # what the process held on entry
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_settled_gives_the_collector_back_when_the_work_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), collector.settled():
        raise RuntimeError("the served loop failed")
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, 0)
