"""The OTLP message: laid out as the Awa SDK lays out its own (read by the same reader),
each number typed as it is, and runners' readings combined per metric."""

from __future__ import annotations

from awa_fast.runtime.metrics import METRICS
from awa_fast.telemetry import otlp
from tests.telemetry.collector import SDK_EXPORT, read_export

BY_NAME = {metric.name: metric for metric in METRICS}


def test_the_reader_reads_the_sdks_own_export() -> None:
    """sdk_export.pb: what awa-pg 0.6.9 sent after five jobs on queue "probe", with
    ``init_telemetry(endpoint, "svc", 500)``."""
    export = read_export(SDK_EXPORT.read_bytes())
    assert export.resource["service.name"] == "svc"
    assert export.scopes == ["awa"]
    claimed = export.metrics["awa.job.claimed"]
    assert (claimed.kind, claimed.temporality, claimed.monotonic) == ("sum", 2, True)
    assert export.number("awa.job.claimed", **{"awa.job.queue": "probe"}) == 5
    assert export.metrics["awa.queue.info"].kind == "gauge"


def test_counters_are_cumulative_sums_and_gauges_gauges() -> None:
    points: otlp.Points = {
        BY_NAME["awa_fast_jobs_claimed_total"]: {"email": 7, "sms": 0},
        BY_NAME["awa_fast_heartbeat_age_seconds"]: {None: 1.5},
        BY_NAME["awa_fast_leader"]: {None: 1},
        BY_NAME["awa_fast_jobs_rescued_total"]: {},  # nothing read: left out
    }
    message = otlp.export_request(
        points, resource={"service.name": "billing"}, start_ns=1_000, now_ns=2_000
    )
    export = read_export(message)
    assert export.resource == {"service.name": "billing"}
    assert export.scopes == ["awa_fast"]
    assert set(export.metrics) == {
        "awa_fast_jobs_claimed_total",
        "awa_fast_heartbeat_age_seconds",
        "awa_fast_leader",
    }
    claimed = export.metrics["awa_fast_jobs_claimed_total"]
    assert (claimed.kind, claimed.temporality, claimed.monotonic) == ("sum", 2, True)
    assert claimed.description == BY_NAME["awa_fast_jobs_claimed_total"].help
    assert claimed.points == {(("queue", "email"),): 7, (("queue", "sms"),): 0}
    assert claimed.times == [(1_000, 2_000)] * 2
    age = export.metrics["awa_fast_heartbeat_age_seconds"]
    assert age.kind == "gauge" and age.points == {(): 1.5}
    assert type(age.points[()]) is float
    leader = export.metrics["awa_fast_leader"]
    assert type(leader.points[()]) is int


def test_runners_combine_by_each_metrics_rule() -> None:
    claimed, age = BY_NAME["awa_fast_jobs_claimed_total"], BY_NAME["awa_fast_heartbeat_age_seconds"]
    numbers: otlp.Numbers = {"email": 2}
    otlp.add(claimed, numbers, {"email": 3, "sms": 1})
    assert numbers == {"email": 5, "sms": 1}
    ages: otlp.Numbers = {None: 4.0}
    otlp.add(age, ages, {None: 1.0})
    assert ages == {None: 4.0}  # the stalest
