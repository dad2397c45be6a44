"""Weighted mode's shares (awa_fast.runtime.claim.shares): the guaranteed minimums, the pool
shared by weight among the queues contending for it, and an idle queue's share given up."""

from __future__ import annotations

from awa_fast.runtime.claim.shares import Shares, Weights, within

# A global pool of 10: queue 0 guaranteed 2 at weight 3, queue 1 nothing at weight 1.
WEIGHTS = Weights(total=10, minimums=(2, 0), weights=(3, 1))


def shares(running: list[int]) -> Shares:
    return Shares(WEIGHTS, lambda: running)


def test_without_weights_nothing_is_limited() -> None:
    unweighted = Shares(None, lambda: [5])
    assert (unweighted.room(0), unweighted.ceiling(0)) == (None, None)


def test_the_pool_is_shared_by_weight_on_top_of_the_minimums() -> None:
    idle = shares([0, 0])
    # The pool is 8: queue 0 may hold 6 of it (8 * 3/4), queue 1 the other 2.
    assert (idle.room(0), idle.room(1)) == (2 + 6, 2)
    assert (idle.ceiling(0), idle.ceiling(1)) == (8, 2)
    full = shares([8, 2])
    assert (full.room(0), full.room(1)) == (0, 0)


def test_a_queue_over_its_minimum_holds_pool_others_cannot_take() -> None:
    busy = shares([8, 0])  # queue 0 holds 6 of the pool: 2 are left
    assert (busy.room(0), busy.room(1)) == (0, 2)


def test_a_queue_whose_claim_came_back_short_leaves_its_share() -> None:
    running = [8, 0]
    weighted = Shares(WEIGHTS, lambda: running)
    weighted.claimed(1, wanted=2, got=0)  # queue 1 is drained
    assert (weighted.room(0), weighted.ceiling(0)) == (2, 10)  # the whole pool is queue 0's
    weighted.claimed(1, wanted=2, got=2)  # queue 1 has work again: back to sharing
    assert weighted.room(0) == 0


def test_free_units_are_cut_to_the_room_in_their_order() -> None:
    free = [(5, 0, 0), (3, 1, 1), (0, 2, 2)]
    assert within(free, None) == free
    assert within(free, 6) == [(5, 0, 0), (1, 1, 1), (0, 2, 2)]
    assert within(free, 0) == [(0, 0, 0), (0, 1, 1), (0, 2, 2)]
