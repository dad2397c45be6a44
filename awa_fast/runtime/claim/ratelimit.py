"""Per-queue rate limits: how many jobs of a queue this runner may start a second.

A queue's limit is a token bucket (``max_rate`` tokens a second, holding at most
``burst``), as the Awa SDK's ``rate_limit=(max_rate, burst)``; each claimed job takes a
token. The claim loop takes tokens for what it is about to claim and gives back what the
claim did not find, all on the runner's loop, so no two claims spend a token twice. The
bucket belongs to one runner: N runners on a queue start up to N times its rate, as the
SDK's runtimes do.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class TokenBucket:
    rate: float  # tokens a second
    burst: int  # the most it holds; it starts full
    tokens: float = field(init=False)
    at: float | None = field(default=None, init=False)  # when ``tokens`` was last brought up

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def _refill(self, now: float) -> None:
        if self.at is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now

    def available(self, now: float) -> int:
        """Whole tokens in the bucket at ``now``."""
        self._refill(now)
        return int(self.tokens)

    def spend(self, tokens: int) -> None:
        """Take ``tokens`` (at most :meth:`available`) for the jobs a claim asks for;
        negative gives back those it did not find."""
        self.tokens = min(float(self.burst), self.tokens - tokens)

    def wait(self, now: float) -> float:
        """Seconds until the next whole token (0 when there is one)."""
        self._refill(now)
        return max(0.0, (1.0 - self.tokens) / self.rate)
