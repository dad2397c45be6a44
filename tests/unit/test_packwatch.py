"""PackWatch: which claims look at packs (awa_fast.runtime.packwatch)."""

from __future__ import annotations

from awa_fast.runtime.packwatch import PackWatch


def test_rows_alone_after_a_short_look_until_news() -> None:
    watch = PackWatch(2)
    token = watch.claim(0)
    assert token is not None and watch.claim(1) is not None  # nobody has looked yet
    watch.claimed(0, token, full=False)
    assert watch.claim(0) is None and watch.claim(1) is not None
    watch.heard(0)
    assert watch.claim(0) is not None


def test_a_full_look_is_news_and_so_is_news_heard_during_a_look() -> None:
    watch = PackWatch(1)
    token = watch.claim(0)
    assert token is not None
    watch.claimed(0, token, full=True)  # may have left part of a pack
    later = watch.claim(0)
    assert later is not None
    watch.heard()  # a pack arrived while that claim ran
    watch.claimed(0, later, full=False)
    assert watch.claim(0) is not None
