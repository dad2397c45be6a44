"""The results table: every run's JSON line (awa-fast's and the peers') → one markdown table.

Rows are grouped by (scenario, system, variant) and shown at their median run (see
:func:`awa_fast.bench.median_row`). A peer line may carry ``"unsupported": "why"`` (or
``"error": "..."``) instead of figures: the table says so rather than leaving the row out.
Keys read from a line: ``scenario``, ``system``, ``variant``, ``jobs``, ``jobs_per_s``,
``latency_ms`` {p50, p95, p99}, ``commits_per_job``, ``wal_bytes_per_job``, ``rss_kib``
{supervisor, workers}; any of the figures may be missing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from awa_fast.bench.charts import write_charts
from awa_fast.bench.run import SCENARIOS, median_row

Row = dict[str, Any]
COLUMNS = (
    "scenario",
    "system",
    "variant",
    "jobs/s",
    "cpu: burn ms/job",
    "cpu: jobs/s at 1 ms",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "commits/job",
    "WAL B/job",
    "peak RSS MiB",
    "runs",
)


def load_results(paths: Iterable[Path]) -> list[Row]:
    """Every JSON object line of ``paths`` (other lines, e.g. logs, are skipped)."""
    results = []
    for path in paths:
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            item = json.loads(line)
            if isinstance(item, dict) and "scenario" in item and "system" in item:
                results.append(normalize(item))
    return results


def normalize(result: Row) -> Row:
    """Peer lines (``benches/peers``) name the system without its process count and give
    RSS in MB per process: bring them to awa-fast's shape."""
    row = dict(result)
    system, processes = str(row["system"]), row.get("processes")
    if "(" not in system and isinstance(processes, int) and processes > 0:
        row["system"] = f"{system} ({processes} process{'es' if processes > 1 else ''})"
    per_process = row.get("peak_rss_mb_per_process")
    if "rss_kib" not in row and isinstance(per_process, list):
        row["rss_kib"] = {"supervisor": None, "workers": [mb * 1024 for mb in per_process]}
    if row.get("ok") is False and "error" not in row:
        row["error"] = "run failed"
    return row


def _group_key(result: Row) -> tuple[int, str, str, str]:
    order = list(SCENARIOS)
    scenario = str(result["scenario"])
    rank = order.index(scenario) if scenario in order else len(order)
    return rank, scenario, str(result.get("variant") or ""), str(result["system"])


def summarize(results: list[Row]) -> list[Row]:
    """One median row per (scenario, variant, system), in scenario order."""
    groups: dict[tuple[int, str, str, str], list[Row]] = {}
    for result in results:
        groups.setdefault(_group_key(result), []).append(result)
    rows = []
    for key in sorted(groups):
        runs = groups[key]
        measured = [
            r for r in runs if r.get("ok") is not False and _number(r.get("jobs_per_s")) is not None
        ]
        rows.append(_median(measured) if measured else dict(runs[-1]))
    return rows


