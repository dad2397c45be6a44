"""The cpu scenario at several queue concurrencies, awa-fast beside its peers: each round
runs every system at every concurrency, so slow minutes land on all of them.

    PYTHONPATH=. python benches/cpu_concurrency.py URL [--jobs 3000] [--runs 3]
        [--concurrency 2 4 10 50 500] [--systems awa-fast,pgqueuer,awa-pg,no-queue]
        [--handlers sync async] [--prefetch default] [--processes 2] [--cpu-ms 1.0]
        [--timeout 300]

awa-fast runs the pool ``awa-fast serve`` runs (``run_as_served``) with ``--processes``
workers, once for each kind of handler in ``--handlers`` (``def``, or ``async def`` burning
on its worker's loop as the peers' handlers do) and each ``--prefetch`` (``default`` leaves
it to the runner, ``0`` turns it off: ``--prefetch 0 default`` compares the two). Each
peer runs through the peer harness (benches/peers) with as many processes, the queue's
concurrency split evenly over them and mapped by its driver onto the peer's own limit.
Every system burns the same loop count per job: one calibration, pinned in
AWA_FAST_BENCH_CPU_ITERATIONS, which awa-fast's cpu scenario reads and the harness hands
to its drivers. ``no-queue`` is the ceiling: the same burns taken one at a time by as
many plain processes from a shared counter, no database, timed from the moment all of
them are up, so its share of the cores is what this machine's kernel and hypervisor
leave of it with no queue at all.

Prints one markdown table, a row per concurrency: each system's median jobs/s and the
share of the cores it used (each run's measured burn's cost x its jobs/s / cores, the
median run's), and awa-fast's share over the best peer's. Every run's row goes to
benches/results/<time>-cpu-concurrency.jsonl.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

from awa_fast.bench.handlers import burn_cpu, burn_loops
from awa_fast.bench.measure import fresh_database, server_settings
from awa_fast.bench.run import run_as_served
from awa_fast.bench.throughput import HANDLERS, cpu
from benches.peers import harness

AWA_FAST = "awa-fast"
NO_QUEUE = "no-queue"
# One run of a column at a concurrency, in a round: its result row.
Run = Callable[[int, int], dict[str, Any]]


def awa_fast(
    url: str,
    concurrency: int,
    round_: int,
    *,
    opts: argparse.Namespace,
    prefetch: str,
    handler: str,
) -> dict[str, Any]:
    config: dict[str, Any] = {} if prefetch == "default" else {"prefetch": int(prefetch)}
    with fresh_database(url) as db:
        return run_as_served(
            cpu(
                db,
                jobs=opts.jobs,
                processes=opts.processes,
                ms=opts.cpu_ms,
                concurrency=concurrency,
                handler=handler,
                **config,
            )
        )


def peer(
    url: str,
    concurrency: int,
    round_: int,
    *,
    opts: argparse.Namespace,
    name: str,
    versions: dict[str, str],
) -> dict[str, Any]:
    system = harness.PEERS[name]
    row = harness.run_once(
        system,
        url,
        "cpu",
        opts.jobs,
        opts.processes,
        round_,
        burn_loops(opts.cpu_ms),
        opts.timeout,
        cpu_ms=opts.cpu_ms,
        concurrency=concurrency,
    )
    return {**row, "packages": harness.peer_packages(system, versions)}


def _burn_until_done(
    taken: Synchronized[int], jobs: int, loops: int, go: Event, out: Connection
) -> None:
    """Take burns one at a time until ``jobs`` are taken; send how many this process
    burned and the CPU seconds they took."""
    out.send("ready")
    go.wait()
    done, burned = 0, 0.0
    while True:
        with taken.get_lock():
            if taken.value >= jobs:
                break
            taken.value += 1
        burned += burn_cpu(loops)
        done += 1
    out.send((done, burned))


def no_queue(concurrency: int, round_: int, *, opts: argparse.Namespace) -> dict[str, Any]:
    """The burns alone: ``--jobs`` of them taken one at a time from a shared counter by
    ``--processes`` forked processes (the concurrency does not apply), timed from the
    moment every process is up. Taken as they go, not split up front: a process on a
    slower core would leave the other idle at the end, which a queue does not."""
    fork = multiprocessing.get_context("fork")
    loops, go, taken = burn_loops(opts.cpu_ms), fork.Event(), fork.Value("q", 0)
    pipes = [fork.Pipe(duplex=False) for _ in range(opts.processes)]
    procs = [
        fork.Process(target=_burn_until_done, args=(taken, opts.jobs, loops, go, send))
        for _, send in pipes
    ]
    for proc in procs:
        proc.start()
    for recv, _ in pipes:
        recv.recv()
    started = time.perf_counter()
    go.set()
    shares = [recv.recv() for recv, _ in pipes]
    elapsed = time.perf_counter() - started
    for proc in procs:
        proc.join()
    return {
        "system": NO_QUEUE,
        "ok": True,
        "jobs": sum(done for done, _ in shares),
        "jobs_by_process": [done for done, _ in shares],
        "elapsed_s": round(elapsed, 6),  # a smoke run's burns take milliseconds
        "jobs_per_s": round(opts.jobs / elapsed, 1),
        "burn_ms_measured": round(sum(burned for _, burned in shares) / opts.jobs * 1000, 4),
    }


def columns(opts: argparse.Namespace) -> dict[str, Run]:
    """The table's columns, each with how to run it: awa-fast once per handler kind and
    prefetch setting, then each peer (its virtualenv made first)."""
    out: dict[str, Run] = {}
    for name in opts.systems.split(","):
        if name == AWA_FAST:
            for handler, prefetch in itertools.product(opts.handlers, opts.prefetch):
                label = " ".join(
                    [AWA_FAST]
                    + ([] if handler == "sync" else [handler])
                    + ([] if prefetch == "default" else [f"prefetch {prefetch}"])
                )
                out[label] = functools.partial(
                    awa_fast, opts.url, opts=opts, prefetch=prefetch, handler=handler
                )
        elif name == NO_QUEUE:
            out[name] = functools.partial(no_queue, opts=opts)
        else:
            versions = harness.ensure_venv(harness.PEERS[name])
            out[name] = functools.partial(peer, opts.url, opts=opts, name=name, versions=versions)
    return out


def attempt(run: Run, concurrency: int, round_: int) -> dict[str, Any]:
    """One run's row; a run that raises becomes a failed row, so one bad minute does not
    cost the rounds around it (the peer harness does the same for its peers)."""
    try:
        return run(concurrency, round_)
    except Exception as exc:
        harness.log(f"  run failed: {exc!r}")
        return {"ok": False, "jobs_per_s": None, "error": f"{type(exc).__name__}: {exc}"}


def figures(runs: list[dict[str, Any]], cores: int) -> tuple[float, float] | None:
    """Median jobs/s of the runs that finished, and the median share of the cores they
    used: each run's jobs/s times its own burn's cost, since the same burn takes this
    machine more or less time from one minute to the next."""
    ok = [r for r in runs if r.get("jobs_per_s") is not None and r.get("ok", True)]
    if not ok:
        return None
    rate = statistics.median(r["jobs_per_s"] for r in ok)
    share = statistics.median(r["jobs_per_s"] * r["burn_ms_measured"] / 1000 for r in ok)
    return rate, share / cores


def table(results: dict[tuple[int, str], list[dict[str, Any]]], labels: list[str]) -> str:
    """A row per concurrency: each column's figures, then awa-fast's share of the cores
    over the best peer's (jobs/s at the same burn cost)."""
    cores = os.cpu_count() or 1
    peers = [label for label in labels if not label.startswith(AWA_FAST) and label != NO_QUEUE]
    ratios = [label for label in labels if label.startswith(AWA_FAST)] if peers else []
    head = ["concurrency"]
    for label in labels:
        head += [f"{label} jobs/s", f"{label} of the cores"]
    head += [f"{label} / best peer, by share" for label in ratios]
    out = ["| " + " | ".join(head) + " |", "|" + "--:|" * len(head)]
    for concurrency in sorted({c for c, _ in results}):
        got = {label: figures(results.get((concurrency, label), []), cores) for label in labels}
        cells = [str(concurrency)]
        for label in labels:
            mine = got[label]
            cells += [f"{mine[0]:,.0f}", f"{mine[1]:.0%}"] if mine else ["n/a", "n/a"]
        best = max((figure[1] for p in peers if (figure := got[p])), default=0.0)
        for label in ratios:
            mine = got[label]
            cells.append(f"{mine[1] / best:.2f}" if mine and best else "n/a")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[2, 4, 10, 50, 500])
    parser.add_argument("--systems", default=f"{AWA_FAST},pgqueuer,awa-pg,{NO_QUEUE}")
    parser.add_argument("--prefetch", nargs="+", default=["default"])
    parser.add_argument("--handlers", nargs="+", choices=HANDLERS, default=list(HANDLERS))
    parser.add_argument("--cpu-ms", type=float, default=1.0, help="CPU per job")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per peer run")
    opts = parser.parse_args()
    try:
        for concurrency in opts.concurrency:
            harness.process_share(concurrency, opts.processes)
    except ValueError as exc:
        parser.error(str(exc))
    # One calibration for every system, pinned where awa-fast's cpu() reads its count.
    os.environ["AWA_FAST_BENCH_CPU_ITERATIONS"] = str(burn_loops(opts.cpu_ms))
    runs = columns(opts)
    facts = server_settings(opts.url)
    harness.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = harness.RESULTS_DIR / f"{time.strftime('%Y%m%dT%H%M%S')}-cpu-concurrency.jsonl"
    harness.log(f"{burn_loops(opts.cpu_ms)} loop iterations a job; results -> {path}")
    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    with open(path, "a") as out:
        for round_ in range(1, opts.runs + 1):
            for concurrency in opts.concurrency:
                for label, run in runs.items():
                    harness.log(f"round {round_}: {label} at concurrency {concurrency}")
                    row = {**attempt(run, concurrency, round_), "column": label}
                    row.update(round=round_, concurrency=concurrency, server=facts)
                    results.setdefault((concurrency, label), []).append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    print(table(results, list(runs)))
    harness.log(f"wrote {path}")


if __name__ == "__main__":
    main()
