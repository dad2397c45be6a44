"""Runner tuning is validated once, when it is built, with an error naming the field."""

from __future__ import annotations

import pytest

from awa_fast.errors import ConfigError
from awa_fast.runtime.runner import RunnerConfig


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("claimers", 0, "claimers must be >= 1"),
        ("claim_batch", 0, "claim_batch must be >= 1"),
        ("commit_delay", 0.0, "commit_delay must be > 0 seconds"),
        ("commit_batch_max", 255, r"commit_batch_max must be >= commit_batch \(256\), got 255"),
    ],
)
def test_bad_tuning_names_the_field(field: str, value: float, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RunnerConfig(**{field: value})  # type: ignore[arg-type]
