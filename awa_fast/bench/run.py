"""Running scenarios: configurations from names, runs on fresh databases, the median row,
a progress bar, and results saved as JSON lines.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from awa_fast.bench.latency import latency, sustained
from awa_fast.bench.measure import fresh_database
from awa_fast.bench.throughput import cpu, drain, io, promote, retry, scheduled
from awa_fast.runtime.work import collector

T = TypeVar("T")

Scenario = Callable[..., Coroutine[Any, Any, dict[str, Any]]]
SCENARIOS: dict[str, Scenario] = {
    "drain": drain,
    "cpu": cpu,
    "io": io,
    "latency": latency,
    "sustained": sustained,
    "retry": retry,
    "scheduled": scheduled,
    "promote": promote,
}
DEFAULT_JOBS = {
    "drain": 20_000,
    "cpu": 5_000,
    "io": 20_000,
    "latency": 500,
    "sustained": 20_000,
    "retry": 10_000,
    "scheduled": 10_000,
    "promote": 50_000,
}
# (load, basis): shares of the drain rate, and 90 % of what the pool completes while a
# producer shares the machine with it (see latency.sustained).
SUSTAINED_LOADS = ((0.5, "drain"), (0.9, "drain"), (0.9, "capacity"))


@dataclass(frozen=True, slots=True)
class Planned:
    """One scenario configuration: ``runs`` of these make a table row."""

    scenario: str
    jobs: int
    processes: int | None
    options: dict[str, Any]

    @property
    def label(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.options.items())
        where = f"p={self.processes}" if self.processes else "in-process"
        return " ".join(x for x in (self.scenario, where, extra) if x)


def plan(
    scenarios: list[str],
    *,
    jobs: int | None = None,
    processes: int | None = None,
    duration: float | None = None,
    standby: bool = True,
    transaction_pooling: bool = False,
) -> list[Planned]:
    """Expand scenario names into configurations: ``cpu`` at 1..P processes when P > 1,
    ``sustained`` at each of ``SUSTAINED_LOADS``; ``latency`` and ``sustained`` without
    standby claims when ``standby`` is False; ``latency`` as behind a transaction pooler
    when ``transaction_pooling`` is True."""
    out = []
    without = {} if standby else {"standby": False}  # for the scenarios that produce live
    for name in scenarios:
        if name not in SCENARIOS:
            raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
        count = jobs or DEFAULT_JOBS[name]
        if name == "cpu" and processes and processes > 1:
            out += [Planned(name, count, p, {}) for p in range(1, processes + 1)]
        elif name == "sustained":
            timing = {"duration": duration} if duration else {}
            out += [
                Planned(name, count, processes, {"load": load, "basis": basis, **timing, **without})
                for load, basis in SUSTAINED_LOADS
            ]
        elif name == "latency":
            pooling = {"transaction_pooling": True} if transaction_pooling else {}
            out.append(Planned(name, count, processes, {**without, **pooling}))
        else:
            out.append(Planned(name, count, processes, {}))
    return out


def run_as_served(coro: Coroutine[Any, Any, T]) -> T:
    """Run one scenario's coroutine to its end in a process whose collector is set as
    ``awa-fast serve`` sets its own (awa_fast.runtime.work.collector): the pool the harness runs
    in-process is the one serve runs."""
    import uvloop

    with collector.settled():
        return uvloop.run(coro)


def run_planned(
    server_url: str,
    planned: Planned,
    *,
    runs: int,
    progress: Callable[[int, float], None] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """``runs`` runs of one configuration, each on a fresh database. ``progress(run, done)``
    is told how far each run is."""
    options = planned.options
    results = []
    for run in range(runs):
        report = functools.partial(progress, run) if progress else None
        with fresh_database(server_url) as url:
            coro = SCENARIOS[planned.scenario](
                url, jobs=planned.jobs, processes=planned.processes, progress=report, **options
            )
            results.append({**run_as_served(coro), "run": run + 1})
            if on_result is not None:
                on_result(results[-1])
    return results


def primary(result: dict[str, Any]) -> float:
    """The figure a row's median is taken by: pickup p50 for latency, end-to-end p99 for
    sustained (its target; its jobs/s is mostly the rate it offered), else jobs/s."""
    if result["scenario"] == "latency":
        return float(result["latency_ms"]["p50"])
    if result["scenario"] == "sustained":
        return float(result["latency_ms"]["p99"])
    return float(result["jobs_per_s"])


def median_row(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose primary figure is the median (its own counters stay consistent)."""
    ordered = sorted(results, key=primary)
    median = dict(ordered[len(ordered) // 2])
    median["median_of"] = len(results)
    median["jobs_per_s_all"] = [r["jobs_per_s"] for r in results]
    median["jobs_per_s"] = statistics.median(r["jobs_per_s"] for r in results)
    return median


def run_all(server_url: str, planned: list[Planned], *, runs: int) -> list[dict[str, Any]]:
    """Every configuration ``runs`` times, with a progress bar.

    Each ``sustained`` run measures its basis just before it offers a share of it: the
    median of three drains of the drain scenario's job count, on the run's own database.
    A machine's speed drifts from minute to minute, so a drain measured minutes earlier
    would set a load that says more about the drift than about the pool."""
    bar = ProgressBar(len(planned) * runs)
    results: list[dict[str, Any]] = []
    for item in planned:

        def report(run: int, done: float, label: str = item.label) -> None:
            bar.update(label, done)

        results += run_planned(
            server_url,
            item,
            runs=runs,
            progress=report,
            on_result=lambda result: bar.finish(describe(result)),
        )
    return results


def describe(result: dict[str, Any]) -> str:
    """One line per run for people watching."""
    name = " ".join(x for x in (result["scenario"], result["system"], result["variant"]) if x)
    line = (
        f"{name}: {result['jobs_per_s']:,.0f} jobs/s, {result['commits_per_job']:.4f} "
        f"commits/job, {result['wal_bytes_per_job']:,.0f} B WAL/job"
    )
    if "burn_ms_measured" in result:
        line += (
            f", burn {result['burn_ms_measured']:.3f} ms/job measured:"
            f" {result['jobs_per_s_normalized']:,.0f} jobs/s at {result['burn_ms']:g} ms"
        )
    if "latency_ms" in result:
        lat = result["latency_ms"]
        line += f", latency p50 {lat['p50']:.2f} / p95 {lat['p95']:.2f} / p99 {lat['p99']:.2f} ms"
    return line


def save_results(path: Path, results: list[dict[str, Any]]) -> None:
    """Write ``results`` as JSON lines into ``path``, replacing earlier runs of the same
    configurations and keeping the others (``bench drain`` then ``bench latency`` into one
    folder leaves both)."""

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r.get("scenario"), r.get("system"), r.get("variant", ""))

    fresh = {key(r) for r in results}
    kept = []
    if path.exists():
        lines = path.read_text().splitlines()
        kept = [r for r in map(json.loads, filter(None, lines)) if key(r) not in fresh]
    path.write_text("".join(json.dumps(r) + "\n" for r in [*kept, *results]))


class ProgressBar:
    """A one-line progress bar on stderr (plain text, no dependency), redrawn at most ten
    times a second; on a non-terminal it prints one line per finished configuration."""

    def __init__(self, total: int, *, stream: Any = None) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.done = 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._drawn = 0.0

    def update(self, label: str, fraction: float) -> None:
        now = time.monotonic()
        if not self.tty or (now - self._drawn < 0.1 and fraction < 1.0):
            return
        self._drawn = now
        overall = (self.done + min(max(fraction, 0.0), 1.0)) / max(self.total, 1)
        filled = round(30 * overall)
        bar = "#" * filled + "." * (30 - filled)
        line = f"\r[{bar}] {overall:4.0%} {self.done + 1}/{self.total} {label}"
        self.stream.write(line[:120].ljust(120))
        self.stream.flush()

    def finish(self, summary: str) -> None:
        """One run is over: leave its summary line and move on."""
        self.done += 1
        self.stream.write(("\r" if self.tty else "") + summary.ljust(120 if self.tty else 0) + "\n")
        self.stream.flush()
