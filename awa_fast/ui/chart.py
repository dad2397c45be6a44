"""The throughput chart's geometry: a bar per time bucket, completed jobs stacked under
failed ones, laid out here so that the template only draws rectangles (an inline SVG, no
script)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

# A window and the bucket its chart counts by, by the name the page's links use. Finished
# jobs are counted by the minute (migration 0025): a bucket is a whole number of minutes.
RANGES = {"15m": (900, 60), "1h": (3600, 60), "24h": (86400, 1800)}
DEFAULT_RANGE = "1h"
_AXIS_LABELS = 4


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    completed_y: float
    completed_h: float
    failed_y: float
    failed_h: float
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    top: int  # the value the chart's full height stands for
    labels: list[tuple[float, str]]  # (x, time) under the bars

    @property
    def empty(self) -> bool:
        return self.top == 0


def chart(starts: list[float], counts: list[tuple[int, int]], *, width: int, height: int) -> Chart:
    """Bars of (completed, failed) per bucket starting at ``starts``, scaled to the
    largest bucket."""
    top = max((c + f for c, f in counts), default=0)
    slot = width / max(len(starts), 1)
    bars = [
        _bar(i * slot, slot, start, completed, failed, top, height)
        for i, (start, (completed, failed)) in enumerate(zip(starts, counts, strict=True))
    ]
    step = max(len(starts) // _AXIS_LABELS, 1)
    labels = [(i * slot, _clock(starts[i])) for i in range(0, len(starts), step)]
    return Chart(width, height, bars, top, labels)


def _bar(
    x: float, slot: float, start: float, completed: int, failed: int, top: int, height: int
) -> Bar:
    scale = height / top if top else 0.0
    completed_h, failed_h = completed * scale, failed * scale
    return Bar(
        x=round(x + slot * 0.1, 2),
        width=round(slot * 0.8, 2),
        completed_y=round(height - completed_h, 2),
        completed_h=round(completed_h, 2),
        failed_y=round(height - completed_h - failed_h, 2),
        failed_h=round(failed_h, 2),
        title=f"{_clock(start)}: {completed} completed, {failed} failed",
    )


def _clock(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M")
