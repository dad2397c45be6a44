"""Each bench scenario, run tiny against a fresh database, produces a well-formed result.

These check shape and sanity (every job completed, figures positive and finite), never
speed: a smoke test that asserted throughput would fail on a busy CI machine.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

import pytest
import uvloop

from awa_fast import bench
from awa_fast.bench import report
from awa_fast.bench.measure import busy_share, cpu_jiffies

TINY: dict[str, dict[str, Any]] = {
    "drain": {"jobs": 200},
    "cpu": {"jobs": 100},
    "io": {"jobs": 200},
    "latency": {"jobs": 40, "rate": 100.0},
    "sustained": {"jobs": 200, "rate": 400.0, "duration": 1.0},
    "retry": {"jobs": 200},
    "scheduled": {"jobs": 200, "lead": 0.5},
    "promote": {"jobs": 500},
}


def test_the_cli_offers_every_scenario() -> None:
    from awa_fast import cli

    assert set(cli._SCENARIOS) == set(bench.SCENARIOS) == set(TINY)


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def check_result(result: dict[str, Any], scenario: str, processes: int | None) -> None:
    for key in bench.RESULT_KEYS:
        assert key in result, key
    assert result["scenario"] == scenario
    assert result["processes"] == (processes or 0)
    for key in ("jobs", "seconds", "jobs_per_s", "commits_per_job", "wal_bytes_per_job"):
        assert _positive(result[key]), (key, result[key])
    assert result["completed"] == result["jobs"]
    rss = result["rss_kib"]
    assert _positive(rss["supervisor"])
    assert len(rss["workers"]) == (processes or 0)
    assert all(_positive(kib) for kib in rss["workers"])
    if scenario == "scheduled":  # timed from the due moment, not over the window
        assert result["cpu_busy"] is None
    elif result["cpu_busy"] is not None:  # None: a tiny run that ended within a clock tick
        assert 0.0 <= result["cpu_busy"] <= 1.0, result["cpu_busy"]
    env = result["env"]
    assert env["cpu_count"] >= 1 and env["cpu_model"]
    assert env["postgres"]["fsync"] in ("on", "off")
    assert "awa-fast" in env["packages"] or "psycopg" in env["packages"]
    if scenario == "cpu":  # every burn's CPU time was recorded, in workers too
        assert _positive(result["burn_ms_measured"])
        expected = result["jobs_per_s"] * result["burn_ms_measured"] / result["burn_ms"]
        assert result["jobs_per_s_normalized"] == pytest.approx(expected, rel=1e-3, abs=0.1)
    json.dumps(result)  # a JSON line, as written


def check_latency(latency: dict[str, float]) -> None:
    assert set(latency) >= {"p50", "p95", "p99", "max"}
    assert all(math.isfinite(v) for v in latency.values())
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"]


@pytest.mark.parametrize("scenario", list(bench.SCENARIOS))
def test_scenario_in_process(dsn: str, scenario: str) -> None:
    result = uvloop.run(bench.SCENARIOS[scenario](dsn, **TINY[scenario]))
    check_result(result, scenario, None)
    if scenario in ("latency", "sustained"):
        check_latency(result["latency_ms"])
    if scenario == "latency":
        assert result["listening"] is True and result["variant"] == ""


def test_latency_as_behind_a_transaction_pooler_polls_without_a_listener(dsn: str) -> None:
    planned = bench.plan(["latency"], transaction_pooling=True, standby=False)[0]
    assert planned.options == {"standby": False, "transaction_pooling": True}
    result = uvloop.run(
        bench.SCENARIOS["latency"](dsn, transaction_pooling=True, **TINY["latency"])
    )
    check_result(result, "latency", None)
    check_latency(result["latency_ms"])
    assert result["listening"] is False
    assert result["variant"] == "as behind a transaction pooler"


def test_bench_takes_transaction_pooling_from_the_command_line() -> None:
    from awa_fast import cli

    pooled = cli.parser().parse_args(["bench", "latency", "--transaction-pooling"])
    assert pooled.transaction_pooling is True
    assert cli.parser().parse_args(["bench", "latency"]).transaction_pooling is False


@pytest.mark.parametrize("scenario", ["drain", "cpu", "latency"])
def test_scenario_in_worker_processes(dsn: str, scenario: str) -> None:
    result = uvloop.run(bench.SCENARIOS[scenario](dsn, processes=2, **TINY[scenario]))
    check_result(result, scenario, 2)
    assert result["system"] == "awa-fast (2 worker processes)"


def test_cpu_burns_in_async_handlers_too(dsn: str) -> None:
    result = uvloop.run(bench.SCENARIOS["cpu"](dsn, processes=2, handler="async", **TINY["cpu"]))
    check_result(result, "cpu", 2)
    assert result["variant"] == "async handlers" and _positive(result["burn_ms_measured"])
    with pytest.raises(ValueError, match="handler must be one of sync, async, got 'thread'"):
        uvloop.run(bench.SCENARIOS["cpu"](dsn, handler="thread", **TINY["cpu"]))


def test_sustained_samples_depth_dead_tuples_and_pickup_over_time(dsn: str) -> None:
    result = uvloop.run(bench.sustained(dsn, **TINY["sustained"]))
    samples = result["samples"]
    assert len(samples) >= 2
    times = [s[0] for s in samples]
    assert times == sorted(times)
    assert times[0] < result["duration_s"] < times[-1] + 1.0  # since the first insert
    assert all(s[1] >= 0 and s[2] >= 0 and s[3] >= 0 for s in samples)
    buckets = result["over_time"]
    assert [b[0] for b in buckets] == sorted({b[0] for b in buckets}) and buckets[0][0] == 0.0
    # each job's pickup is part of its end-to-end time, so each bucket's percentiles nest
    assert all(0.0 <= p50 <= p99 <= whole_p99 for _, p50, p99, whole_p99 in buckets)
    assert result["pickup_ms"]["p99"] <= result["latency_ms"]["p99"]
    assert result["offered_per_s"] == 400.0 and _positive(result["completed_per_s"])
    assert "after_drains_per_s" not in result  # a fixed rate has no basis to check
    assert 0.0 < result["cpu_busy"] <= 1.0  # a second of a producer and a pool, on Linux


def test_sustained_on_the_capacity_basis_offers_a_share_of_what_was_completed(dsn: str) -> None:
    result = uvloop.run(
        bench.sustained(dsn, jobs=200, load=0.9, basis="capacity", drain_rate=400.0, duration=1.0)
    )
    assert result["basis"] == "capacity" and result["variant"] == "90% of capacity"
    assert 0 < result["basis_per_s"] <= 400.0 * 1.1  # completions while 400/s was offered
    assert result["offered_per_s"] == pytest.approx(0.9 * result["basis_per_s"], abs=0.1)
    assert result["completed"] == result["jobs"]
    with pytest.raises(ValueError, match="basis must be one of"):
        uvloop.run(bench.sustained(dsn, jobs=10, basis="nope"))


def test_each_sustained_run_offers_a_share_of_its_own_drains(server_url: str) -> None:
    """run_all measures the drain scenario first, but a sustained run's load comes from the
    median of the drains it measures itself just before offering (the machine drifts in
    between)."""
    half_of_drain = bench.plan(["sustained"], jobs=200, duration=1.0)[0]
    assert half_of_drain.options["load"] == 0.5
    planned = [*bench.plan(["drain"], jobs=200), half_of_drain]
    results = bench.run_all(server_url, planned, runs=2)
    drains = [r["jobs_per_s"] for r in results if r["scenario"] == "drain"]
    runs = [r for r in results if r["scenario"] == "sustained"]
    assert len(drains) == len(runs) == 2
    for run in runs:
        assert len(run["basis_drains_per_s"]) == bench.BASIS_DRAINS == 3
        assert all(map(_positive, run["basis_drains_per_s"]))
        median = statistics.median(run["basis_drains_per_s"])
        assert run["basis_per_s"] == pytest.approx(median, abs=0.1)
        assert run["offered_per_s"] == pytest.approx(0.5 * run["basis_per_s"], abs=0.1)
        assert len(run["after_drains_per_s"]) == bench.BASIS_DRAINS
        assert all(map(_positive, run["after_drains_per_s"]))
        after = statistics.median(run["after_drains_per_s"])
        assert run["load_after"] == pytest.approx(run["offered_per_s"] / after, abs=0.001)
    earlier = {round(rate, 1) for rate in (*drains, statistics.median(drains))}
    assert earlier.isdisjoint(run["basis_per_s"] for run in runs)


def test_busy_share_is_the_busy_part_of_the_ticks_between_two_readings() -> None:
    assert busy_share((100, 400), (250, 600)) == 0.75
    assert busy_share((100, 400), (100, 600)) == 0.0
    assert busy_share(None, (250, 600)) is None and busy_share((100, 400), None) is None
    assert busy_share((100, 400), (100, 400)) is None  # no tick between them
    reading = cpu_jiffies()  # these tests run on Linux
    assert reading is not None and 0 < reading[0] <= reading[1]


def test_plan_expands_cpu_over_processes_and_sustained_over_loads() -> None:
    planned = bench.plan(["cpu", "sustained"], processes=2, duration=3.0)
    assert [(p.scenario, p.processes) for p in planned] == [
        ("cpu", 1),
        ("cpu", 2),
        ("sustained", 2),
        ("sustained", 2),
        ("sustained", 2),
    ]
    loads = [(p.options.get("load"), p.options.get("basis")) for p in planned[2:]]
    assert loads == list(bench.SUSTAINED_LOADS)
    with pytest.raises(ValueError, match="unknown scenario"):
        bench.plan(["nope"])


def _row(system: str, jobs_per_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "scenario": "drain",
        "system": system,
        "variant": "",
        "jobs_per_s": jobs_per_s,
        "commits_per_job": 0.01,
        "wal_bytes_per_job": 600.0,
        **extra,
    }


def test_report_takes_medians_and_marks_unsupported(tmp_path: Path) -> None:
    bench.save_results(tmp_path / "awa-fast.jsonl", [_row("awa-fast", v) for v in (1, 3, 2)])
    bench.save_results(tmp_path / "awa-fast.jsonl", [_row("awa-fast", v) for v in (5, 7, 6)])
    peers = tmp_path / "peers.jsonl"
    peers.write_text(
        json.dumps(_row("pgqueuer", 4.0))
        + "\nnot json, a log line\n"
        + json.dumps({"scenario": "drain", "system": "other", "unsupported": "no pool"})
        + "\n"
    )
    rows = report.summarize(report.load_results([tmp_path / "awa-fast.jsonl", peers]))
    by_system = {r["system"]: r for r in rows}
    assert by_system["awa-fast"]["jobs_per_s"] == 6  # the second save replaced the first
    assert by_system["awa-fast"]["median_of"] == 3
    table = report.markdown(rows)
    assert "| drain | other |  | n/a: no pool |" in table
    assert "pgqueuer" in table


def test_sustained_rows_show_the_run_with_the_median_p99(tmp_path: Path) -> None:
    """A sustained row is the run whose end-to-end p99 (the scenario's target) is the
    median, whatever the runs' jobs/s: the fastest run may be the one that fell behind."""
    runs = [
        _row("awa-fast", rate, scenario="sustained", latency_ms={"p50": 1.0, "p99": p99})
        for rate, p99 in ((45_000, 1_556.0), (37_000, 86.0), (50_000, 520.0))
    ]
    bench.save_results(tmp_path / "awa-fast.jsonl", runs)
    [row] = report.summarize(report.load_results([tmp_path / "awa-fast.jsonl"]))
    assert (row["latency_ms"]["p99"], row["median_of"]) == (520.0, 3)


def test_report_lists_every_sustained_run_with_its_basis_and_how_busy_the_machine_was(
    tmp_path: Path,
) -> None:
    def run(n: int, p99: float, **extra: Any) -> dict[str, Any]:
        return _row(
            "awa-fast", 40_000.0, scenario="sustained", variant="90% of drain", run=n,
            latency_ms={"p50": 1.0, "p99": p99}, basis_per_s=44_444.4, offered_per_s=40_000.0,
            completed_per_s=39_500.0, **extra,
        )  # fmt: skip

    pickup = {"p50": 2.46, "p99": 31.2}
    runs = [run(2, 574.2, load_after=0.908, cpu_busy=0.889, pickup_ms=pickup), run(1, 170.4)]
    bench.save_results(tmp_path / "awa-fast.jsonl", [*runs, _row("awa-fast", 5.0)])
    results = report.load_results([tmp_path / "awa-fast.jsonl"])
    table = report.sustained_runs(results).splitlines()
    assert table[0] == "## sustained, run by run"
    first, second = table[-2:]  # run order, whatever the file's
    assert first == "| awa-fast | 90% of drain | 1 | 44,444 | 40,000 | 39,500 |  | 170 |  |  |"
    assert second == (
        "| awa-fast | 90% of drain | 2 | 44,444 | 40,000 | 39,500 | 2.5 / 31 | 574 | 0.91 | 89% |"
    )
    assert report.sustained_runs([r for r in results if r["scenario"] != "sustained"]) == ""
    assert "## sustained, run by run" in report.write_report(tmp_path).read_text()


def test_the_sustained_chart_draws_depth_and_pickup_over_time(tmp_path: Path) -> None:
    run = _row(
        "awa-fast", 40_000.0, scenario="sustained", variant="90% of drain",
        latency_ms={"p50": 9.0, "p99": 30.0}, samples=[[-0.2, 0, 0, 0], [0.5, 120, 40, 9_000]],
        over_time=[[0.0, 4.1, 20.0, 28.0], [0.5, 5.2, 24.0, 31.0]],
    )  # fmt: skip
    bench.save_results(tmp_path / "awa-fast.jsonl", [run])
    text = report.write_report(tmp_path).read_text()
    assert "![sustained](sustained.png)" in text
    assert (tmp_path / "sustained.png").read_bytes().startswith(b"\x89PNG")


def test_cli_bench_writes_json_lines_and_a_table(server_url: str, tmp_path: Path) -> None:
    from awa_fast.cli import main

    argv = ["bench", "drain", "--jobs", "200", "--runs", "1", "--out", str(tmp_path)]
    assert main([*argv, "--database-url", server_url]) == 0
    lines = (tmp_path / "awa-fast.jsonl").read_text().splitlines()
    assert len(lines) == 1
    check_result(json.loads(lines[0]), "drain", None)
    assert "| drain | awa-fast (1 process) |" in (tmp_path / "results.md").read_text()


def test_carry_prints_a_drain_and_each_offered_rate(
    server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from benches import carry

    argv = [server_url, "--rates", "300", "600", "--rounds", "1", "--processes", "0"]
    carry.main([*argv, "--jobs", "200", "--duration", "1"])
    drain, *offered = capsys.readouterr().out.splitlines()
    assert drain.startswith("drain ") and drain.endswith(" jobs/s")
    assert [line.split()[1] for line in offered] == ["300", "600"]
    for line in offered:
        completed = float(line.split()[3].replace(",", ""))
        assert completed > 0, line


def test_cpu_split_prints_cpu_per_job_of_each_part(
    server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from benches import cpu_split

    window = ["--duration", "2", "--skip", "0.5", "--window", "1"]
    cpu_split.main([server_url, "--rate", "300", "--processes", "0", *window])
    head, *parts, total, _sampling = capsys.readouterr().out.splitlines()
    assert head.startswith("offered 300 completed ") and head.endswith("CPU us per job:")
    assert "supervisor" in {line.split(None, 1)[1] for line in parts}
    assert total.endswith(" total") and float(total.split()[0]) > 0


def test_cpu_split_of_a_drain_counts_the_pool_per_drained_job(
    server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from benches import cpu_split

    cpu_split.main([server_url, "--drain", "20000", "--processes", "0"])
    head, *parts, total, _sampling = capsys.readouterr().out.splitlines()
    assert head.startswith("drained 20,000 jobs at ") and head.endswith("CPU us per job:")
    per_part = {line.split(None, 1)[1]: float(line.split()[0]) for line in parts}
    assert per_part["supervisor"] > 0 and per_part["postgres: awa-fast claimer"] > 0
    assert float(total.split()[0]) == pytest.approx(sum(per_part.values()), abs=0.05 * len(parts))
    with pytest.raises(SystemExit):  # a rate and a drain at once
        cpu_split.main([server_url, "--drain", "10", "--rate", "10"])


def test_cpu_split_of_the_cpu_scenario_names_the_burn_and_its_share(
    server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from benches import cpu_split

    cpu_split.main([server_url, "--cpu", "400", "--cpu-ms", "0.5", "--concurrency", "4"])
    head, *parts, total, sampling, burn = capsys.readouterr().out.splitlines()
    assert head.startswith("burned 0.5 ms in 400 jobs at ") and head.endswith("CPU us per job:")
    per_part = {line.split(None, 1)[1]: float(line.split()[0]) for line in parts}
    # Named even when a run this short cost its backend less than a clock tick.
    assert per_part["worker processes"] > 0 and per_part["postgres: awa-fast claimer"] >= 0
    assert float(total.split()[0]) == pytest.approx(sum(per_part.values()), abs=0.05 * len(parts))
    assert sampling.endswith("this tool's sampling, not in the supervisor's")
    burned, share = float(burn.split()[0]), float(burn.split(": ")[1].split("%")[0])
    assert burned > 0 and 0 < share <= 100, burn
    assert burn.endswith(f"% of {os.cpu_count()} cores")


@pytest.mark.parametrize("source", ["packs", "rows"])
def test_claim_cost_claims_and_completes_every_job_at_each_size(
    server_url: str, capsys: pytest.CaptureFixture[str], source: str
) -> None:
    from benches import claim_cost

    rows = ["--rows"] if source == "rows" else []
    claim_cost.main([server_url, "--sizes", "7,64", "--jobs", "150", "--rounds", "1", *rows])
    head, columns, *sizes = capsys.readouterr().out.splitlines()
    assert head == f"150 {'rows' if rows else 'packed jobs'}, median of 1"
    assert columns.startswith("claim size | claimer us/job")
    figures = {int(line.split(" | ")[0]): line.split(" | ")[1:] for line in sizes}
    assert list(figures) == [7, 64]
    claim, complete, both, _ = (float(figure) for figure in figures[64])
    assert claim >= 0 and complete >= 0 and both == pytest.approx(claim + complete, abs=0.11)


def test_claim_cost_claims_the_jobs_ahead_of_a_backlog(
    server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from benches import claim_cost

    claim_cost.main(
        [server_url, "--sizes", "64", "--jobs", "100", "--rounds", "1", "--backlog", "500"]
    )
    head, _, size = capsys.readouterr().out.splitlines()
    assert head == "100 packed jobs, 500 rows behind, median of 1"
    claim, complete, both, _ = (float(figure) for figure in size.split(" | ")[1:])
    assert claim >= 0 and complete >= 0 and both == pytest.approx(claim + complete, abs=0.11)


def test_cpu_concurrency_measures_the_burn_alone_as_its_ceiling() -> None:
    import argparse

    from benches import cpu_concurrency

    opts = argparse.Namespace(jobs=41, processes=2, cpu_ms=0.2)
    row = cpu_concurrency.no_queue(4, 1, opts=opts)
    assert row["system"] == cpu_concurrency.NO_QUEUE and row["ok"] and row["jobs"] == 41
    # Each burn taken once, by one of the two processes.
    assert len(row["jobs_by_process"]) == 2 and sum(row["jobs_by_process"]) == 41
    assert _positive(row["jobs_per_s"]) and _positive(row["burn_ms_measured"])
    assert row["jobs_per_s"] == pytest.approx(41 / row["elapsed_s"], rel=0.01)
    # Its burns took CPU time the two processes had between them, no more.
    cores_used = row["jobs_per_s"] * row["burn_ms_measured"] / 1000
    assert 0 < cores_used <= 2 * 1.01


def test_cpu_concurrency_table_compares_awa_fast_with_the_peers_not_the_ceiling() -> None:
    from benches import cpu_concurrency

    def run(rate: float) -> list[dict[str, Any]]:
        return [{"jobs_per_s": rate, "burn_ms_measured": 1.0}]

    labels = ["awa-fast", "pgqueuer", cpu_concurrency.NO_QUEUE]
    results = {(2, "awa-fast"): run(800.0), (2, "pgqueuer"): run(400.0)}
    results[(2, cpu_concurrency.NO_QUEUE)] = run(1000.0)
    lines = cpu_concurrency.table(results, labels).splitlines()
    assert lines[0].endswith("| awa-fast / best peer, by share |")
    share = [f"{rate / (os.cpu_count() or 1):.0%}" for rate in (0.8, 0.4, 1.0)]
    assert lines[2] == f"| 2 | 800 | {share[0]} | 400 | {share[1]} | 1,000 | {share[2]} | 2.00 |"


def test_cpu_concurrency_compares_shares_each_run_at_its_own_burn_cost() -> None:
    """A peer that ran in a faster minute (its burn 0.5 ms) outpaces awa-fast in jobs/s
    at a smaller share of the cores; the ratio compares the shares."""
    from benches import cpu_concurrency

    results = {
        (2, "awa-fast"): [{"jobs_per_s": 800.0, "burn_ms_measured": 1.0}],
        (2, "pgqueuer"): [{"jobs_per_s": 1000.0, "burn_ms_measured": 0.5}],
    }
    row = cpu_concurrency.table(results, ["awa-fast", "pgqueuer"]).splitlines()[2]
    assert row.endswith(" | 1.60 |")


def test_idle_cost_prints_each_part_of_an_idle_pool_and_their_total(
    server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from benches import idle_cost

    idle_cost.main([server_url, "--seconds", "0.5", "--settle", "0.2", "--rounds", "1"])
    head, *lines = capsys.readouterr().out.splitlines()
    assert head == "idle pool, 2 workers: CPU ms a second, median of 1"
    costs = {part: float(ms) for ms, part in (line.split(maxsplit=1) for line in lines)}
    parts = {"supervisor", "worker processes", "postgres: awa-fast claimer", "total"}
    assert parts <= set(costs) and list(costs)[-1] == "total"
    assert all(ms >= 0 for ms in costs.values())
    assert costs["total"] == pytest.approx(sum(costs.values()) - costs["total"], abs=0.05)


def test_pressure_reports_each_phase_the_dead_tuples_and_a_verdict(
    server_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benches.__main__ import main

    phases = ["--clean", "2", "--hold", "2", "--recovery", "2"]
    sampling = ["--window", "1", "--sample-every", "0.5", "--out", str(tmp_path)]
    argv = ["pressure", "--database-url", server_url, "--rate", "40", *phases, *sampling]
    assert main(argv) == 0
    [path] = tmp_path.glob("*-pressure-40.json")
    result = json.loads(path.read_text())
    assert list(result["phases"]) == ["clean", "hold", "recovery"]
    for figures in result["phases"].values():
        check_latency(figures["pickup_ms"])
        assert _positive(figures["inserted_per_s"]) and _positive(figures["completed_per_s"])
    assert [w["phase"] for w in result["windows"]] == [p for p in result["phases"] for _ in "ab"]
    samples = result["samples"]
    assert len(samples) == 13 and [s["t"] for s in samples] == sorted(s["t"] for s in samples)
    for s in samples:
        assert all(len(row) == 4 and min(row) >= 0 for row in s["tables"].values())
        assert "jobs_hot" in s["tables"]
    # Postgres saw the transaction idle with its xid while the hold lasted, and not after.
    hold = result["hold"]
    held = [s["t"] for s in samples if s["held_s"] is not None]
    assert held and max(held) <= hold["closed_s"]
    assert all(s["held_s"] is None for s in samples if s["t"] > hold["closed_s"])
    jobs_hot = result["tables"]["jobs_hot"]
    assert set(jobs_hot["peak_dead"]) == {"clean", "hold", "recovery"}
    assert jobs_hot["hold_dead_per_job"] >= 0
    verdict = result["verdict"]
    assert len(verdict) == 6 and all(isinstance(c["pass"], bool) for c in verdict)
    printed = capsys.readouterr().out
    for c in verdict:
        assert f"{'PASS' if c['pass'] else 'FAIL'} {c['criterion']}" in printed


def test_pressure_verdict_fails_each_target_missed() -> None:
    from benches.pressure import verdict

    def phase(done: float, p50: float, p99: float) -> dict[str, Any]:
        figures = {"inserted_per_s": done, "completed_per_s": done}
        return {**figures, "pickup_ms": {"p50": p50, "p99": p99}}

    flat = {"first_quarter_p99_ms": 9.0, "last_quarter_p99_ms": 9.5, "p99_slope_ms_per_min": 0.1}
    phases = {p: phase(498.0, 4.0, 9.0) for p in ("clean", "hold", "recovery")}
    assert all(c["pass"] for c in verdict(500.0, phases, flat))
    phases["hold"] = phase(460.0, 29.0, 55.0)
    rising = {**flat, "first_quarter_p99_ms": 12.0, "last_quarter_p99_ms": 55.0}
    failed = [c["criterion"] for c in verdict(500.0, phases, rising) if not c["pass"]]
    assert [name.split(":")[0] for name in failed] == [
        "throughput holds in hold",
        "hold p50 within 1.5x of clean",
        "hold p99 within 1.5x of clean",
        "no upward trend",
    ]


def test_pressure_phases_are_whole_windows_of_whole_samples() -> None:
    from benches.pressure import Shape

    Shape(500.0, 120.0, 240.0, 120.0).check()
    with pytest.raises(ValueError, match="125 s is not a whole number of 10 s steps"):
        Shape(500.0, 125.0, 240.0, 120.0).check()
    with pytest.raises(ValueError, match="10 s is not a whole number of 3 s steps"):
        Shape(500.0, 120.0, 240.0, 120.0, sample_every=3.0).check()
