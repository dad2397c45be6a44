"""How runners' readings make the process's: each metric by its own rule."""

from __future__ import annotations

from awa_fast.runtime.metrics import METRICS
from awa_fast.telemetry import readings

BY_NAME = {metric.name: metric for metric in METRICS}


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
