"""Outcome ring throughput: N producer processes -> 1 consumer, records/s.

Each producer is a forked process pushing ``records / producers`` records into one
``OutcomeRing``; the parent drains with ``drain(batch, timeout)`` and checks the count. The
clock starts when the producers are released (a pipe, after fork) and stops when the last
record is drained. Prints one markdown row per payload size: the median of ``--runs`` runs.

    python benches/ring_bench.py                      # 2 producers, 1M records, 0 and 200 B
    python benches/ring_bench.py --slot-bytes 256 --payloads 0 200 1000
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from awa_fast._core import OutcomeRing


def one_run(
    records: int, producers: int, payload_len: int, capacity: int, slot_bytes: int, batch: int
) -> float:
    ring = OutcomeRing(capacity, slot_bytes)
    payload = b"x" * payload_len
    per = records // producers
    go_r, go_w = os.pipe()
    pids = []
    for p in range(producers):
        pid = os.fork()
        if pid == 0:  # producer
            code = 1
            try:
                os.read(go_r, 1)
                push = ring.push
                for i in range(per):
                    push(p, i, 0, 1, 0.0, payload)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    total = per * producers
    got = 0
    os.write(go_w, b"g" * producers)
    t0 = time.perf_counter()
    drain = ring.drain
    while got < total:
        recs = drain(batch, 5.0)
        if not recs:
            raise RuntimeError(f"stalled at {got} of {total} records")
        got += len(recs)
    elapsed = time.perf_counter() - t0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise RuntimeError(f"producer {pid} failed: status {status:#x}")
    os.close(go_r)
    os.close(go_w)
    return total / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--payloads", type=int, nargs="+", default=[0, 200])
    ap.add_argument("--capacity", type=int, default=65536)
    ap.add_argument("--slot-bytes", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4096, help="max_records per drain call")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    print(
        f"<!-- {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, capacity={args.capacity}, "
        f"slot_bytes={args.slot_bytes}, drain batch={args.batch} -->"
    )
    print(f"| producers | records | payload B | records/s (median of {args.runs}) | runs |")
    print("|---:|---:|---:|---:|---|")
    for payload_len in args.payloads:
        rates = [
            one_run(
                args.records,
                args.producers,
                payload_len,
                args.capacity,
                args.slot_bytes,
                args.batch,
            )
            for _ in range(args.runs)
        ]
        runs = ", ".join(f"{r / 1e6:.2f}M" for r in rates)
        print(
            f"| {args.producers} | {args.records:,} | {payload_len} | "
            f"{statistics.median(rates):,.0f} | {runs} |"
        )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
