"""Pickup under a held xmin horizon: the pressure shape of the public
postgresql-job-queue-benchmarking harness (its ``idle-in-tx`` phase) run against awa-fast.

A producer process offers a fixed rate of jobs to the 2-worker pool ``awa-fast serve``
runs, through three phases on one time axis: clean, then hold (one more connection runs
``BEGIN; SELECT txid_current()`` and stays idle in that transaction, so vacuum can remove
no row deleted or updated after it began), then recovery. The question is whether a queue
whose storage makes dead tuples slows down while they cannot be removed.

Measured:

- pickup per job: handler start minus insert commit, as the ``latency`` scenario takes it
  (``time.time()`` right after the producer's commit returned, ``time.time()`` first thing
  in the handler, written to a shared board), as p50 / p99 per phase and per window of
  insert time, so that a trend across the hold shows;
- jobs/s inserted and completed (outcomes committed) per window and per phase;
- every ``--sample-every`` s, ``n_dead_tup``, ``n_live_tup``, total size and autovacuum
  count of every ``awa_fast`` table (``pg_stat_user_tables``), and the age of the held
  transaction: peak dead tuples per table and phase, and dead tuples per job completed
  during the hold;
- a verdict: throughput holds, hold p50 and p99 within 1.5x of clean, no upward trend
  across the hold.

    python -m benches pressure --rate 500                            # 2 + 4 + 2 minutes
    python -m benches pressure --rate 3000 --clean 30 --hold 60 --recovery 30

Writes ``<out>/<timestamp>-pressure-<rate>.json`` (windows, samples, phases, verdict) and
prints a markdown summary. Run as a module (``python -m benches.pressure``), this file is
the producer process the bench spawns.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import math
import os
import statistics
import sys
import tempfile
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from awa_fast.bench.handlers import Board, Stamp
from awa_fast.bench.measure import (
    busy_share,
    cpu_jiffies,
    environment,
    fresh_database,
    percentiles,
    wait_done,
    wait_for_listener,
)
from awa_fast.bench.run import run_as_served
from awa_fast.client import AsyncClient
from awa_fast.producer_sync import insert, insert_many
from awa_fast.runtime.runner import Runner
from awa_fast.worker import Job

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("clean", "hold", "recovery")
# The targets: completed within a few % of offered, the hold's pickup within 1.5x of the
# clean phase's, and its last quarter's p99 not much above its first quarter's.
THROUGHPUT_FLOOR = 0.95
LATENCY_CEILING = 1.5
TREND_CEILING = 1.25
# Above this rate one transaction a job is more than one producer connection commits on
# a durable server, so the producer batches per tick instead.
ONE_BY_ONE_MAX_RATE = 1000.0
BATCH_TICK = 0.01

# -- the shape -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shape:
    """Phase lengths, offered rate and how finely it is measured, all in seconds."""

    rate: float
    clean: float
    hold: float
    recovery: float
    window: float = 10.0
    sample_every: float = 5.0
    tick: float = 0.0  # 0: one insert a job, each its own transaction

    @property
    def total(self) -> float:
        return self.clean + self.hold + self.recovery

    @property
    def jobs(self) -> int:
        """Jobs offered over the run: job n is due at n / rate."""
        return math.ceil(self.rate * self.total)

    def bounds(self, phase: str) -> tuple[float, float]:
        """Where ``phase`` begins and ends, in seconds from the first job."""
        lengths = dict(zip(PHASES, (self.clean, self.hold, self.recovery), strict=True))
        begin = sum(lengths[p] for p in PHASES[: PHASES.index(phase)])
        return begin, begin + lengths[phase]

    def steps(self, seconds: float, step: float) -> int:
        """``seconds`` as a whole number of ``step``s; raises if it is not one."""
        count = round(seconds / step)
        if count < 1 or abs(count * step - seconds) > 1e-6:
            raise ValueError(f"{seconds:g} s is not a whole number of {step:g} s steps")
        return count

    def check(self) -> None:
        """Windows never straddle two phases and every window ends on a sample, so each
        figure of a phase is made of whole windows."""
        if self.rate <= 0:
            raise ValueError("the rate must be positive")
        self.steps(self.window, self.sample_every)
        for seconds in (self.clean, self.hold, self.recovery):
            self.steps(seconds, self.window)

    def producing(self) -> str:
        """How the producer offers the rate, said in the report."""
        if not self.tick:
            return "one `insert` a job, each its own transaction, job n at n / rate"
        per = self.rate * self.tick
        return (
            f"one `insert_many` every {self.tick * 1000:g} ms of the jobs due since the last"
            f" (about {per:g} a transaction); a job's commit time is its batch's"
        )


# -- the producer process ------------------------------------------------------------------


def produce(url: str, shape: Shape, path: str) -> None:
    """Connect, say ``ready``, read the start moment (epoch s) from stdin, offer the jobs
    until the run's end, then write each job's commit time (epoch s) to ``path``. The
    commit times stay in memory until the end: no file write among the inserts."""
    committed = array("d")
    with psycopg.connect(url, autocommit=True, application_name="awa-fast bench producer") as conn:
        print("ready", flush=True)
        start = float(sys.stdin.readline())
        time.sleep(max(0.0, start - time.time()))
        offer = _one_by_one if not shape.tick else _batches
        offer(conn, shape, start, committed)
    with open(path, "wb") as out:
        committed.tofile(out)


def _one_by_one(
    conn: psycopg.Connection[Any], shape: Shape, start: float, committed: array[float]
) -> None:
    """Job n at start + n / rate; when behind, back to back until the run's end."""
    end = start + shape.total
    for n in range(shape.jobs):
        delay = start + n / shape.rate - time.time()
        if delay > 0:
            time.sleep(delay)
        elif time.time() >= end:
            return
        insert(conn, Stamp(n))
        committed.append(time.time())


