"""The window claim of benches/window_claim.py takes every committed entry exactly once,
with transactions that roll back, commit late, and a held horizon, beside the row claim it
is measured against. Shape and exactness only, never speed."""

from __future__ import annotations

from benches import window_claim


def test_both_designs_claim_every_committed_job_exactly_once(dsn: str) -> None:
    tallies = window_claim.run(dsn, rate=400.0, batch=50, clean=1.0, hold=2.0)

    for name, tally in tallies.items():
        assert tally.committed and tally.rolled_back, name  # gaps and late commits happened
        assert tally.exactly_once(), name
        assert tally.pickups and tally.claims, name
