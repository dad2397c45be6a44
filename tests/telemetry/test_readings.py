"""How runners' readings make the process's: each metric by its own rule."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import awa_fast
from awa_fast.runtime.metrics import METRICS
from awa_fast.telemetry import readings

BY_NAME = {metric.name: metric for metric in METRICS}


@dataclass
class Job:
    n: int


def test_counters_add_up_per_label_value() -> None:
    numbers: readings.Numbers = {"email": 2}
    readings.add(BY_NAME["awa_fast_jobs_claimed_total"], numbers, {"email": 3, "sms": 1})
    assert numbers == {"email": 5, "sms": 1}


def test_the_stalest_heartbeat_and_any_leader_stand_for_the_process() -> None:
    ages: readings.Numbers = {None: 4.0}
    readings.add(BY_NAME["awa_fast_heartbeat_age_seconds"], ages, {None: 1.0})
    assert ages == {None: 4.0}
    leader: readings.Numbers = {None: 0}
    readings.add(BY_NAME["awa_fast_leader"], leader, {None: 1})
    assert leader == {None: 1}


def test_a_process_that_only_produces_reads_its_backpressure_counts(dsn: str) -> None:
    """No runner runs here: the refusals this process's inserts met are read all the
    same, for telemetry to export."""
    refused = BY_NAME["awa_fast_inserts_backpressure_refused_total"]
    before = readings.Readings().read(refused).get("prod", 0)
    with awa_fast.Client(dsn) as producer:
        producer.insert(Job(0), queue="prod", max_queue_depth=1)
        with pytest.raises(awa_fast.QueueFull):
            producer.insert(Job(1), queue="prod", max_queue_depth=1)
    assert readings.Readings().read(refused)["prod"] == before + 1
