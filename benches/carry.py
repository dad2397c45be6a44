"""What the pool carries beside a producer: drain, then ``sustained`` at each fixed rate, in
rounds, each run on a fresh database. Prints one line per run: the drain rate, or the
offered and completed jobs/s with the end-to-end p50/p99.

The sustained scenario offers a share of the drain rate, which is measured with no
producer; this asks instead up to which rate the pool keeps up while a producer process
shares the machine with it, measured in the same minutes as the drain it is compared with.

    PYTHONPATH=. python benches/carry.py URL --rates 30000 33000 36000 --rounds 2
"""

from __future__ import annotations

import argparse

from awa_fast.bench.latency import sustained
from awa_fast.bench.measure import fresh_database
from awa_fast.bench.run import run_as_served
from awa_fast.bench.throughput import drain


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server_url", help="Postgres server URL (a database per run is made)")
    parser.add_argument("--rates", type=float, nargs="+", required=True, help="jobs/s offered")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2, help="worker processes (0: none)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per rate")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    args = parser.parse_args(argv)
    processes = args.processes or None
    for _ in range(args.rounds):
        with fresh_database(args.server_url) as url:
            drained = run_as_served(drain(url, jobs=args.jobs, processes=processes))
        print(f"drain {drained['jobs_per_s']:,.0f} jobs/s", flush=True)
        for rate in args.rates:
            with fresh_database(args.server_url) as url:
                run = sustained(
                    url, jobs=args.jobs, processes=processes, rate=rate, duration=args.duration
                )
                result = run_as_served(run)
            latency = result["latency_ms"]
            print(
                f"offered {rate:,.0f} completed {result['completed_per_s']:,.0f} jobs/s, "
                f"p50 {latency['p50']:.0f} / p99 {latency['p99']:.0f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
