"""Peer benchmark harness: drain N pre-inserted jobs with other Python queues.

Runs in the project's Python (needs psycopg 3). Each peer lives in its own
virtualenv under ``/var/tmp/awa-fast-bench/venvs/<system>`` and is driven by a
small script in this package executed by that venv's python. See
``benches/README.md`` for the method, ``benches/RESULTS.md`` for why it is so.

Per run:
  1. ``CREATE DATABASE bench_<system>_<n>`` on the server at --database-url.
  2. ``<driver> setup``: install the peer's schema, pre-insert N jobs.
  3. Start P ``<driver> work`` processes; wait until each prints ``ready``. With
     ``--concurrency C`` each gets C / P, which its driver maps onto the peer's own
     limit (setup gets it too, and reports that limit in the row's ``config``).
  4. Snapshot ``pg_stat_database.xact_commit`` (after ``pg_stat_force_next_flush()``)
     and ``pg_current_wal_lsn()``; write ``go`` to every worker; start the clock.
  5. Poll the peer's own tables every ~20 ms; stop the clock when the database
     shows all N jobs finished. Read the WAL position right then.
  6. Write ``stop``; wait for the workers to exit (their stats are flushed on
     backend exit), then read ``xact_commit`` again. Commits/job subtracts the
     harness's own poll queries on the bench database.
  7. ``DROP DATABASE ... WITH (FORCE)``.

``latency`` and ``scheduled`` insert nothing in step 2: the workers start first
(``go``) and sit idle, then a producer process inserts the jobs (one at a time at a
fixed rate for ``latency``; all due at one moment a few seconds ahead for
``scheduled``). See ``benches/README.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from awa_fast.bench import percentiles
from awa_fast.bench.handlers import burn_loops
from awa_fast.bench.measure import server_settings, wait_for_listener
from awa_fast.db.dsn import with_database

HERE = Path(__file__).resolve().parent
BENCH_ROOT = Path(os.environ.get("AWA_FAST_BENCH_DIR", "/var/tmp/awa-fast-bench"))
RESULTS_DIR = HERE.parent / "results"
POLL_INTERVAL_S = 0.02
# A peer whose ``stall_sql`` reports a stall at every check for this long is stopped
# early with a "stalled" row, rather than polled until --timeout.
STALL_CHECK_S = 1.0
STALL_CONFIRM_S = 3.0
DEFAULT_JOBS = {"drain": 20_000, "cpu": 5_000, "io": 20_000, "latency": 500}
DEFAULT_JOBS |= {"retry": 10_000, "scheduled": 10_000}
# Scenarios whose jobs are inserted by `driver setup` before the workers start.
PRE_INSERTED = ("drain", "cpu", "io", "retry")


@dataclasses.dataclass(frozen=True)
class Peer:
    name: str
    packages: tuple[str, ...]
    driver: str
    # SQL returning the number of jobs finished (any terminal state) and the number
    # of those that failed; run on the bench database by the harness.
    done_sql: str
    scenarios: tuple[str, ...] = ("drain", "cpu", "io", "latency", "retry", "scheduled")
    # What the driver asks for as its retry delay in the ``retry`` scenario.
    retry_delay: str = ""
    # Optional SQL returning a number when the peer provably cannot finish (NULL
    # otherwise); checked every STALL_CHECK_S while polling. ``stall_note`` (with {n})
    # is the run's error when it holds for STALL_CONFIRM_S.
    stall_sql: str = ""
    stall_note: str = ""


PEERS: dict[str, Peer] = {
    "pgqueuer": Peer(
        name="pgqueuer",
        packages=("pgqueuer", "asyncpg", "psycopg[binary]", "psutil"),
        driver="pgqueuer_driver.py",
        # Succeeded jobs are deleted from the queue table (held 'failed' ones stay).
        done_sql=(
            "SELECT %(n)s - count(*) FILTER (WHERE status <> 'failed'),"
            " count(*) FILTER (WHERE status = 'failed') FROM pgqueuer"
        ),
        retry_delay="RetryRequested(delay=timedelta(0))",
    ),
    "awa-pg": Peer(
        name="awa-pg",
        packages=("awa-pg>=0.6,<0.7", "psutil"),
        driver="awa_pg_driver.py",
        # Live terminal rows (compact receipt batches less tombstones, plus done_entries)
        # and the ones Awa's maintenance already pruned with their ring slot: the prune
        # TRUNCATEs the slot and adds its counts to awa.queue_terminal_rollups in the
        # same transaction, so a poll never counts a job twice (one that waited on the
        # prune's lock may miss that slot once: TRUNCATE is not MVCC-safe).
        done_sql=(
            "SELECT (SELECT coalesce(sum(completed_count), 0) FROM awa.receipt_completion_batches)"
            " - (SELECT count(*) FROM awa.receipt_completion_tombstones)"
            " + (SELECT count(*) FROM awa.done_entries)"
            " + (SELECT coalesce(sum(pruned_completed_count + pruned_failed_count), 0)"
            "    FROM awa.queue_terminal_rollups),"
            " (SELECT count(*) FROM awa.done_entries WHERE state <> 'completed')"
            " + (SELECT coalesce(sum(pruned_failed_count), 0) FROM awa.queue_terminal_rollups)"
        ),
        retry_delay="RetryAfter(0), promote_interval_ms=50",
        # awa-pg 0.6.9 promotes due scheduled/retryable jobs 4,096 at a time with one
        # INSERT of 18 bind parameters per job; past 65,535 parameters (more than 3,640
        # jobs due at once) the client refuses it, the promotion rolls back and the next
        # tick retries the same rows: they are never promoted (benches/README.md). More
        # than 3,640 jobs due for 5 s means every promotion since has failed.
        stall_sql=(
            "SELECT CASE WHEN count(*) > 3640 THEN count(*) END FROM awa.deferred_jobs"
            " WHERE run_at <= now() - interval '5 seconds'"
        ),
        stall_note=(
            "stalled: {n} jobs due 5+ s, none promoted (awa-pg 0.6.9 promotes 4,096 x 18"
            " bind params > 65,535 once >3,640 are due; benches/README.md)"
        ),
    ),
    "procrastinate": Peer(
        name="procrastinate",
        packages=("procrastinate", "psycopg[binary]", "psutil"),
        driver="procrastinate_driver.py",
        done_sql=(
            "SELECT count(*) FILTER (WHERE status NOT IN ('todo', 'doing')),"
            " count(*) FILTER (WHERE status = 'failed') FROM procrastinate_jobs"
        ),
        retry_delay="RetryStrategy(max_attempts=1, wait=0)",
    ),
    "chancy": Peer(
        name="chancy",
        packages=("chancy", "psycopg[binary]", "psutil"),
        driver="chancy_driver.py",
        done_sql=(
            "SELECT count(*) FILTER (WHERE state IN ('succeeded', 'failed')),"
            " count(*) FILTER (WHERE state = 'failed') FROM chancy_jobs"
        ),
        retry_delay="max_attempts=2, retried at once",
    ),
}


def log(msg: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- virtualenvs


def venv_python(peer: Peer) -> Path:
    return BENCH_ROOT / "venvs" / peer.name / "bin" / "python"


def ensure_venv(peer: Peer, upgrade: bool = False) -> dict[str, str]:
    """Create the peer's venv with ``python -m venv`` and pip-install its packages."""
    venv = BENCH_ROOT / "venvs" / peer.name
    marker = venv / ".awa-fast-bench-packages"
    wanted = "\n".join(peer.packages)
    if not venv_python(peer).exists():
        log(f"creating venv {venv}")
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if upgrade or not marker.exists() or marker.read_text() != wanted:
        log(f"pip install {' '.join(peer.packages)} into {venv}")
        cmd = [str(venv_python(peer)), "-m", "pip", "install", "-q"]
        cmd += ["--upgrade"] if upgrade else []
        subprocess.run([*cmd, *peer.packages], check=True)
        marker.write_text(wanted)
    out = subprocess.run(
        [str(venv_python(peer)), "-m", "pip", "list", "--format=json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def peer_packages(peer: Peer, versions: dict[str, str]) -> dict[str, str]:
    """The versions worth recording from ``ensure_venv``'s list: the peer and its driver."""
    return {
        k: v for k, v in versions.items() if k in (peer.name, "asyncpg", "psycopg", "psycopg-pool")
    }


# ---------------------------------------------------------------- database helpers


def admin_connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def stats_snapshot(conn: psycopg.Connection, dbname: str) -> dict[str, int]:
    major = conn.info.server_version // 10000
    if major >= 15:
        conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = %s),"
        " (SELECT sum(xact_commit) FROM pg_stat_database"
        "   WHERE datname IS DISTINCT FROM %s AND datname IS NOT NULL),"
        " pg_current_wal_lsn() - '0/0'::pg_lsn",
        (dbname, dbname),
    ).fetchone()
    return {"xact_commit": int(row[0] or 0), "other_commits": int(row[1] or 0), "wal": int(row[2])}


