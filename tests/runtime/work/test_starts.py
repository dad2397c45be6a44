"""A worker's starts on their own, over a real in-flight table: of the jobs delivered to
it, at most its share of each queue run at once and the rest wait in delivery order; an
ended job starts the next; a waiting job flagged by its turn is given back unstarted; and
where the prefetch is the runtime's, the worker's pace sets its counter. The runners reach
this only through claims and handlers, where a job started early or never shows as timing."""

from __future__ import annotations

import pytest

from awa_fast._core import InFlight
from awa_fast.runtime.capacity import Capacity
from awa_fast.runtime.claimed import JSONB_BINARY_VERSION, Claimed, Delivered
from awa_fast.runtime.prefetch import default_prefetch, held_for
from awa_fast.runtime.work import starts as starts_module
from awa_fast.runtime.work.starts import Starts

FLAGGED = "its attempt was flagged before it started"


class Clock:
    """``time.monotonic`` for the starts module, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Worker:
    """One worker's Starts over an in-flight table laid out by ``capacity``, with the jobs
    it gives back by id."""

    def __init__(self, capacity: Capacity, worker: int = 0) -> None:
        self.capacity, self.worker = capacity, worker
        self.inflight = InFlight(capacity.counters(), capacity.slots())
        self.given_back: list[tuple[list[int], str]] = []
        self.delivered: dict[int, Delivered] = {}
        self.starts = Starts(capacity, worker, inflight=self.inflight, give_back=self.give_back)

    def give_back(self, delivered: list[Delivered], reason: str) -> None:
        self.given_back.append(([d.job.id for d in delivered], reason))

    def counter(self, queue: int = 0) -> int:
        return self.capacity.index(queue, self.worker)

    def deliver(self, job_id: int, queue: int = 0) -> Delivered:
        """Job ``job_id`` claimed for this worker: a unit of its counter and a slot."""
        counter = self.counter(queue)
        assert self.inflight.reserve(counter, 1) == 1
        slot = self.inflight.acquire_slot(job_id, 1, counter, self.worker)
        jsonb = bytes([JSONB_BINARY_VERSION]) + b"{}"
        job = Claimed(job_id, 1, "k", "q", jsonb, 1, 3, 2, [], None, None, None, 0, 0, None)
        self.delivered[job_id] = Delivered(job, slot, counter)
        return self.delivered[job_id]

    def admit(self, job_id: int, queue: int = 0) -> list[int]:
        """Ids of the jobs that start once ``job_id`` is delivered."""
        return [d.job.id for d in self.starts.admit(self.deliver(job_id, queue))]

    def ended(self, job_id: int) -> list[int]:
        """Ids of the jobs that start once ``job_id``'s handler returns and its slot is
        freed (as run_claimed frees it)."""
        delivered = self.delivered.pop(job_id)
        assert self.inflight.release_slot(delivered.slot)
        return [d.job.id for d in self.starts.ended(delivered.capacity)]


def test_admit_starts_up_to_the_share_and_holds_the_rest_in_delivery_order() -> None:
    worker = Worker(Capacity({"q": 2}, 1, prefetch=3))
    assert [worker.admit(n) for n in (1, 2, 3, 4, 5)] == [[1], [2], [], [], []]
    assert len(worker.starts) == 3
    assert [worker.ended(2), worker.ended(1), worker.ended(3)] == [[3], [4], [5]]
    assert (worker.ended(4), len(worker.starts), worker.given_back) == ([], 0, [])


def test_each_worker_runs_its_own_share_of_the_queue() -> None:
    """Concurrency 3 over two workers: 2 for the first, 1 for the second."""
    first, second = (Worker(Capacity({"q": 3}, 2, prefetch=2), w) for w in (0, 1))
    assert [first.admit(n) for n in (1, 2, 3)] == [[1], [2], []]
    assert [second.admit(n) for n in (4, 5)] == [[4], []]
    assert (second.counter(), second.ended(4)) == (1, [5])


def test_a_full_queue_holds_back_none_of_another() -> None:
    worker = Worker(Capacity({"a": 1, "b": 1}, 1, prefetch=2))
    assert [worker.admit(1, 0), worker.admit(2, 0), worker.admit(3, 1)] == [[1], [], [3]]
    assert (worker.ended(3), len(worker.starts)) == ([], 1)
    assert worker.ended(1) == [2]


def test_a_job_flagged_while_it_waits_is_given_back_and_never_started() -> None:
    worker = Worker(Capacity({"q": 1}, 1, prefetch=3))
    assert [worker.admit(n) for n in (1, 2, 3)] == [[1], [], []]
    assert worker.inflight.cancel(2)
    assert worker.ended(1) == [3]
    assert worker.given_back == [([2], FLAGGED)]
    assert (worker.admit(4), worker.ended(3), worker.ended(4)) == ([], [4], [])


def test_a_job_flagged_before_its_delivery_is_given_back_at_once() -> None:
    worker = Worker(Capacity({"q": 2}, 1, prefetch=2))
    delivered = worker.deliver(1)
    worker.inflight.cancel(1)
    assert worker.starts.admit(delivered) == []
    assert (worker.given_back, len(worker.starts)) == ([([1], FLAGGED)], 0)
    assert [worker.admit(2), worker.admit(3)] == [[2], [3]]  # it took no room


def test_take_waiting_hands_over_every_waiting_job_and_forgets_them() -> None:
    worker = Worker(Capacity({"a": 1, "b": 1}, 1, prefetch=3))
    for n, queue in ((1, 0), (2, 0), (3, 1), (4, 1), (5, 0)):
        worker.admit(n, queue)
    assert sorted(d.job.id for d in worker.starts.take_waiting()) == [2, 4, 5]
    assert (len(worker.starts), worker.ended(1), worker.ended(3)) == (0, [], [])
    assert worker.given_back == []  # the worker gives them back, not the starts


def test_a_fixed_prefetch_leaves_the_counter_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(starts_module, "time", clock)
    worker = Worker(Capacity({"q": 1}, 1, prefetch=3))
    for n in range(1, 9):
        assert worker.admit(n) == [n]
        clock.now += 0.125  # 8 jobs/s: a pace would hold 1 ahead, not 3
        assert worker.ended(n) == []
    assert worker.inflight.capacity(worker.counter()) == 1 + 3


def ran_four_jobs(worker: Worker, clock: Clock) -> list[int]:
    """Four jobs run one after another, each for 1/16 s of handler time with a second idle
    between them; the counter's capacity after each ends."""
    capacities = []
    for n in range(1, 5):
        assert worker.admit(n) == [n]
        clock.now += 0.0625
        assert worker.ended(n) == []
        capacities.append(worker.inflight.capacity(worker.counter()))
        clock.now += 1.0
    return capacities


def test_an_unset_prefetch_follows_the_workers_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four jobs in a quarter second of running time, idle time aside: 16 jobs/s, so the
    share plus the horizon's worth at that pace."""
    clock = Clock()
    monkeypatch.setattr(starts_module, "time", clock)
    worker = Worker(Capacity({"q": 1}, 1))
    unpaced = 1 + default_prefetch(1)
    assert worker.inflight.capacity(worker.counter()) == unpaced
    assert ran_four_jobs(worker, clock) == [unpaced] * 3 + [1 + held_for(16.0)]
    assert held_for(16.0) == 3


def test_a_retiring_worker_leaves_its_counter_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(starts_module, "time", clock)
    worker = Worker(Capacity({"q": 1}, 1))
    worker.starts.retire()
    assert ran_four_jobs(worker, clock) == [1 + default_prefetch(1)] * 4
