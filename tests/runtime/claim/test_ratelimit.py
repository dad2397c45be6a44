"""The token bucket behind per-queue rate limits, on explicit clocks."""

from __future__ import annotations

import pytest

from awa_fast.errors import ConfigError, ConfigTypeError
from awa_fast.runtime.claim.ratelimit import TokenBucket
from awa_fast.validation import check_rate_limit


def test_a_bucket_starts_full_and_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(rate=10.0, burst=5)
    assert bucket.available(100.0) == 5
    bucket.spend(5)
    assert bucket.available(100.0) == 0
    assert bucket.wait(100.0) == pytest.approx(0.1)
    assert bucket.available(100.25) == 2  # 2.5 tokens: whole ones only
    assert bucket.wait(100.25) == 0.0
    assert bucket.available(160.0) == 5  # never more than the burst


def test_tokens_a_claim_did_not_use_come_back_but_never_past_the_burst() -> None:
    bucket = TokenBucket(rate=1.0, burst=3)
    bucket.spend(bucket.available(0.0))
    bucket.spend(-2)  # the claim found one job of the three it asked for
    assert bucket.available(0.0) == 2
    bucket.spend(-5)
    assert bucket.available(0.0) == 3


def test_a_slow_rate_waits_whole_seconds_for_its_token() -> None:
    bucket = TokenBucket(rate=0.5, burst=1)
    bucket.spend(1)
    assert bucket.wait(0.0) == pytest.approx(2.0)
    assert bucket.available(1.9) == 0
    assert bucket.available(2.0) == 1


def test_a_rate_limit_is_checked_and_normalized() -> None:
    assert check_rate_limit("q", (5, 2)) == (5.0, 2)
    assert check_rate_limit("q", [0.5, 1]) == (0.5, 1)
    with pytest.raises(ConfigError, match=r"^rate_limit max_rate must be > 0\.0, got inf for"):
        check_rate_limit("q", (float("inf"), 1))
    with pytest.raises(ConfigError, match=r"^rate_limit burst must be an integer >= 1, got 0"):
        check_rate_limit("q", (1.0, 0))
    # not a pair of numbers: a TypeError in the Awa SDK's words, naming the queue
    for bad in ("fast", (1.0,), (1.0, True), (1.0, 2.5), ("1", 2), {"max_rate": 1}):
        with pytest.raises(ConfigTypeError, match=r"^rate_limit must be a \(max_rate: float, "):
            check_rate_limit("q", bad)
