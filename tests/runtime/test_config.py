"""Runner tuning is validated once, when it is built, with an error naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from awa_fast.errors import ConfigError
from awa_fast.runtime.config import RunnerConfig


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("claimers", 0, "claimers must be an integer >= 1, got 0"),
        ("claim_batch", 0, "claim_batch must be an integer >= 1, got 0"),
        ("claim_batch", "500", "claim_batch must be an integer, got '500'"),
        ("commit_delay", 0.0, "commit_delay must be > 0 seconds"),
        ("heartbeat_interval", "5", "heartbeat_interval must be a number of seconds, got '5'"),
        ("deadline", 1e300, r"deadline must be > 0 seconds and below 1e\+09, got 1e\+300"),
        ("poll_interval", float("inf"), "poll_interval must be > 0 seconds and below 1e"),
        ("commit_batch_max", 255, r"commit_batch_max must be >= commit_batch \(256\), got 255"),
    ],
)
def test_bad_tuning_names_the_field(field: str, value: float, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RunnerConfig(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1.0, r"descriptor_retention must be a finite number of seconds >= 0 .*got -1\.0"),
        (float("nan"), "descriptor_retention must be a finite number of seconds >= 0"),
        (float("inf"), "descriptor_retention must be a finite number of seconds >= 0"),
        (True, r"descriptor_retention must be .*\(0 disables retention\), got True"),
        ("30d", "descriptor_retention must be a finite number of seconds >= 0"),
        (19.0, r"descriptor_retention must be 0 or at least 4 heartbeat intervals \(20 s\)"),
    ],
)
def test_a_bad_descriptor_retention_names_the_field(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RunnerConfig(descriptor_retention=value, heartbeat_interval=5.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="descriptor_refresh_interval must be > 0 seconds"):
        RunnerConfig(descriptor_refresh_interval=0.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_jobs_per_worker", 0, "max_jobs_per_worker must be an integer >= 1, got 0"),
        ("max_jobs_per_worker", -3, "max_jobs_per_worker must be an integer >= 1, got -3"),
        ("max_jobs_per_worker", 2.5, "max_jobs_per_worker must be an integer, got 2.5"),
        ("max_worker_memory_mb", 0, r"max_worker_memory_mb must be None or .* > 0, got 0"),
        ("max_worker_memory_mb", -5.0, r"max_worker_memory_mb must be .*, got -5\.0"),
        ("max_worker_memory_mb", float("nan"), "max_worker_memory_mb must be .*, got nan"),
        ("max_worker_memory_mb", float("inf"), "max_worker_memory_mb must be .*, got inf"),
        ("max_worker_memory_mb", "512", "max_worker_memory_mb must be .*, got '512'"),
    ],
)
def test_a_worker_limit_that_would_recycle_every_worker_is_refused(
    field: str, value: object, message: str
) -> None:
    """Before, a negative limit passed, and every worker was replaced after each job."""
    with pytest.raises(ConfigError, match=message):
        RunnerConfig(**{field: value})  # type: ignore[arg-type]
    limits = RunnerConfig(max_jobs_per_worker=1, max_worker_memory_mb=0.5)
    assert (limits.max_jobs_per_worker, limits.max_worker_memory_mb) == (1, 0.5)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"queue_deadlines": {"q": 1e300}}, "queue 'q': deadline must be > 0 seconds and below"),
        ({"queue_deadlines": {"q": "1h"}}, "queue 'q': deadline must be a number of seconds"),
        ({"queue_retention": {"q": (60.0, -1.0)}}, "queue 'q': failed retention must be > 0"),
        (
            {"queue_retention": {"q": (60.0,)}},
            r"queue 'q': retention must be \(completed, failed\)",
        ),
        ({"queue_aging": {"q": 0.0}}, "queue 'q': priority aging interval must be > 0 seconds"),
        ({"queue_claim_batches": {"q": 0}}, "queue 'q': claim batch must be an integer >= 1"),
    ],
)
def test_a_bad_per_queue_setting_names_its_queue(setting: dict[str, Any], message: str) -> None:
    """Before, a deadline of 1e300 seconds passed here, every claim of the queue then failed
    in Postgres, and the claimers restarted over and over with its jobs never started."""
    with pytest.raises(ConfigError, match=message):
        RunnerConfig(**setting)


def test_descriptors_are_refreshed_several_times_within_any_retention() -> None:
    """A quarter of the retention at most: a live host's descriptors are refreshed long
    before the leader could take them for abandoned; with retention off (the leader may
    be another host, with its own), at the interval given."""
    assert RunnerConfig().descriptor_retention == 30 * 86400.0
    assert RunnerConfig().descriptor_refresh_every() == 3600.0
    short = RunnerConfig(descriptor_retention=600.0, heartbeat_interval=1.0)
    assert short.descriptor_refresh_every() == 150.0
    assert RunnerConfig(descriptor_retention=0).descriptor_refresh_every() == 3600.0
    shortest = RunnerConfig(descriptor_retention=20.0, heartbeat_interval=5.0)  # 4 beats
    assert shortest.descriptor_refresh_every() == 5.0  # a refresh on every heartbeat


def test_weighted_mode_takes_no_prefetch() -> None:
    with pytest.raises(ConfigError, match=r"prefetch=4 with global_max_workers: .*leave prefetch"):
        RunnerConfig(global_max_workers=8, prefetch=4)
    assert RunnerConfig(global_max_workers=8, prefetch=0).held_ahead == 0
    assert RunnerConfig(global_max_workers=8).held_ahead == 0
    assert RunnerConfig(prefetch=4).held_ahead == 4
