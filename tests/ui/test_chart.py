"""The throughput chart's geometry (ui/chart.py): bars scaled to the tallest bucket,
failed stacked on completed, a few time labels."""

from __future__ import annotations

from awa_fast.ui.chart import chart


def test_bars_stack_failed_on_completed_scaled_to_the_tallest_bucket() -> None:
    starts = [0.0, 60.0, 120.0, 180.0]
    drawn = chart(starts, [(0, 0), (30, 10), (10, 0), (0, 5)], width=400, height=100)
    assert drawn.top == 40 and not drawn.empty
    tallest = drawn.bars[1]
    assert (tallest.completed_h, tallest.failed_h) == (75.0, 25.0)
    assert tallest.completed_y == 25.0 and tallest.failed_y == 0.0
    assert drawn.bars[0].completed_h == drawn.bars[0].failed_h == 0.0
    assert [bar.x for bar in drawn.bars] == [10.0, 110.0, 210.0, 310.0]
    assert drawn.bars[1].title == "00:01: 30 completed, 10 failed"
    assert [label for _, label in drawn.labels] == ["00:00", "00:01", "00:02", "00:03"]


def test_an_empty_window_draws_flat_bars() -> None:
    drawn = chart([0.0] * 60, [(0, 0)] * 60, width=120, height=24)
    assert drawn.empty and all(bar.completed_h == bar.failed_h == 0.0 for bar in drawn.bars)
    assert len(drawn.labels) == 4