def _batches(
    conn: psycopg.Connection[Any], shape: Shape, start: float, committed: array[float]
) -> None:
    """Every tick, one ``insert_many`` of the jobs that fell due since the last one."""
    end = start + shape.total
    for step in itertools.count(1):
        now = time.time()
        if now >= end or len(committed) >= shape.jobs:
            return
        due = min(shape.jobs, math.floor(shape.rate * (now - start)) + 1)
        if due > len(committed):
            insert_many(conn, [Stamp(n) for n in range(len(committed), due)])
            at = time.time()
            committed.extend(itertools.repeat(at, due - len(committed)))
        time.sleep(max(0.0, start + step * shape.tick - time.time()))


def _producer_main(argv: list[str]) -> None:
    """``python -m benches.pressure URL RATE CLEAN HOLD RECOVERY TICK PATH``."""
    url, rate, clean, hold, recovery, tick, path = argv
    shape = Shape(float(rate), float(clean), float(hold), float(recovery), tick=float(tick))
    produce(url, shape, path)


async def _spawn_producer(url: str, shape: Shape, path: str) -> asyncio.subprocess.Process:
    """A fresh interpreter, not a fork of this one: the pool forks from here, and the
    producer must not share its event loop or its cores' scheduling with the supervisor."""
    numbers = (shape.rate, shape.clean, shape.hold, shape.recovery, shape.tick)
    pipe = asyncio.subprocess.PIPE
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "benches.pressure", url, *map(str, numbers), path),
        stdin=pipe,
        stdout=pipe,
        stderr=pipe,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": _python_path()},
    )
    assert child.stdout is not None
    if (await child.stdout.readline()).strip() != b"ready":
        await _finished(child)
        raise RuntimeError("the producer ended before it was ready")
    return child


