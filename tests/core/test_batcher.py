"""Batcher and Batch: in-process columnar collection of outcome records."""

from __future__ import annotations

import time

import pytest

from awa_fast._core import Batch, Batcher


def filled(n: int, *, max_size: int = 256, max_delay: float = 60.0) -> Batcher:
    b = Batcher(max_size, max_delay)
    for i in range(n):
        b.push(10 + i, 100 + i, i % 3, 7, i / 2, bytes([i]) * i)
    return b


def test_size_trigger_and_take_resets() -> None:
    b = filled(3, max_size=4)
    assert len(b) == 3 and not b.ready()
    b.push(99, 1, 0, 0, 0.0)
    assert b.ready()
    batch = b.take()
    assert isinstance(batch, Batch)
    assert len(batch) == 4
    assert len(b) == 0 and not b.ready()
    assert b.take() is None


def test_delay_trigger() -> None:
    b = Batcher(max_size=1000, max_delay=0.01)
    assert not b.ready()  # empty is never ready
    b.push(1, 1, 0, 0, 0.0)
    t0 = time.monotonic()
    assert not b.ready()
    deadline = t0 + 10
    while not b.ready():  # the age trigger must fire on its own
        assert time.monotonic() < deadline
    assert time.monotonic() - t0 >= 0.009
    assert (b.max_size, b.max_delay) == (1000, 0.01)


def test_columns() -> None:
    batch = filled(4).take()
    assert batch is not None
    assert batch.ids == [10, 11, 12, 13]
    assert batch.leases == [100, 101, 102, 103]
    assert batch.codes == [0, 1, 2, 0]
    assert batch.kinds == [7, 7, 7, 7]
    assert batch.numbers == [0.0, 0.5, 1.0, 1.5]
    assert batch.payloads == [None, b"\x01", b"\x02\x02", b"\x03\x03\x03"]
    with pytest.raises(AttributeError):
        batch.ids = [1]  # type: ignore[misc]


def test_settle_returns_stale_ids_in_batch_order() -> None:
    batch = filled(5).take()
    assert batch is not None
    assert batch.settle([14, 11, 999]) == [10, 12, 13]
    assert batch.settle(batch.ids) == []
    assert batch.settle([]) == [10, 11, 12, 13, 14]


def test_select_and_split_by_code() -> None:
    batch = filled(5).take()
    assert batch is not None
    sub = batch.select([4, 0])
    assert sub.ids == [14, 10] and sub.payloads == [b"\x04" * 4, None]
    assert len(batch.select([])) == 0
    with pytest.raises(IndexError):
        batch.select([5])
    with pytest.raises(IndexError):
        batch.select([-1])
    split = batch.split_by_code()
    assert sorted(split) == [0, 1, 2]
    assert split[0].ids == [10, 13] and split[1].ids == [11, 14] and split[2].ids == [12]
    assert split[1].payloads == [b"\x01", b"\x04" * 4]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_size"):
        Batcher(0)
    with pytest.raises(ValueError, match="max_delay"):
        Batcher(10, -1.0)
    with pytest.raises(OverflowError):
        Batcher().push(1, 1, 300, 0, 0.0)
