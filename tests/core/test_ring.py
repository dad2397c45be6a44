"""OutcomeRing: the shared-memory MPSC ring, exercised across real forked processes."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import pytest

from awa_fast._core import Batcher, InFlight, OutcomeRing

from ._fork import Pipe, fork_child, reap, wait_ok


def payload_for(producer: int, seq: int) -> bytes:
    """Deterministic payload of varied size (0 to ~700 bytes: one to several slots)."""
    n = (seq * 37 + producer * 101) % 701
    if n % 5 == 0:
        return b""
    return bytes((producer * 31 + seq + i) & 0xFF for i in range(n % 64)) * (n // 64 + 1)


def test_four_producer_processes_deliver_every_record_once_in_order() -> None:
    producers, total = 4, 200_000
    per = total // producers
    ring = OutcomeRing(4096, 128)

    def produce(p: int) -> None:
        for seq in range(per):
            ring.push(p, seq, seq % 256, p, seq * 0.5, payload_for(p, seq))

    pids = [fork_child(functools.partial(produce, p)) for p in range(producers)]
    nxt = [0] * producers
    received = 0
    deadline = time.monotonic() + 60
    while received < total:
        assert time.monotonic() < deadline, f"only {received} of {total} records arrived"
        for job_id, lease, code, kind, number, payload in ring.drain(1024, 1.0):
            p = job_id
            assert lease == nxt[p], f"producer {p}: got seq {lease}, expected {nxt[p]}"
            assert (code, kind, number) == (lease % 256, p, lease * 0.5)
            assert payload == payload_for(p, lease)
            nxt[p] += 1
            received += 1
    for pid in pids:
        wait_ok(pid)
    assert nxt == [per] * producers
    assert ring.drain(10, 0.0) == []
    assert len(ring) == 0
    assert ring.skipped == 0


def test_small_ring_backpressures_a_producer_until_the_slow_consumer_drains() -> None:
    ring = OutcomeRing(64, 128)  # payloads below fit in one slot: full means len == 64
    n = 1_000

    def produce() -> None:
        for i in range(n):
            ring.push(i, 0, 1, 2, 0.0, b"abc" * (i % 20))

    pid = fork_child(produce)
    # The producer fills the ring and must then block: it cannot have finished.
    deadline = time.monotonic() + 30
    while len(ring) < 64:
        assert time.monotonic() < deadline, "producer never filled the ring"
    assert os.waitpid(pid, os.WNOHANG) == (0, 0), "producer finished despite a full ring"
    got: list[int] = []
    while len(got) < n:
        assert time.monotonic() < deadline + 30, f"stuck at {len(got)}"
        for rec in ring.drain(7, 1.0):  # a slow consumer: small batches
            assert rec[5] == b"abc" * (rec[0] % 20)
            got.append(rec[0])
    wait_ok(pid)
    assert got == list(range(n))


def test_full_ring_push_times_out() -> None:
    ring = OutcomeRing(4, 64)
    for i in range(4):
        ring.push(i, 0, 0, 0, 0.0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        ring.push(9, 0, 0, 0, 0.0, b"", timeout=0.05)
    assert time.monotonic() - t0 >= 0.04
    assert [r[0] for r in ring.drain(10, 0.0)] == [0, 1, 2, 3]
    ring.push(9, 0, 0, 0, 0.0, b"", timeout=0.05)
    assert ring.drain(10, 0.0)[0][0] == 9


def test_drain_blocks_without_the_gil_and_wakes_on_push() -> None:
    ring = OutcomeRing(16, 64)
    started = threading.Event()
    result: list[object] = []

    def consume() -> None:
        started.set()
        result.extend(ring.drain(10, 30.0))

    t = threading.Thread(target=consume)
    t.start()
    started.wait()
    # If drain held the GIL while waiting, this thread could not run until its timeout.
    t0 = time.monotonic()
    ring.push(1, 2, 3, 4, 5.0, b"hi")
    t.join()
    assert result == [(1, 2, 3, 4, 5.0, b"hi")]
    assert time.monotonic() - t0 < 10


def test_drain_times_out_empty() -> None:
    ring = OutcomeRing(16, 64)
    t0 = time.monotonic()
    assert ring.drain(10, 0.05) == []
    assert time.monotonic() - t0 >= 0.04
    assert ring.drain(0, 1.0) == []


def test_consumer_wakes_for_a_push_from_another_process() -> None:
    ring = OutcomeRing(16, 64)
    go = Pipe()

    def produce() -> None:
        go.recv(1)
        ring.push(7, 8, 9, 10, 1.5, b"x" * 500)

    pid = fork_child(produce)
    go.send(b"g")
    assert ring.drain(10, 30.0) == [(7, 8, 9, 10, 1.5, b"x" * 500)]
    wait_ok(pid)
    go.close()


def test_record_fields_round_trip_at_their_limits() -> None:
    ring = OutcomeRing(64, 128)
    big = bytes(range(256)) * 20
    ring.push(-(2**63), 2**63 - 1, 255, 2**32 - 1, -1e300, big)
    ring.push(0, 0, 0, 0, float("inf"))
    (a, b) = ring.drain(10, 0.0)
    assert a == (-(2**63), 2**63 - 1, 255, 2**32 - 1, -1e300, big)
    assert b == (0, 0, 0, 0, float("inf"), b"")


def test_bad_arguments_raise_value_error_naming_the_argument() -> None:
    with pytest.raises(ValueError, match="capacity"):
        OutcomeRing(100)
    with pytest.raises(ValueError, match="capacity"):
        OutcomeRing(-8)
    with pytest.raises(ValueError, match="slot_bytes"):
        OutcomeRing(64, 100)
    with pytest.raises(ValueError, match="slot_bytes"):
        OutcomeRing(64, 16)
    with pytest.raises(ValueError, match="stall_timeout"):
        OutcomeRing(64, 64, stall_timeout=-1.0)
    ring = OutcomeRing(4, 64)
    with pytest.raises(ValueError, match="does not fit"):
        ring.push(1, 1, 1, 1, 1.0, b"x" * (ring.max_payload + 1))
    ring.push(1, 1, 1, 1, 1.0, b"x" * ring.max_payload)
    assert len(ring.drain(1, 0.0)[0][5]) == ring.max_payload
    with pytest.raises(OverflowError):
        ring.push(1, 1, 256, 1, 1.0)
    with pytest.raises(ValueError, match="max_records"):
        ring.drain(-1, 0.0)


def test_properties() -> None:
    ring = OutcomeRing(128, 256, stall_timeout=0.5)
    assert (ring.capacity, ring.slot_bytes, ring.stall_timeout, ring.skipped) == (128, 256, 0.5, 0)
    assert len(ring) == 0
    ring.push(1, 1, 1, 1, 1.0)
    assert len(ring) == 1
    assert "OutcomeRing(capacity=128" in repr(ring)


def test_killed_producers_never_wedge_the_consumer() -> None:
    """Producers SIGKILLed mid-stream (possibly between reserving and publishing)."""
    ring = OutcomeRing(64, 64, stall_timeout=0.2)
    for attempt in range(5):
        ready = Pipe()

        def produce(attempt: int = attempt, ready: Pipe = ready) -> None:
            ready.send(b"r")
            seq = 0
            while True:
                ring.push(1000 + attempt, seq, 0, 0, 0.0, payload_for(attempt, seq))
                seq += 1

        pid = fork_child(produce)
        ready.recv(1)
        # Let it run against a consumer for a moment, then kill it wherever it is.
        seen = 0
        while seen < 200 * (attempt + 1):
            seen += len(ring.drain(50, 5.0))
        os.kill(pid, signal.SIGKILL)
        assert os.WTERMSIG(reap(pid)) == signal.SIGKILL
        ready.close()
        # Whatever the dead producer left (maybe a full ring, maybe reserved slots that will
        # never be published), a live producer's record must still get through.
        after = fork_child(functools.partial(ring.push, 1, attempt, 0, 0, 0.0, b"after"))
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "consumer wedged by a dead producer"
            recs = ring.drain(100, 1.0)
            for job_id, lease, _, _, _, payload in recs:
                if job_id >= 1000:
                    assert payload == payload_for(job_id - 1000, lease)
            if any(r[0] == 1 and r[5] == b"after" for r in recs):
                break
        wait_ok(after)
    assert len(ring) == 0


def test_drain_into_fills_batcher_by_size_and_by_age() -> None:
    ring = OutcomeRing(64, 64)
    batcher = Batcher(max_size=5, max_delay=10.0)
    for i in range(7):
        ring.push(i, i, 0, 0, 0.0, b"p" if i % 2 else b"")
    assert ring.drain_into(batcher, 1.0) is True
    assert len(batcher) == 5  # never overfilled
    batch = batcher.take()
    assert batch is not None
    assert batch.ids == [0, 1, 2, 3, 4]
    assert batch.payloads == [None, b"p", None, b"p", None]
    assert len(ring) == 2

    aged = Batcher(max_size=100, max_delay=0.01)
    t0 = time.monotonic()
    assert ring.drain_into(aged, 30.0) is True  # age trigger, long before the timeout
    assert time.monotonic() - t0 < 10
    assert len(aged) == 2

    empty = Batcher(max_size=100, max_delay=0.01)
    assert ring.drain_into(empty, 0.05) is False
    assert len(empty) == 0


def test_a_ready_batch_takes_along_the_backlog_up_to_its_limit() -> None:
    ring = OutcomeRing(64, 64)
    payloads = [b"" if i % 3 == 0 else b"p" * (300 if i == 7 else 1) for i in range(12)]
    for i, payload in enumerate(payloads):  # record 7 spans several slots
        ring.push(i, i, 0, 0, 0.0, payload)
    batcher = Batcher(max_size=4, max_delay=600.0, limit=10)
    assert ring.drain_into(batcher, 1.0) is True
    batch = batcher.take()
    assert batch is not None
    assert batch.ids == list(range(10))  # the size trigger fired at 4; 6 more were waiting
    assert batch.payloads == [p or None for p in payloads[:10]]
    assert len(ring) == 2
    # With no backlog a batch is ready at its size trigger and does not wait to grow.
    assert ring.drain_into(batcher, 0.05) is False
    ring.push(12, 12, 0, 0, 0.0)
    ring.push(13, 13, 0, 0, 0.0)
    assert ring.drain_into(batcher, 1.0) is True
    rest = batcher.take()
    assert rest is not None and rest.ids == [10, 11, 12, 13]


def test_a_batch_limit_below_its_size_trigger_is_refused() -> None:
    with pytest.raises(ValueError, match=r"limit: must be >= max_size \(8\), got 7"):
        Batcher(max_size=8, limit=7)
    assert Batcher(max_size=8).limit == 8


def test_drain_into_flushes_once_nothing_is_in_flight() -> None:
    ring = OutcomeRing(64, 64)
    table = InFlight([4], 8)
    assert table.reserve(0, 2) == 2  # two attempts running
    ring.push(1, 1, 0, 0, 0.0)
    table.release(0)
    waiting = Batcher(max_size=100, max_delay=600.0)
    # One attempt still runs: its outcome may share the commit, so the batch waits.
    assert ring.drain_into(waiting, 0.05, table) is False
    assert len(waiting) == 1
    table.release(0)
    # Nothing in flight, nothing in the ring: no company is coming; ready at once (the age
    # trigger and the timeout are ten minutes away, past the test's own timeout).
    assert ring.drain_into(waiting, 600.0, table) is True
    batch = waiting.take()
    assert batch is not None and batch.ids == [1]
    # Without the table only size and age count.
    ring.push(2, 1, 0, 0, 0.0)
    alone = Batcher(max_size=100, max_delay=60.0)
    assert ring.drain_into(alone, 0.05) is False
    assert len(alone) == 1


def test_drain_into_waits_without_the_gil() -> None:
    ring = OutcomeRing(64, 64)
    batcher = Batcher(max_size=3, max_delay=60.0)
    started = threading.Event()
    out: list[bool] = []

    def consume() -> None:
        started.set()
        out.append(ring.drain_into(batcher, 30.0))

    t = threading.Thread(target=consume)
    t.start()
    started.wait()
    for i in range(3):
        ring.push(i, 0, 0, 0, 0.0)
    t.join()
    assert out == [True]
    batch = batcher.take()
    assert batch is not None and batch.ids == [0, 1, 2]


def test_single_consumer_is_enforced_within_a_process() -> None:
    ring = OutcomeRing(16, 64)
    started = threading.Event()

    def consume() -> None:
        started.set()
        while True:  # the main thread's probe may hold the consumer role for an instant
            try:
                ring.drain(1, 30.0)
                return
            except RuntimeError:
                continue

    t = threading.Thread(target=consume)
    t.start()
    started.wait()
    deadline = time.monotonic() + 60
    while True:  # until the other thread is inside its wait
        try:
            ring.drain(1, 0.0)
        except RuntimeError as e:
            assert "single consumer" in str(e)
            break
        assert time.monotonic() < deadline
    ring.push(1, 1, 1, 1, 1.0)
    t.join()


def test_a_child_forked_after_its_parent_pushed_claims_under_its_own_pid() -> None:
    """A producer's pid is cached: a fork must not inherit its parent's, or a child killed
    mid-push would look alive as long as its parent lives, and hold the ring forever."""
    ring = OutcomeRing(16, 64, stall_timeout=0.05)
    ring.push(1, 1, 0, 0, 0.0)  # the parent has claimed a slot: its pid is cached
    assert [r[0] for r in ring.drain(10, 0.0)] == [1]
    wait_ok(fork_child(lambda: ring._abandon(0)))  # claims, exits without publishing
    ring.push(2, 2, 0, 0, 0.0)
    assert [r[0] for r in ring.drain(10, 30.0)] == [2]
    assert (ring.skipped, len(ring)) == (1, 0)


def test_a_producer_stopped_past_the_stall_timeout_keeps_its_slot() -> None:
    """A producer that is alive keeps what it claimed, however long it is stopped."""
    ring = OutcomeRing(16, 64, stall_timeout=0.05)
    holding, release = Pipe(), Pipe()

    def stall_mid_push() -> None:
        ring._abandon(0)
        holding.send(b"h")
        release.recv(1)

    pid = fork_child(stall_mid_push)
    holding.recv(1)
    ring.push(2, 2, 0, 0, 0.0)
    assert ring.drain(10, 0.5) == []  # ten stall timeouts
    assert (ring.skipped, len(ring)) == (0, 2)
    release.send(b"r")
    wait_ok(pid)  # gone now: its slot is taken back
    assert [r[0] for r in ring.drain(10, 30.0)] == [2]
    assert ring.skipped == 1
    holding.close()
    release.close()