def _python_path() -> str:
    """This tree first, so the producer inserts with the code the pool runs."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


async def _finished(child: asyncio.subprocess.Process) -> None:
    """Until the producer has exited; raises with its stderr if it failed."""
    _, err = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"producer failed ({child.returncode}): {err.decode()[-2000:]}")


# -- what runs beside the pool -------------------------------------------------------------


async def _sleep_until(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.time()))


@dataclass(frozen=True, slots=True)
class Held:
    """The held transaction: its xid, and when it began and ended (epoch s)."""

    xid: int
    opened: float
    closed: float


async def hold_horizon(url: str, begin: float, end: float) -> Held:
    """From ``begin`` to ``end`` (epoch s), one transaction with an xid sits idle on the
    bench's database: the horizon vacuum may clean up to stays where it began. Connected
    beforehand, so the hold starts on time; in the same database, since Postgres leaves a
    transaction in another database out of this one's horizon."""
    name = "awa-fast bench xmin holder"
    async with await psycopg.AsyncConnection.connect(url, application_name=name) as conn:
        await _sleep_until(begin)
        cur = await conn.execute("SELECT txid_current()")  # BEGIN, then an xid
        row = await cur.fetchone()
        opened = time.time()
        await _sleep_until(end)
        await conn.rollback()
        assert row is not None
        return Held(int(row[0]), opened, time.time())


_TABLES = (
    "SELECT relname, n_dead_tup, n_live_tup, pg_total_relation_size(relid),"
    " autovacuum_count FROM pg_stat_user_tables WHERE schemaname = 'awa_fast'"
    " ORDER BY relname"
)
_HELD = (
    "SELECT max(extract(epoch FROM clock_timestamp() - xact_start)) FROM pg_stat_activity"
    " WHERE datname = current_database() AND state = 'idle in transaction'"
    " AND backend_xid IS NOT NULL"
)


async def sample(
    url: str, runner: Runner, start: float, shape: Shape, samples: list[dict[str, Any]]
) -> None:
    """Append one sample every ``sample_every`` s from ``start`` to the run's end, on a
    fixed schedule so that each window and phase begins and ends on one."""
    name = "awa-fast bench sampler"
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, application_name=name
    ) as conn:
        for k in range(shape.steps(shape.total, shape.sample_every) + 1):
            await _sleep_until(start + k * shape.sample_every)
            samples.append(await _sample_once(conn, runner, start))


async def _sample_once(
    conn: psycopg.AsyncConnection[Any], runner: Runner, start: float
) -> dict[str, Any]:
    """Seconds into the run, outcomes committed, the machine's CPU ticks, the age of the
    oldest transaction idle with an xid (the hold, seen from Postgres), and per
    ``awa_fast`` table [dead tuples, live tuples, total bytes, autovacuums so far]."""
    at, committed, jiffies = time.time() - start, runner.committer.committed, cpu_jiffies()
    tables = await (await conn.execute(_TABLES)).fetchall()
    held = await (await conn.execute(_HELD)).fetchone()
    return {
        "t": round(at, 3),
        "committed": committed,
        "jiffies": jiffies,
        "held_s": None if held is None or held[0] is None else round(float(held[0]), 1),
        "tables": {t[0]: [int(t[1]), int(t[2]), int(t[3]), int(t[4])] for t in tables},
    }


# -- one run -------------------------------------------------------------------------------


@dataclass
class Measured:
    """What one run recorded: per job (by number) its commit and handler start, epoch s."""

    start: float
    committed: list[float]
    started: list[float]
    samples: list[dict[str, Any]]
    held: Held


