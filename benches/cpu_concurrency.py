"""The cpu scenario at several queue concurrencies, with and without prefetch, side by side:
rounds alternate the settings, so slow minutes land on both. Prints one markdown row per
(concurrency, prefetch): median jobs/s, and the share of the cores' capacity it used (the
measured burn's cost x jobs/s / cores).

    PYTHONPATH=. python benches/cpu_concurrency.py URL [--jobs 3000] [--runs 3]
        [--concurrency 2 4 10 50 500] [--prefetch 0 default] [--processes 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from awa_fast.bench.measure import fresh_database
from awa_fast.bench.run import run_as_served
from awa_fast.bench.throughput import cpu


def one(url: str, *, jobs: int, processes: int, concurrency: int, prefetch: str) -> dict[str, Any]:
    config = {} if prefetch == "default" else {"prefetch": int(prefetch)}
    return run_as_served(
        cpu(url, jobs=jobs, processes=processes, concurrency=concurrency, **config)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[2, 4, 10, 50, 500])
    parser.add_argument("--prefetch", nargs="+", default=["0", "default"])
    opts = parser.parse_args()
    cores = os.cpu_count() or 1
    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for _ in range(opts.runs):
        for concurrency in opts.concurrency:
            for prefetch in opts.prefetch:
                with fresh_database(opts.url) as url:
                    results.setdefault((concurrency, prefetch), []).append(
                        one(
                            url,
                            jobs=opts.jobs,
                            processes=opts.processes,
                            concurrency=concurrency,
                            prefetch=prefetch,
                        )
                    )
    print("| concurrency | prefetch | jobs/s (median) | of the cores |")
    print("|--:|--:|--:|--:|")
    for (concurrency, prefetch), runs in results.items():
        rate = statistics.median(r["jobs_per_s"] for r in runs)
        burn_s = statistics.median(r["burn_ms_measured"] for r in runs) / 1000
        print(f"| {concurrency} | {prefetch} | {rate:,.0f} | {rate * burn_s / cores:.0%} |")


if __name__ == "__main__":
    main()
