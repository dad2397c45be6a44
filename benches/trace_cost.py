"""What traces cost a job (awa_fast.tracing; docs/observability.md, "Traces"), without a
database: ns a call of the check each insert call and each attempt makes, and us a row of
a worker's path (benches/worker_path.py: no-op async handlers, the worker's collector
settings), in each state a process can be in, in the order a process moves through them
(the trace API cannot be unloaded, nor its provider unset):

1. OpenTelemetry not loaded (not installed, or not imported by the application);
2. its trace API loaded, no SDK provider set;
3. an SDK provider set, traces off (``traces=False``; AWA_FAST_TRACES=0 is the same check);
4. an SDK provider set, traces on: a consumer span a job (made, no processor exports it).

Each figure is the median of ``--runs``.

    PYTHONPATH=. python benches/trace_cost.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from collections.abc import Callable

from awa_fast import tracing
from benches.worker_path import measured


def check_ns(on: bool, runs: int, check: Callable[[bool], object] = tracing.active) -> float:
    """ns a call of ``check(on)``: ``tracing.active``, or for scale an empty function."""
    number = 1_000_000
    times = timeit.repeat(lambda: check(on), number=number, repeat=runs)
    return statistics.median(times) / number * 1e9


def empty(on: bool) -> None:
    return None


def row_us(traces: bool, rows: int, size: int, runs: int) -> float:
    return statistics.median(
        measured(rows, size, worker_gc=True, traces=traces) for _ in range(runs)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    assert "opentelemetry.trace" not in sys.modules, "loaded before the first state"
    print("| state | the check, ns a call | worker path, us a row |")
    print("|---|---|---|")
    print(f"| for scale: a call of an empty function | {check_ns(True, opts.runs, empty):.0f} | |")

    def state(name: str, *, on: bool) -> None:
        check = check_ns(on, opts.runs)
        row = row_us(on, opts.rows, opts.batch, opts.runs)
        print(f"| {name} | {check:.0f} | {row:.2f} |", flush=True)

    state("OpenTelemetry not loaded", on=True)
    from opentelemetry import trace

    state("trace API loaded, no provider", on=True)
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    state("SDK provider, traces off", on=False)
    state("SDK provider, traces on", on=True)


if __name__ == "__main__":
    main()
