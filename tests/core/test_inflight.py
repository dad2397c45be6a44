"""InFlight: capacity counters and attempt slots shared across forked processes."""

from __future__ import annotations

import os
import signal

import pytest

from awa_fast._core import InFlight

from ._fork import Pipe, fork_child, reap, wait_ok


def test_child_slots_are_seen_and_cancelled_by_the_parent() -> None:
    table = InFlight([8, 8], 16)
    to_parent, to_child = Pipe(), Pipe()

    def worker() -> None:
        assert table.reserve(1, 3) == 3
        slots = [table.acquire_slot(100 + i, 7, 1, 3) for i in range(3)]
        to_parent.send(bytes(slots))
        to_child.recv(1)  # parent has cancelled job 101
        assert [table.is_cancelled(s) for s in slots] == [False, True, False]
        to_parent.send(b"k")
        to_child.recv(1)  # parent has cancelled the whole worker
        assert all(table.is_cancelled(s) for s in slots)
        for s in slots:
            assert table.release_slot(s)

    pid = fork_child(worker)
    slots = list(to_parent.recv(3))
    ids, leases = table.running()
    assert sorted(ids) == [100, 101, 102] and leases == [7, 7, 7]
    assert table.in_flight(1) == 3 and table.free(1) == 5
    assert sorted(table.held_by(3)) == [(100, 7), (101, 7), (102, 7)]
    assert table.held_by(4) == []
    assert table.slot_info(slots[1]) == (101, 7, 1, 3, False)
    assert table.cancel(101, 6) is False  # wrong lease: a newer attempt is not touched
    assert table.cancel(101, 7) is True
    assert table.slot_info(slots[1]) == (101, 7, 1, 3, True)
    to_child.send(b"c")
    assert to_parent.recv(1) == b"k"
    assert table.cancel_worker(3) == 3
    to_child.send(b"w")
    wait_ok(pid)
    assert table.running() == ([], [])
    assert table.in_flight(1) == 0
    assert table.cancel(101) is False
    to_parent.close()
    to_child.close()


def test_release_worker_returns_a_killed_workers_jobs_and_capacity() -> None:
    table = InFlight([4, 2], 8)
    held = Pipe()

    def worker() -> None:
        assert table.reserve(0, 2) == 2
        assert table.reserve(1, 1) == 1
        table.mark_started(table.acquire_slot(1, 11, 0, 5))
        table.acquire_slot(2, 12, 0, 5)  # queued behind the first, never started
        table.mark_started(table.acquire_slot(3, 13, 1, 5))
        held.send(b"h")
        os.kill(os.getpid(), signal.SIGKILL)  # dies holding its slots

    assert table.reserve(0, 1) == 1
    mine = table.acquire_slot(9, 1, 0, 6)
    pid = fork_child(worker)
    held.recv(1)
    assert os.WTERMSIG(reap(pid)) == signal.SIGKILL
    assert (table.in_flight(0), table.in_flight(1)) == (3, 1)
    assert sorted(table.release_worker(5)) == [
        (1, 11, 0, True),
        (2, 12, 0, False),
        (3, 13, 1, True),
    ]
    assert (table.in_flight(0), table.in_flight(1)) == (1, 0)
    assert table.release_worker(5) == []
    assert table.running() == ([9], [1])
    assert table.release_slot(mine) is True
    assert table.release_slot(mine) is False
    assert table.in_flight(0) == 0
    held.close()


def test_reserve_never_exceeds_capacity_across_processes() -> None:
    table = InFlight([5], 4)

    def churn() -> None:
        for i in range(20_000):
            got = table.reserve(0, 1 + i % 3)
            assert table.in_flight(0) <= 5
            if got:
                table.release(0, got)

    pids = [fork_child(churn) for _ in range(3)]
    for pid in pids:
        wait_ok(pid)
    assert table.in_flight(0) == 0


def test_capacity_counters() -> None:
    table = InFlight([3, 0], 4)
    assert (table.queue_count, table.slot_count) == (2, 4)
    assert table.capacity(0) == 3
    assert table.reserve(0, 2) == 2
    assert table.reserve(0, 2) == 1
    assert table.reserve(0, 1) == 0
    assert table.reserve(1, 1) == 0
    assert table.free(0) == 0
    table.release(0)
    assert table.in_flight(0) == 2
    with pytest.raises(ValueError, match="exceeds"):
        table.release(0, 3)
    table.set_capacity(0, 1)
    assert (table.capacity(0), table.free(0)) == (1, 0)
    table.set_capacity(0, 10)
    assert table.reserve(0, 100) == 8
    with pytest.raises(ValueError, match="cap"):
        table.set_capacity(0, -1)
    with pytest.raises(ValueError, match="want"):
        table.reserve(0, -1)


def test_slot_table_full_and_index_errors() -> None:
    table = InFlight([2], 2)
    a = table.acquire_slot(1, 1, 0, 0)
    table.acquire_slot(2, 1, 0, 0)
    with pytest.raises(RuntimeError, match="in-flight table full"):
        table.acquire_slot(3, 1, 0, 0)
    assert table.release_slot(a)
    assert table.slot_info(a) is None
    assert table.acquire_slot(3, 1, 0, 0) == a
    with pytest.raises(IndexError):
        table.in_flight(1)
    with pytest.raises(IndexError):
        table.acquire_slot(1, 1, 2, 0)
    with pytest.raises(IndexError):
        table.is_cancelled(2)
    with pytest.raises(IndexError):
        table.slot_info(-1)


def test_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="capacities"):
        InFlight([], 4)
    with pytest.raises(ValueError, match="capacities"):
        InFlight([1, -2], 4)
    with pytest.raises(ValueError, match="slots"):
        InFlight([1], 0)
    assert repr(InFlight([1], 3)) == "InFlight(queues=1, slots=3)"