async def measure(url: str, shape: Shape, *, processes: int, concurrency: int) -> Measured:
    """Start the pool as ``serve`` does, then run the producer, the holder and the sampler
    on one clock until the run's end, and wait for every inserted job's outcome."""
    board = Board(shape.jobs)  # before the pool forks, so its workers write here
    client = AsyncClient(url)

    @client.task(Stamp)
    async def stamp(job: Job[Stamp]) -> None:
        board.stamp(job.args.n)

    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="awa-fast-pressure-") as scratch:
        path = str(Path(scratch) / "committed")
        try:
            runner = await client.start({"default": concurrency}, processes=processes)
            await asyncio.to_thread(wait_for_listener, url)
            start, held = await _run_phases(url, runner, shape, path, samples)
            committed = array("d")
            with open(path, "rb") as found:
                committed.frombytes(found.read())
            await wait_done(runner, len(committed), timeout=120.0)
        finally:
            await client.close()
            started = board.read()
            board.close()
    if not all(started[: len(committed)]):
        raise RuntimeError("a committed job has no handler start")
    return Measured(start, committed.tolist(), started[: len(committed)], samples, held)


async def _run_phases(
    url: str, runner: Runner, shape: Shape, path: str, samples: list[dict[str, Any]]
) -> tuple[float, Held]:
    """Producer, holder and sampler from one start moment; returns it and the hold. A
    run that fails ends its producer too."""
    producer = await _spawn_producer(url, shape, path)
    start = time.time() + 0.5  # time for the holder and the sampler to connect
    begin, end = shape.bounds("hold")
    try:
        async with asyncio.TaskGroup() as tasks:
            holding = tasks.create_task(hold_horizon(url, start + begin, start + end))
            tasks.create_task(sample(url, runner, start, shape, samples))
            assert producer.stdin is not None
            producer.stdin.write(f"{start!r}\n".encode())
            tasks.create_task(_finished(producer))
    finally:
        if producer.returncode is None:
            producer.kill()
            await producer.wait()
    return start, holding.result()


# -- the report ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Span:
    """A stretch of the run that is a whole number of sampling steps: a window or a phase."""

    begin: float
    end: float
    first: int  # its samples, first and last
    last: int


def _span(shape: Shape, begin: float, end: float) -> Span:
    every = shape.sample_every
    return Span(begin, end, round(begin / every), round(end / every))


@dataclass(frozen=True, slots=True)
class Timeline:
    """Each job's insert commit as seconds into the run (in order: the producer commits
    in job order) and its pickup ms. A job committed after the run's end (in its last
    batch) counts to the last window."""

    offsets: list[float]
    pickups: list[float]

    @classmethod
    def of(cls, shape: Shape, measured: Measured) -> Timeline:
        latest = shape.total - 1e-6
        jobs = zip(measured.committed, measured.started, strict=True)
        pairs = [(min(c - measured.start, latest), (s - c) * 1000) for c, s in jobs]
        return cls([o for o, _ in pairs], [p for _, p in pairs])

    def between(self, begin: float, end: float) -> list[float]:
        """Pickup ms of the jobs inserted in [begin, end) s of the run."""
        return self.pickups[bisect_left(self.offsets, begin) : bisect_left(self.offsets, end)]


def _figures(timeline: Timeline, samples: list[dict[str, Any]], span: Span) -> dict[str, Any]:
    """Jobs inserted and completed a second, pickup percentiles, the machine's busy share
    and the dead tuples of all tables at its end, over ``span``."""
    first, last = samples[span.first], samples[span.last]
    pickups = timeline.between(span.begin, span.end)
    seconds = max(last["t"] - first["t"], 1e-9)
    return {
        "begin_s": span.begin,
        "inserted_per_s": round(len(pickups) / (span.end - span.begin), 1),
        "completed_per_s": round((last["committed"] - first["committed"]) / seconds, 1),
        "pickup_ms": percentiles(pickups) if pickups else None,
        "cpu_busy": busy_share(first["jiffies"], last["jiffies"]),
        "dead_tuples": sum(row[0] for row in last["tables"].values()),
    }


