"""``python -m benches <command>``: benchmark entry points.

Commands:
  peers   run a scenario (drain, cpu, io, latency, retry, scheduled) with peer queues
          (pgqueuer, awa-pg, procrastinate, chancy), each in its own virtualenv; see
          benches/README.md.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("peers", help="benchmark peer job queues on the same Postgres")
    p.add_argument(
        "--database-url",
        required=True,
        help="server to use; a fresh database bench_<system>_<n> is created per run",
    )
    p.add_argument(
        "--scenario",
        choices=["drain", "cpu", "io", "latency", "retry", "scheduled"],
        default="drain",
        help="drain: no-op handlers; cpu: handlers burn ~1 ms of pure-Python CPU;"
        " io: handlers await asyncio.sleep(0.01); latency: jobs inserted one at a time"
        " at --rate into idle workers, pickup latency; retry: every job fails once;"
        " scheduled: all jobs due at one moment --lead s ahead",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="jobs per run (default 20000 for drain and io, 5000 for cpu, 500 for latency,"
        " 10000 for retry and scheduled)",
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--systems", default="pgqueuer,awa-pg,procrastinate,chancy")
    p.add_argument(
        "--processes", default="1", help="worker processes per run, or a comma list such as 1,2"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=0,
        help="the queue's concurrency over all worker processes, split evenly; each driver"
        " maps it onto its peer's own limit (default 0: each driver's own setting)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    p.add_argument("--cpu-ms", type=float, default=1.0, help="CPU per job in the cpu scenario")
    p.add_argument("--rate", type=float, default=50.0, help="latency: jobs/s inserted")
    p.add_argument(
        "--lead",
        type=float,
        default=0.0,
        help="scheduled: seconds from the start of the insert to the due moment"
        " (default 2 + jobs/2000)",
    )
    p.add_argument("--upgrade", action="store_true", help="pip install --upgrade the peers")

    from benches import pressure

    pressure.add_arguments(
        sub.add_parser("pressure", help="pickup and dead tuples under a held xmin horizon")
    )

    args = parser.parse_args(argv)
    if args.command == "peers":
        from benches.peers import harness

        return harness.main(args)
    if args.command == "pressure":
        return pressure.main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
