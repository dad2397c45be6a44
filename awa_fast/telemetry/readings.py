"""What telemetry reports: awa-fast's metric catalogue (awa_fast.runtime.metrics, the
numbers a runner's Prometheus endpoint serves) for the whole process.

A process may run several runners (several clients, on several loops): each metric's
readings from all of them are combined by the metric's own rule (:attr:`Metric.combine`).
Counters are the process's totals over every runner it ran while telemetry was on, each
counted from its own start: a runner that stops leaves its final counts in them, so they
only grow (cumulative sums, as the Awa SDK's). Gauges are the live runners' readings now;
the queues' depths are read from each database the live runners use once a collection
(:meth:`Readings.refresh`), and added up over those databases.
Nothing here knows OpenTelemetry; awa_fast.telemetry.otel hands these numbers to it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping

from awa_fast.runtime.metrics import METRICS, Metric, Value, read_depths
from awa_fast.runtime.snapshot import LIVE, Snapshot

# A metric's numbers by label value (None: a metric without a label).
Numbers = dict[str | None, float]

# The runners' counters, whose stopped runners' final counts are kept.
COUNTERS = tuple(m for m in METRICS if m.type == "counter" and m.process is None)


class Readings:
    """The process's numbers, metric by metric, while telemetry is on (between
    :meth:`start` and :meth:`stop`)."""

    def __init__(self) -> None:
        # Readers may come from more than one thread (the export thread, shutdown's).
        self._lock = threading.Lock()
        self._retired: dict[Metric, Numbers] = {}  # final counts of runners that stopped
        self._depths: dict[str, dict[str, int]] | None = None  # as of the last refresh

    def start(self) -> None:
        LIVE.watch(True)

    def stop(self) -> None:
        LIVE.watch(False)

    def refresh(self) -> None:
        """Read the queues' depths for the collection that follows: once per database the
        live runners use (None while none can be reached)."""
        read = [depths for db in LIVE.databases() if (depths := read_depths(db)) is not None]
        summed: dict[str, dict[str, int]] = {}
        for depths in read:
            for state, by_queue in depths.items():
                into = summed.setdefault(state, {})
                for queue, n in by_queue.items():
                    into[queue] = into.get(queue, 0) + n
        with self._lock:
            self._depths = summed if read else None

    def read(self, metric: Metric) -> Numbers:
        """``metric``'s numbers for the process now (empty while no runner has any; a
        metric of the process's own, whether or not it runs a runner)."""
        if metric.process is not None:
            return _numbers(metric.process())
        with self._lock:
            live, stopped = LIVE.take()
            live = [dataclasses.replace(s, depths=self._depths) for s in live]
            for counter in COUNTERS:
                add(counter, self._retired.setdefault(counter, {}), combined(counter, stopped))
            numbers = combined(metric, live)
            if metric.type == "counter":
                add(metric, numbers, self._retired[metric])
            return numbers


def combined(metric: Metric, snapshots: Iterable[Snapshot]) -> Numbers:
    """``metric``'s readings of runners' ``snapshots``, combined."""
    numbers: Numbers = {}
    for snapshot in snapshots:
        add(metric, numbers, _numbers(metric.read(snapshot)))
    return numbers


def add(metric: Metric, into: Numbers, numbers: Mapping[str | None, float]) -> None:
    """Combine ``numbers`` of ``metric`` into ``into``."""
    for key, number in numbers.items():
        into[key] = metric.combine(into[key], number) if key in into else number


def _numbers(value: Value) -> Numbers:
    """A reading as numbers by label value; a copy, since runners go on counting in other
    threads."""
    if isinstance(value, Mapping):
        return {key: number for key, number in value.items()}
    return {} if value is None else {None: value}
