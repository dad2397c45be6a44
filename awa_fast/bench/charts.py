"""PNG charts of a results folder (matplotlib, an optional dependency imported lazily).

- ``throughput.png``: jobs/s per system, one panel per scenario (scales differ too much for
  one axis: a drain does tens of thousands, a 1 ms CPU handler about a thousand per core);
- ``latency.png``: p50/p95/p99 per system for the scenarios that measure latency;
- ``sustained.png``: queue depth, pickup p50/p99 and dead tuples of ``jobs_hot`` over time,
  per system and offered load.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def write_charts(out: Path, rows: list[Row], results: list[Row]) -> tuple[list[Path], str]:
    """The charts written and a note (why there are none, when there are none)."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return [], "No charts: matplotlib is not installed (pip install 'awa-fast[bench]')."
    written = []
    for name, draw in (
        ("throughput", _throughput),
        ("latency", _latency),
        ("sustained", _sustained),
    ):
        figure = draw(plt, rows, results)
        if figure is None:
            continue
        path = out / f"{name}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written, ""


def _panels(plt: Any, count: int) -> tuple[Any, list[Any]]:
    cols = min(count, 2)
    lines = math.ceil(count / cols)
    figure, axes = plt.subplots(lines, cols, figsize=(7 * cols, 2.8 * lines), squeeze=False)
    flat = [a for line in axes for a in line]
    for extra in flat[count:]:
        extra.set_visible(False)
    return figure, flat[:count]


def _by_panel(rows: list[Row], wanted: Any) -> dict[str, list[Row]]:
    panels: dict[str, list[Row]] = {}
    for row in rows:
        if wanted(row):
            title = " ".join(x for x in (row["scenario"], row.get("variant") or "") if x)
            panels.setdefault(title, []).append(row)
    return panels


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _throughput(plt: Any, rows: list[Row], results: list[Row]) -> Any:
    # latency's jobs/s is just its offered rate: not a throughput
    panels = _by_panel(rows, lambda r: r["scenario"] != "latency" and _finite(r.get("jobs_per_s")))
    if not panels:
        return None
    figure, axes = _panels(plt, len(panels))
    for ax, (title, group) in zip(axes, panels.items(), strict=True):
        names = [r["system"] for r in group]
        values = [float(r["jobs_per_s"]) for r in group]
        bars = ax.barh(names, values, color=[_colour(n) for n in names])
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8, padding=2)
        ax.set_title(title)
        ax.set_xlabel("jobs/s")
        ax.invert_yaxis()
        ax.margins(x=0.25)
    figure.suptitle("Throughput (median run)")
    return figure


def _latency(plt: Any, rows: list[Row], results: list[Row]) -> Any:
    panels = _by_panel(rows, lambda r: isinstance(r.get("latency_ms"), dict))
    if not panels:
        return None
    figure, axes = _panels(plt, len(panels))
    for ax, (title, group) in zip(axes, panels.items(), strict=True):
        width = 0.25
        for i, pct in enumerate(("p50", "p95", "p99")):
            values = [float(r["latency_ms"].get(pct) or 0) for r in group]
            offsets = [y + (i - 1) * width for y in range(len(group))]
            ax.barh(offsets, values, height=width, label=pct)
        ax.set_yticks(range(len(group)), [r["system"] for r in group])
        ax.set_xlabel("ms")
        ax.set_title(title + (" (pickup)" if title == "latency" else " (end to end)"))
        ax.invert_yaxis()
        ax.legend(fontsize=8)
    figure.suptitle("Latency percentiles (median run)")
    return figure


def _sustained(plt: Any, rows: list[Row], results: list[Row]) -> Any:
    series = [r for r in rows if r["scenario"] == "sustained" and r.get("samples")]
    if not series:
        return None
    figure, (depth, pickup, dead) = plt.subplots(1, 3, figsize=(18, 4))
    for row in series:
        samples = row["samples"]
        label = f"{row['system']} {row.get('variant') or ''}".strip()
        times = [s[0] for s in samples]
        depth.plot(times, [s[1] for s in samples], label=label)
        dead.plot(times, [s[2] for s in samples], label=label)
        latencies = row.get("over_time") or []
        at = [b[0] for b in latencies]
        (line,) = pickup.plot(at, [b[2] for b in latencies], label=f"{label}, p99")
        pickup.plot(at, [b[1] for b in latencies], linestyle="--", color=line.get_color())
    depth.set_title("queue depth (available jobs)")
    pickup.set_title("pickup p99 (solid) and p50 (dashed), by insert time")
    pickup.set_ylabel("ms")
    pickup.set_yscale("log")
    dead.set_title("dead tuples in jobs_hot")
    for ax in (depth, pickup, dead):
        ax.set_xlabel("seconds since the first insert")
        ax.legend(fontsize=8)
    figure.suptitle("Sustained load (median run)")
    return figure


def _colour(system: str) -> str:
    return "tab:blue" if system.startswith("awa-fast") else "tab:gray"