def wal_now(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


class Worker:
    def __init__(self, cmd: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self.errf = open(log_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errf,
            text=True,
            bufsize=1,
            start_new_session=True,  # own process group: clean kill of children
        )
        self.lines: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.peak_kb = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            self.lines.append(obj)
            if obj.get("event") == "ready":
                self.ready.set()

    def send(self, cmd: str) -> None:
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()

    def sample_rss(self) -> None:
        try:
            with open(f"/proc/{self.proc.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
                        return
        except OSError:
            pass

    def result(self) -> dict[str, Any] | None:
        for obj in reversed(self.lines):
            if obj.get("event") == "work":
                return obj
        return None

    def stop(self, timeout: float = 30.0) -> None:
        self.send("stop")
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log(f"worker {self.proc.pid} did not stop in {timeout}s; killing its group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait(10)
        self.errf.close()

    def stderr_tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "".join(self.log_path.read_text().splitlines(keepends=True)[-n:])
        return ""


def run_driver(
    peer: Peer, phase: str, url: str, jobs: int, scenario: str, timeout: float, *extra: str
) -> dict:
    """One ``driver <phase>`` process to its end; its last JSON line."""
    cmd = [str(venv_python(peer)), str(HERE / peer.driver), phase]
    cmd += ["--database-url", url, "--jobs", str(jobs), "--scenario", scenario, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{phase} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])


def run_driver_setup(
    peer: Peer, url: str, jobs: int, scenario: str, timeout: float, *extra: str
) -> dict:
    return run_driver(peer, "setup", url, jobs, scenario, timeout, *extra)


def process_share(concurrency: int, processes: int) -> int:
    """Each work process's share of the queue's ``concurrency`` (0: the drivers' defaults);
    an even split, so that a peer whose limit is fleet-wide runs the same total."""
    if concurrency % processes:
        raise ValueError(f"concurrency {concurrency} does not split evenly over {processes}")
    return concurrency // processes


@dataclasses.dataclass
class Polled:
    done: int = 0
    failed: int = 0
    polls: int = 0  # queries the harness ran on the bench database
    timed_out: bool = False
    stalled: str = ""  # the peer's stall_note, when its stall_sql held


def poll_until_done(
    poll: psycopg.Connection, peer: Peer, jobs: int, workers: list[Worker], deadline: float
) -> Polled:
    """Poll the peer's tables every POLL_INTERVAL_S until all ``jobs`` are finished, the
    deadline passes, or the peer's ``stall_sql`` shows for STALL_CONFIRM_S that it is
    stuck."""
    out = Polled()
    stall_since: float | None = None
    next_stall_check = time.monotonic() + STALL_CHECK_S
    while True:
        row = poll.execute(peer.done_sql, {"n": jobs}).fetchone()
        out.polls += 1
        out.done, out.failed = int(row[0]), int(row[1])
        if out.done >= jobs:
            return out
        for w in workers:
            w.sample_rss()
            if w.proc.poll() is not None:
                raise RuntimeError(
                    f"worker {w.proc.pid} exited early ({w.proc.returncode}): {w.stderr_tail()}"
                )
        now = time.monotonic()
        if peer.stall_sql and now >= next_stall_check:
            next_stall_check = now + STALL_CHECK_S
            n = poll.execute(peer.stall_sql).fetchone()[0]
            out.polls += 1
            if n is None:
                stall_since = None
            elif stall_since is None:
                stall_since = now
            elif now - stall_since >= STALL_CONFIRM_S:
                out.stalled = peer.stall_note.format(n=n)
                return out
        if now > deadline:
            out.timed_out = True
            return out
        time.sleep(POLL_INTERVAL_S)


def start_idle(workers: list[Worker], url: str, settle: float = 1.0) -> bool:
    """``go`` to every worker, then wait until they are idle: a connection in LISTEN (if the
    peer LISTENs) and ``settle`` s more for their first empty fetches to pass."""
    for w in workers:
        w.send("go")
    listening = wait_for_listener(url, timeout=5.0)
    time.sleep(settle)
    return listening


# ---------------------------------------------------------------- one run


def run_once(
    peer: Peer,
    base_url: str,
    scenario: str,
    jobs: int,
    processes: int,
    run_index: int,
    cpu_iterations: int,
    timeout: float,
    cpu_ms: float = 1.0,
    rate: float = 50.0,
    lead: float = 3.0,
    concurrency: int = 0,
) -> dict[str, Any]:
    """One run of ``scenario``; ``concurrency`` is the queue's, over all ``processes``
    (0: each driver's default)."""
    dbname = f"bench_{re.sub(r'[^a-z0-9]', '_', peer.name)}_{run_index}"
    url = with_database(base_url, dbname)
    admin = admin_connect(base_url)
    result: dict[str, Any] = {
        "system": peer.name,
        "scenario": scenario,
        "processes": processes,
        "run": run_index,
        "jobs": jobs,
        "database": dbname,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if scenario == "cpu":
        result["cpu_iterations_per_job"] = cpu_iterations
    if concurrency:
        result["concurrency"] = concurrency
    share = ["--concurrency", str(process_share(concurrency, processes))]
    share += ["--processes", str(processes)]
    workers: list[Worker] = []
    deadline = time.monotonic() + timeout
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{dbname}"')
        pre_inserted = scenario in PRE_INSERTED
        setup = run_driver_setup(peer, url, jobs if pre_inserted else 0, scenario, timeout, *share)
        result.update(version=setup.get("version"), config=setup.get("config"))
        if pre_inserted:
            result.update(
                insert_s=round(setup["insert_s"], 3),
                insert_jobs_per_s=round(jobs / setup["insert_s"], 1) if setup["insert_s"] else None,
            )
        if scenario == "retry":
            result["retry_delay"] = peer.retry_delay
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("VACUUM ANALYZE")  # same starting point for every peer
        logdir = BENCH_ROOT / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        for i in range(processes):
            cmd = [str(venv_python(peer)), str(HERE / peer.driver), "work"]
            cmd += ["--database-url", url, "--scenario", scenario]
            cmd += ["--cpu-iterations", str(cpu_iterations), *share]
            workers.append(Worker(cmd, logdir / f"{dbname}_p{processes}_w{i}.log"))
        for w in workers:
            if not w.ready.wait(max(1.0, deadline - time.monotonic())):
                raise RuntimeError(f"worker not ready: {w.stderr_tail()}")
        poll = psycopg.connect(url, autocommit=True)
        committed: list[float] = []
        try:
            if pre_inserted:
                before = stats_snapshot(admin, dbname)
                t0 = time.perf_counter()
                for w in workers:
                    w.send("go")
                polled = poll_until_done(poll, peer, jobs, workers, deadline)
                elapsed = time.perf_counter() - t0
            elif scenario == "latency":
                result["listening"] = start_idle(workers, url)
                result["rate"] = rate
                before = stats_snapshot(admin, dbname)
                # No polling while the producer runs: the harness adds no database load
                # to the measured path (handler stamps come back at exit, on stdout).
                produced = run_driver(
                    peer, "produce", url, jobs, scenario, timeout, "--rate", str(rate)
                )
                committed = produced["committed"]
                time.sleep(0.2)
                polled = poll_until_done(poll, peer, jobs, workers, deadline)
                # From the first commit to the database showing all done: ~ the rate.
                elapsed = time.time() - committed[0]
            else:  # scheduled
                result["listening"] = start_idle(workers, url)
                due = time.time() + lead
                sched = run_driver(
                    peer, "schedule", url, jobs, scenario, timeout, "--due", repr(due)
                )
                result.update(insert_s=round(sched["insert_s"], 3), lead_s=round(lead, 3))
                if time.time() >= due:
                    raise RuntimeError(
                        f"inserting {jobs} scheduled jobs took past the due moment"
                        f" (lead {lead:.1f} s); raise --lead"
                    )
                before = stats_snapshot(admin, dbname)
                polled = poll_until_done(poll, peer, jobs, workers, deadline)
                elapsed = time.time() - due
            wal_end = wal_now(admin)
        finally:
            poll.close()
        for w in workers:
            w.sample_rss()
        for w in workers:
            w.stop()
        after = stats_snapshot(admin, dbname)
        done, failed, polls = polled.done, polled.failed, polled.polls
        commits = after["xact_commit"] - before["xact_commit"] - polls
        peaks = []
        handled = []
        burned = []
        failed_first = []
        stamps: dict[int, float] = {}
        for w in workers:
            r = w.result() or {}
            peaks.append(max(w.peak_kb, int(r.get("vmhwm_kb", 0))))
            handled.append(r.get("handled"))
            burned.append(r.get("burn_s"))
            failed_first.append(r.get("failed_first"))
            for seq, t in r.get("stamps") or []:
                stamps[seq] = min(t, stamps.get(seq, t))
        result.update(
            ok=not polled.timed_out and not polled.stalled and failed == 0,
            elapsed_s=round(elapsed, 3),
            done=done,
            failed=failed,
            jobs_per_s=round(done / elapsed, 1),
            commits=commits,
            commits_per_job=round(commits / done, 4) if done else None,
            wal_bytes=wal_end - before["wal"],
            wal_bytes_per_job=round((wal_end - before["wal"]) / done, 1) if done else None,
            peak_rss_mb_per_process=[round(k / 1024, 1) for k in peaks],
            peak_rss_mb=round(max(peaks) / 1024, 1) if peaks else None,
            handled_per_process=handled,
            harness_polls=polls,
            other_db_commits_during_run=after["other_commits"] - before["other_commits"],
        )
        if scenario == "cpu" and None not in burned and sum(h or 0 for h in handled):
            # What each burn really cost here, as awa-fast's own cpu scenario records it.
            burned_ms = 1000 * sum(burned) / sum(h or 0 for h in handled)
            result.update(
                burn_ms=cpu_ms,
                burn_ms_measured=round(burned_ms, 4),
                jobs_per_s_normalized=round(result["jobs_per_s"] * burned_ms / cpu_ms, 1),
            )
        if scenario == "retry":
            result["failed_first_per_process"] = failed_first
            if sum(f or 0 for f in failed_first) != jobs:
                result.update(ok=False, error=f"first attempts failed: {failed_first}, not {jobs}")
        if scenario == "latency":
            missing = [n for n in range(len(committed)) if n not in stamps]
            if missing or len(committed) != jobs:
                result.update(ok=False, error=f"no handler stamp for {len(missing)} jobs")
            else:
                pickups = [(stamps[n] - c) * 1000 for n, c in enumerate(committed)]
                result["latency_ms"] = percentiles(pickups)
        if not result["ok"]:
            # No figure for a failed run: report.py then shows its error as `n/a: ...`.
            result["jobs_per_s_partial"] = result.pop("jobs_per_s")
            result["jobs_per_s"] = None
        if polled.timed_out:
            result["error"] = f"timeout after {timeout}s with {done}/{jobs} done"
        if polled.stalled:
            # Stopped early: the peer showed it cannot finish (see Peer.stall_sql).
            result.update(stalled=True, error=f"{polled.stalled}; {done}/{jobs} done")
    except Exception as exc:
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:3000])
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.stop(timeout=10)
        try:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        except Exception as exc:
            log(f"could not drop {dbname}: {exc}")
        admin.close()
    return result


# ---------------------------------------------------------------- report


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One row per (system, scenario, processes, and the queue's concurrency when a run
    set one): median jobs/s (each run's figure in parentheses), median seconds, and for
    ``latency`` the pickup percentiles of the run with the median p50."""
    by_concurrency = any(r.get("concurrency") for r in rows)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        key: tuple[Any, ...] = (r["system"], r["scenario"], r["processes"])
        if by_concurrency:
            key += (r.get("concurrency") or "default",)
        groups.setdefault(key, []).append(r)
    head = ["system", "scenario", "processes"] + (["concurrency"] if by_concurrency else [])
    head += ["jobs/s (median)", "seconds", "pickup ms p50/p95/p99/max", "runs ok"]
    head += ["commits/job", "WAL B/job", "peak RSS MB"]
    out = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for key, rs in groups.items():
        label = " | ".join(str(k) for k in key)
        ok = [r for r in rs if r.get("ok")]
        if not ok:
            reason = next((r.get("error") or r.get("note") for r in rs), "failed")
            reason = str(reason).replace("|", "/").replace("\n", " ")[:160]
            out.append(f"| {label} | n/a: {reason} | | | 0/{len(rs)} | | | |")
            continue
        med = statistics.median
        tputs = ", ".join(f"{r['jobs_per_s']:.0f}" for r in ok)
        lat = ""
        with_lat = sorted(
            (r for r in ok if r.get("latency_ms")), key=lambda r: r["latency_ms"]["p50"]
        )
        if with_lat:
            m = with_lat[len(with_lat) // 2]["latency_ms"]
            lat = f"{m['p50']:.2f} / {m['p95']:.2f} / {m['p99']:.2f} / {m['max']:.2f}"
        out.append(
            f"| {label} | {med([r['jobs_per_s'] for r in ok]):,.0f}"
            f" ({tputs}) | {med([r['elapsed_s'] for r in ok]):.3f} | {lat} | {len(ok)}/{len(rs)}"
            f" | {med([r['commits_per_job'] for r in ok]):.4f}"
            f" | {med([r['wal_bytes_per_job'] for r in ok]):,.0f}"
            f" | {max(r['peak_rss_mb'] for r in ok):.1f} |"
        )
    return "\n".join(out)


def main(args) -> int:
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in PEERS]
    if unknown:
        print(f"unknown systems: {unknown}; known: {sorted(PEERS)}", file=sys.stderr)
        return 2
    jobs = args.jobs or DEFAULT_JOBS[args.scenario]
    # scheduled: the due moment, s after the insert starts; long enough for the slowest
    # peer's bulk insert (chancy's, see benches/README.md, scenario `scheduled`)
    lead = args.lead or 2.0 + jobs / 2000
    process_counts = [int(p) for p in str(args.processes).split(",")]
    try:
        for p in process_counts:
            process_share(args.concurrency, p)
    except ValueError as exc:
        print(f"--concurrency: {exc}", file=sys.stderr)
        return 2
    cpu_iterations = 0
    if args.scenario == "cpu":
        # A fixed count shared with `awa-fast bench cpu` makes the work per job identical
        # for every system; calibration alone drifts when the other vCPU is busy.
        # The loop the drivers run (_common.burn_iterations) is awa-fast's own cpu burn,
        # calibrated (or fixed by AWA_FAST_BENCH_CPU_ITERATIONS) the same way.
        cpu_iterations = burn_loops(args.cpu_ms)
    if cpu_iterations:
        log(f"cpu scenario: {cpu_iterations} loop iterations ~= {args.cpu_ms} ms CPU per job")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS_DIR / f"{time.strftime('%Y%m%dT%H%M%S')}-peers-{args.scenario}.jsonl"
    facts = server_settings(args.database_url)
    log(f"server: {facts}; results -> {out_path}")
    rows: list[dict[str, Any]] = []
    with open(out_path, "a") as out:

        def record(row: dict[str, Any]) -> None:
            row = {**row, "server": facts}
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            out.write(line + "\n")
            out.flush()

        for name in systems:
            peer = PEERS[name]
            try:
                versions = ensure_venv(peer, upgrade=args.upgrade)
            except Exception as exc:
                for p in process_counts:
                    record(
                        {
                            "system": name,
                            "scenario": args.scenario,
                            "processes": p,
                            "ok": False,
                            "error": f"venv/pip failed: {exc}",
                        }
                    )
                continue
            for p in process_counts:
                if args.scenario not in peer.scenarios:
                    record(
                        {
                            "system": name,
                            "scenario": args.scenario,
                            "processes": p,
                            "ok": False,
                            "error": f"{name} cannot run scenario {args.scenario}",
                        }
                    )
                    continue
                for i in range(1, args.runs + 1):
                    log(f"{name} {args.scenario} processes={p} run {i}/{args.runs} ({jobs} jobs)")
                    r = run_once(
                        peer,
                        args.database_url,
                        args.scenario,
                        jobs,
                        p,
                        i,
                        cpu_iterations,
                        args.timeout,
                        cpu_ms=args.cpu_ms,
                        rate=args.rate,
                        lead=lead,
                        concurrency=args.concurrency,
                    )
                    r["packages"] = peer_packages(peer, versions)
                    record(r)
                    if not r.get("ok"):
                        log(f"  run failed: {r.get('error')}")
                    else:
                        lat = r.get("latency_ms")
                        extra = f", pickup ms {lat}" if lat else ""
                        log(
                            f"  {r['jobs_per_s']:.0f} jobs/s in {r['elapsed_s']} s,"
                            f" {r['commits_per_job']} commits/job,"
                            f" {r['wal_bytes_per_job']} WAL B/job, {r['peak_rss_mb']} MB{extra}"
                        )
    table = markdown_table(rows)
    print()
    print(table)
    log(f"wrote {out_path}")
    return 0
