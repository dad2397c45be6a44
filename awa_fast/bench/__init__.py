"""``awa-fast bench``: built-in scenarios measured against a real, durable Postgres.

Each run gets a fresh database. A scenario is ``async def name(url, *, jobs, processes=None,
...) -> dict``; every result has the same core keys (``RESULT_KEYS``) so the report can put
awa-fast and the peers (``python -m benches peers``) in one table:

- ``scenario``, ``system``, ``variant``, ``processes``, ``jobs``, ``seconds``, ``jobs_per_s``,
  ``completed`` (jobs that reached ``completed``: a run that loses jobs is visibly wrong);
- ``commits_per_job`` and ``wal_bytes_per_job`` (``pg_stat_database`` and
  ``pg_current_wal_lsn`` deltas over the measured window);
- ``rss_kib``: peak RSS (``VmHWM``) of the supervisor and of each worker process;
- ``cpu_busy`` (awa-fast's own runs): the share of the whole machine's CPU that was busy
  over the measured window (``/proc/stat``), so a figure says whether the cores ran out or
  the run waited on something else; None for ``scheduled``, timed from its due moment,
  and for a run too short for the kernel's clock tick (10 ms) to tell;
- ``env``: Postgres settings, package versions, CPU model and core count;
- scenario extras: ``latency_ms`` (p50/p95/p99/max), ``samples`` (sustained: time, queue
  depth, dead tuples, jobs completed).

How time is taken where a job crosses processes:

- throughput scenarios (``drain``, ``cpu``, ``io``, ``retry``): from the moment the pool is
  up (workers forked, connections open) to the commit of the last outcome, as the peer
  harness times its ready workers from ``go``; commits and WAL count from before the start.

- ``latency``: a spawned producer process inserts one job per tick and takes
  ``time.time()`` right after each insert's commit returns; the handler takes ``time.time()``
  first thing and writes it into an anonymous shared ``mmap`` slot indexed by the job's
  number (created before the pool forks, so workers inherit it; no database write in the
  measured path). Pickup latency = handler start - insert commit.
- ``sustained``: end-to-end latency is ``finalized_at - created_at`` on the server's clock:
  from the insert transaction to the transaction that recorded the completion.
"""

from awa_fast.bench.latency import BASIS_DRAINS, sustained
from awa_fast.bench.measure import RESULT_KEYS, percentiles
from awa_fast.bench.report import write_report
from awa_fast.bench.run import (
    SCENARIOS,
    SUSTAINED_LOADS,
    median_row,
    plan,
    run_all,
    save_results,
)

__all__ = [
    "BASIS_DRAINS",
    "RESULT_KEYS",
    "SCENARIOS",
    "SUSTAINED_LOADS",
    "median_row",
    "percentiles",
    "plan",
    "run_all",
    "save_results",
    "sustained",
    "write_report",
]