def windows(
    shape: Shape, timeline: Timeline, samples: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Figures per window of insert time, each labelled with its phase."""
    out = []
    for phase in PHASES:
        begin, end = shape.bounds(phase)
        for w in range(shape.steps(end - begin, shape.window)):
            at = begin + w * shape.window
            span = _span(shape, at, at + shape.window)
            out.append({"phase": phase, **_figures(timeline, samples, span)})
    return out


def tables(shape: Shape, samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per table: peak dead tuples in each phase (a phase's samples include the one it
    begins on) and at the run's end; during the hold, dead tuples gained (its peak less the
    count it began with), that per job completed meanwhile, and the table's size (with
    indexes and TOAST) at its start and end."""
    hold = _span(shape, *shape.bounds("hold"))
    completed = samples[hold.last]["committed"] - samples[hold.first]["committed"]
    names = sorted({name for s in samples for name in s["tables"]})
    out = {}
    for name in names:
        rows = [s["tables"].get(name, [0, 0, 0, 0]) for s in samples]
        peaks = {}
        for phase in PHASES:
            span = _span(shape, *shape.bounds(phase))
            peaks[phase] = max(row[0] for row in rows[span.first : span.last + 1])
        gained = peaks["hold"] - rows[hold.first][0]
        out[name] = {
            "peak_dead": peaks,
            "end_dead": rows[-1][0],
            "hold_dead_gained": gained,
            "hold_dead_per_job": round(gained / completed, 4) if completed else None,
            "hold_mb": [round(rows[i][2] / 2**20, 1) for i in (hold.first, hold.last)],
            "autovacuums": rows[-1][3] - rows[0][3],
        }
    return out


def trend(shape: Shape, timeline: Timeline, hold_windows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pickup p99 of the jobs inserted in the hold's last quarter against its first
    quarter's, and the least-squares slope of the windows' p99 over the hold, ms a minute."""
    begin, end = shape.bounds("hold")
    quarter = (end - begin) / 4
    first = timeline.between(begin, begin + quarter)
    last = timeline.between(end - quarter, end)
    points = [(w["begin_s"] / 60, w["pickup_ms"]["p99"]) for w in hold_windows if w["pickup_ms"]]
    slope = None
    if len({x for x, _ in points}) >= 2:
        slope = round(statistics.linear_regression(*zip(*points, strict=True)).slope, 3)
    return {
        "first_quarter_p99_ms": percentiles(first)["p99"] if first else None,
        "last_quarter_p99_ms": percentiles(last)["p99"] if last else None,
        "p99_slope_ms_per_min": slope,
    }


def verdict(
    rate: float, phases: dict[str, dict[str, Any]], drift: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each target, PASS or FAIL, with the figures it was judged on. Throughput is judged
    against the rate asked for, as the harness does, with what the producer managed to
    insert beside it: a producer held up by slower inserts fails it as surely as jobs left
    unclaimed, and so does a machine too busy to insert at the rate."""
    out = []
    for phase in PHASES:
        done, inserted = phases[phase]["completed_per_s"], phases[phase]["inserted_per_s"]
        name = f"throughput holds in {phase}: completed >= {THROUGHPUT_FLOOR:.0%} of offered"
        detail = f"{done:,.0f} of {rate:,.0f} jobs/s (the producer inserted {inserted:,.0f}/s)"
        out.append(_criterion(name, done >= THROUGHPUT_FLOOR * rate, detail))
    clean, held = phases["clean"]["pickup_ms"], phases["hold"]["pickup_ms"]
    for stat in ("p50", "p99"):
        ok = bool(clean and held and held[stat] <= LATENCY_CEILING * clean[stat])
        detail = f"{held[stat]:.2f} vs {clean[stat]:.2f} ms" if clean and held else "no jobs"
        out.append(_criterion(f"hold {stat} within {LATENCY_CEILING:g}x of clean", ok, detail))
    first, last = drift["first_quarter_p99_ms"], drift["last_quarter_p99_ms"]
    name = f"no upward trend: the hold's last-quarter p99 <= {TREND_CEILING:g}x its first's"
    detail = f"{last} vs {first} ms (windows' p99 slope {drift['p99_slope_ms_per_min']} ms/min)"
    out.append(_criterion(name, bool(first and last and last <= TREND_CEILING * first), detail))
    return out


def _criterion(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"criterion": name, "pass": ok, "detail": detail}


def report(shape: Shape, measured: Measured, **facts: Any) -> dict[str, Any]:
    """Everything the JSON file holds: the run's facts, phases, tables, verdict, windows
    and samples (the machine's CPU ticks left out: their shares are in the windows)."""
    timeline, samples = Timeline.of(shape, measured), measured.samples
    every = windows(shape, timeline, samples)
    phases = {p: _figures(timeline, samples, _span(shape, *shape.bounds(p))) for p in PHASES}
    drift = trend(shape, timeline, [w for w in every if w["phase"] == "hold"])
    held = measured.held
    return {
        **facts,
        "shape": dataclasses.asdict(shape),
        "producer": shape.producing(),
        "inserted": len(measured.committed),
        "hold": {
            "xid": held.xid,
            "opened_s": round(held.opened - measured.start, 3),
            "closed_s": round(held.closed - measured.start, 3),
        },
        "phases": phases,
        "trend": drift,
        "tables": tables(shape, samples),
        "verdict": verdict(shape.rate, phases, drift),
        "windows": every,
        "samples": [{k: v for k, v in s.items() if k != "jiffies"} for s in samples],
    }


# -- markdown ------------------------------------------------------------------------------


def _row(*cells: object) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"


def _ms(pickup: dict[str, float] | None, stat: str) -> str:
    return "-" if pickup is None else f"{pickup[stat]:.2f}"


def _busy(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def markdown(result: dict[str, Any]) -> str:
    """The summary printed at the end of a run."""
    parts = (_heading, _phase_table, _window_table, _table_table, _verdict_lines)
    return "\n".join(line for part in parts for line in part(result))


def _heading(result: dict[str, Any]) -> Iterator[str]:
    shape, hold, pg = result["shape"], result["hold"], result["env"]["postgres"]
    yield f"## Under a held xmin horizon: {shape['rate']:,.0f} jobs/s offered"
    yield ""
    yield (
        f"clean {shape['clean']:g} s, hold {shape['hold']:g} s (xid {hold['xid']} held from"
        f" {hold['opened_s']:.1f} to {hold['closed_s']:.1f} s), recovery {shape['recovery']:g} s;"
        f" {result['inserted']:,} jobs inserted  "
    )
    yield f"producer: {result['producer']}  "
    yield f"pool: {result['pool']}; pickup = handler start - insert commit (time.time())  "
    yield (
        f"Postgres {pg['server_version']}, fsync={pg['fsync']},"
        f" synchronous_commit={pg['synchronous_commit']}, autovacuum={pg['autovacuum']};"
        f" load average before {result['load_before']}, after {result['load_after']}"
    )
    yield ""


def _phase_table(result: dict[str, Any]) -> Iterator[str]:
    yield _row("phase", "inserted jobs/s", "completed jobs/s", "pickup p50 ms", "p99 ms",
               "max ms", "CPU busy")  # fmt: skip
    yield "|---|--:|--:|--:|--:|--:|--:|"
    for phase, f in result["phases"].items():
        p = f["pickup_ms"]
        yield _row(phase, f"{f['inserted_per_s']:,.0f}", f"{f['completed_per_s']:,.0f}",
                   _ms(p, "p50"), _ms(p, "p99"), _ms(p, "max"), _busy(f["cpu_busy"]))  # fmt: skip
    yield ""


def _window_table(result: dict[str, Any]) -> Iterator[str]:
    yield f"Per {result['shape']['window']:g} s window of insert time:"
    yield ""
    yield _row("from s", "phase", "inserted/s", "completed/s", "p50 ms", "p99 ms",
               "dead tuples", "CPU busy")  # fmt: skip
    yield "|--:|---|--:|--:|--:|--:|--:|--:|"
    for w in result["windows"]:
        p = w["pickup_ms"]
        yield _row(f"{w['begin_s']:g}", w["phase"], f"{w['inserted_per_s']:,.0f}",
                   f"{w['completed_per_s']:,.0f}", _ms(p, "p50"), _ms(p, "p99"),
                   f"{w['dead_tuples']:,}", _busy(w["cpu_busy"]))  # fmt: skip
    yield ""


def _table_table(result: dict[str, Any]) -> Iterator[str]:
    """Tables that had a dead tuple at any sample; the rest are named in one line."""
    rows = result["tables"]
    touched = [n for n, t in rows.items() if any(t["peak_dead"].values())]
    yield _row("table", "peak dead clean", "hold", "recovery", "dead at end", "gained in hold",
               "per job in hold", "MB at hold start -> end", "autovacuums")  # fmt: skip
    yield "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
    for name in touched:
        t = rows[name]
        peak, per_job = t["peak_dead"], t["hold_dead_per_job"]
        dead = [f"{n:,}" for n in (*peak.values(), t["end_dead"], t["hold_dead_gained"])]
        yield _row(name, *dead, "-" if per_job is None else f"{per_job:.3f}",
                   f"{t['hold_mb'][0]} -> {t['hold_mb'][1]}", t["autovacuums"])  # fmt: skip
    yield ""
    yield f"No dead tuples sampled in: {', '.join(sorted(set(rows) - set(touched))) or 'none'}."
    yield ""


def _verdict_lines(result: dict[str, Any]) -> Iterator[str]:
    for c in result["verdict"]:
        yield f"- {'PASS' if c['pass'] else 'FAIL'} {c['criterion']}: {c['detail']}"


# -- the command ---------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m benches pressure``'s options."""
    parser.add_argument(
        "--database-url",
        help="server to use; a fresh database is made on it (default: the command line's"
        " local cluster, as awa-fast bench uses)",
    )
    parser.add_argument("--rate", type=float, default=500.0, help="jobs/s offered")
    parser.add_argument("--clean", type=float, default=120.0, help="seconds before the hold")
    parser.add_argument("--hold", type=float, default=240.0, help="seconds of the held xid")
    parser.add_argument("--recovery", type=float, default=120.0, help="seconds after it")
    parser.add_argument("--window", type=float, default=10.0, help="seconds a window")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds a sample")
    parser.add_argument(
        "--tick",
        type=float,
        help="0: one insert a job; S: one insert_many every S s (default: 0 up to"
        f" {ONE_BY_ONE_MAX_RATE:g} jobs/s, else {BATCH_TICK:g})",
    )
    parser.add_argument("--processes", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=100, help="the queue's")
    parser.add_argument("--out", default=str(ROOT / "benches" / "latest" / "pressure"))


def shape_of(args: argparse.Namespace) -> Shape:
    """The shape the options ask for, checked."""
    tick = args.tick
    if tick is None:
        tick = 0.0 if args.rate <= ONE_BY_ONE_MAX_RATE else BATCH_TICK
    shape = Shape(
        args.rate, args.clean, args.hold, args.recovery, args.window, args.sample_every, tick
    )
    shape.check()
    return shape


def main(args: argparse.Namespace) -> int:
    """Run the shape on a fresh database, write the JSON file and print the summary."""
    from awa_fast.cli.urls import database_url

    shape = shape_of(args)
    load_before = [round(x, 2) for x in os.getloadavg()]
    with fresh_database(database_url(args.database_url)) as url:
        run = measure(url, shape, processes=args.processes, concurrency=args.concurrency)
        measured = run_as_served(run)
        env = environment(url)
    pool = f"{args.processes} worker processes, queue `default` at concurrency {args.concurrency}"
    load_after = [round(x, 2) for x in os.getloadavg()]
    result = report(
        shape, measured, env=env, pool=pool, load_before=load_before, load_after=load_after
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{time.strftime('%Y%m%dT%H%M%S')}-pressure-{shape.rate:g}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    print(f"\nresults in {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    _producer_main(sys.argv[1:])