def _median(runs: list[Row]) -> Row:
    """The median run (by pickup p50 for latency, else jobs/s); a peer line missing the
    latency figures falls back to jobs/s."""
    try:
        return median_row(runs)
    except (KeyError, TypeError):
        ordered = sorted(runs, key=lambda r: float(r["jobs_per_s"]))
        return {**ordered[len(ordered) // 2], "median_of": len(runs)}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _fmt(value: Any, spec: str) -> str:
    number = _number(value)
    return "" if number is None else format(number, spec)


def _rss_mib(row: Row) -> str:
    rss = row.get("rss_kib")
    if not isinstance(rss, dict):
        return ""
    sup = _number(rss.get("supervisor"))
    workers = [w for w in map(_number, rss.get("workers") or []) if w is not None]
    parts = [f"{sup / 1024:.0f}"] if sup is not None else []
    if workers:
        parts.append(f"{len(workers)}x{max(workers) / 1024:.0f}")
    return " + ".join(parts)


def cells(row: Row) -> list[str]:
    head = [str(row["scenario"]), str(row["system"]), str(row.get("variant") or "")]
    why = row.get("unsupported") or row.get("error")
    if why and _number(row.get("jobs_per_s")) is None:
        return [*head, f"n/a: {why}", *[""] * (len(COLUMNS) - 4)]
    latency = _latency(row)
    return [
        *head,
        _fmt(row.get("jobs_per_s"), ",.0f"),
        _fmt(row.get("burn_ms_measured"), ".3f"),
        _fmt(row.get("jobs_per_s_normalized"), ",.0f"),
        _fmt(latency.get("p50"), ".2f"),
        _fmt(latency.get("p95"), ".2f"),
        _fmt(latency.get("p99"), ".2f"),
        _fmt(row.get("commits_per_job"), ".4f"),
        _fmt(row.get("wal_bytes_per_job"), ",.0f"),
        _rss_mib(row),
        str(row.get("median_of", 1)),
    ]


def _latency(row: Row) -> dict[str, Any]:
    found = row.get("latency_ms")
    return found if isinstance(found, dict) else {}


def _table(columns: Iterable[str], rows: Iterable[list[str]]) -> str:
    header = list(columns)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def markdown(rows: list[Row]) -> str:
    return _table(COLUMNS, map(cells, rows))


SUSTAINED_COLUMNS = (
    "system",
    "variant",
    "run",
    "basis jobs/s",
    "offered jobs/s",
    "carried jobs/s",
    "pickup p50 / p99 ms",
    "end-to-end p99 ms",
    "load after",
    "CPU busy",
)


def sustained_runs(results: list[Row]) -> str:
    """Every sustained run, not just each group's median: whether a load was carried turns
    on the run, the basis it was a share of, and how that basis held up after it
    (``load_after``, the offered rate over the drains measured right after), and how busy
    the machine was. Empty when there are none."""
    runs = [r for r in results if r.get("scenario") == "sustained"]
    if not runs:
        return ""
    ordered = sorted(runs, key=lambda r: (_group_key(r), r.get("run") or 0))
    return "## sustained, run by run\n\n" + _table(SUSTAINED_COLUMNS, map(_run_cells, ordered))


def _run_cells(run: Row) -> list[str]:
    return [
        str(run["system"]),
        str(run.get("variant") or ""),
        str(run.get("run") or ""),
        _fmt(run.get("basis_per_s"), ",.0f"),
        _fmt(run.get("offered_per_s"), ",.0f"),
        _fmt(run.get("completed_per_s"), ",.0f"),
        _pickup(run),
        _fmt(_latency(run).get("p99"), ",.0f"),
        _fmt(run.get("load_after"), ".2f"),
        _fmt(run.get("cpu_busy"), ".0%"),
    ]


def _pickup(run: Row) -> str:
    found = run.get("pickup_ms")
    if not isinstance(found, dict):
        return ""
    return f"{_fmt(found.get('p50'), ',.1f')} / {_fmt(found.get('p99'), ',.0f')}"


def environment_note(results: list[Row]) -> str:
    """Where the figures were taken, from the first run that recorded it."""
    env = next((r["env"] for r in results if isinstance(r.get("env"), dict)), None)
    if env is None:
        return ""
    pg = env.get("postgres", {})
    settings = ", ".join(f"{k}={v}" for k, v in pg.items())
    return (
        f"{env.get('cpu_model')} x {env.get('cpu_count')} cores, {env.get('platform')}, "
        f"Python {env.get('python')}; Postgres {settings}\n"
    )


def write_report(out: Path, *, includes: Iterable[Path] = ()) -> Path:
    """``out/results.md`` (table, environment, charts) from every ``*.jsonl`` in ``out``
    plus ``includes``; returns its path."""
    paths = sorted({*out.glob("*.jsonl"), *includes})
    results = load_results(paths)
    rows = summarize(results)
    body = ["# Benchmark results\n", markdown(rows), environment_note(results)]
    if runs := sustained_runs(results):
        body.append(runs)
    charts, note = write_charts(out, rows, results)
    body += [f"![{c.stem}]({c.name})\n" for c in charts]
    if note:
        body.append(note + "\n")
    target = out / "results.md"
    target.write_text("\n".join(body))
    return target
