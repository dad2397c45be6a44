"""PackWatch: which claims look at packs (awa_fast.runtime.claim.packwatch)."""

from __future__ import annotations

from awa_fast.runtime.claim.packwatch import PackWatch


def test_rows_alone_after_a_short_look_until_news() -> None:
    watch = PackWatch(2, every=60.0)
    token = watch.claim(0, now=0.0)
    assert token is not None and watch.claim(1, now=0.0) is not None  # nobody has looked yet
    watch.claimed(0, token, full=False)
    assert watch.claim(0, now=1.0) is None and watch.claim(1, now=1.0) is not None
    watch.heard(0)
    assert watch.claim(0, now=2.0) is not None


def test_a_full_look_is_news_and_so_is_news_heard_during_a_look() -> None:
    watch = PackWatch(1, every=60.0)
    token = watch.claim(0, now=0.0)
    assert token is not None
    watch.claimed(0, token, full=True)  # may have left part of a pack
    later = watch.claim(0, now=1.0)
    assert later is not None
    watch.heard()  # a pack arrived while that claim ran
    watch.claimed(0, later, full=False)
    assert watch.claim(0, now=2.0) is not None


def test_claims_look_at_packs_once_an_interval_without_news() -> None:
    watch = PackWatch(1, every=5.0)
    token = watch.claim(0, now=0.0)
    assert token is not None
    watch.claimed(0, token, full=False)
    assert watch.claim(0, now=4.9) is None
    again = watch.claim(0, now=5.0)
    assert again is not None
    watch.claimed(0, again, full=False)
    assert watch.claim(0, now=9.9) is None
