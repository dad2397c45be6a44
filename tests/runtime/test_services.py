"""The runtime's services driven one pass at a time, with their collaborators named: a
claim round, a batch of notes heard, and a stop while a service connects."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast._core import InFlight
from awa_fast.db.connections import Database
from awa_fast.lifecycle.hooks import HookDispatcher, HookRegistry
from awa_fast.runtime.capacity import Capacity
from awa_fast.runtime.claim.claimer import Claimer, ClaimerConfig, connect_claimer
from awa_fast.runtime.claim.listener import Listener, ListenerConfig
from awa_fast.runtime.claim.packwatch import PackWatch
from awa_fast.runtime.claimed import Claimed, Delivered
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.host.flags import CancelFlags
from awa_fast.runtime.host.heartbeat import Heartbeat, HeartbeatConfig
from awa_fast.runtime.host.row import Host
from tests.helpers import cancel_while_connecting, job, run


@dataclass
class Mark:
    n: int


@dataclass
class Delivery:
    """Workers that keep what they are given (always accepting)."""

    count: int = 1
    delivered: list[Delivered] = field(default_factory=list)
    by_worker: dict[int, int] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)

    def prefork(self) -> None: ...

    async def start(self) -> None: ...

    def accepting(self) -> Sequence[int]:
        return range(self.count)

    def deliver(self, worker: int, jobs: list[Delivered]) -> None:
        self.delivered += jobs
        self.by_worker[worker] = self.by_worker.get(worker, 0) + len(jobs)

    async def drain(self, timeout: float) -> None: ...

    def evict(self, job_id: int, run_lease: int, *, reason: str) -> None: ...

    def alive(self) -> int:
        return 1


@dataclass
class Parts:
    claimer: Claimer
    workers: Delivery
    inflight: InFlight
    host: Host
    given_back: list[tuple[Claimed, str]]


def parts(dsn: str, *, concurrency: int, workers: int = 1, prefetch: int = 0) -> Parts:
    capacity = Capacity({"default": concurrency}, workers, prefetch=prefetch)
    inflight = InFlight(capacity.counters(), sum(capacity.counters()) + 16)
    delivery = Delivery(count=workers)
    host = Host(Database(dsn))
    given_back: list[tuple[Claimed, str]] = []
    claimer = Claimer(
        Database(dsn),
        ClaimerConfig(claim_batch=10, deadlines=(60.0,), rate_limits=(None,)),
        capacity=capacity,
        inflight=inflight,
        workers=delivery,
        host=host,
        hooks=HookDispatcher(HookRegistry()),
        give_back=lambda jobs, reason: given_back.extend((j, reason) for j in jobs),
        standby=None,
        packs=PackWatch(1, every=1.0),
    )
    return Parts(claimer, delivery, inflight, host, given_back)


@contextlib.asynccontextmanager
async def registered(host: Host) -> AsyncIterator[None]:
    """``host``'s row (and its lock) for the block, gone after it."""
    await host.register()
    try:
        yield
    finally:
        await host.forget()


def listener(dsn: str, p: Parts, flags: CancelFlags) -> Listener:
    return Listener(
        Database(dsn),
        ListenerConfig(),
        host=p.host,
        claimer=p.claimer,
        inflight=p.inflight,
        flags=flags,
    )


def heartbeat(dsn: str, p: Parts, flags: CancelFlags) -> Heartbeat:
    config = HeartbeatConfig.of(RunnerConfig(), ["default"])
    return Heartbeat(
        config,
        host=p.host,
        inflight=p.inflight,
        flags=flags,
        workers=p.workers,
        descriptors=[],
    )


def insert(dsn: str, count: int) -> list[int]:
    with awa_fast.Client(dsn) as client:
        return [client.insert(Mark(n)).id for n in range(count)]


def test_a_claim_round_claims_what_capacity_allows_and_says_so(dsn: str) -> None:
    ids = insert(dsn, 5)
    p = parts(dsn, concurrency=3)

    async def rounds() -> tuple[Any, Any]:
        async with (
            registered(p.host),
            await connect_claimer(Database(dsn), application_name="test") as conn,
        ):
            cur = conn.cursor(binary=True)
            return await p.claimer.claim_round(cur), await p.claimer.claim_round(cur)

    first, second = run(rounds())
    assert (first.claimed, first.full, first.starved) == ([3], True, False)
    assert (second.claimed, second.starved) == ([0], True)
    delivered = p.workers.delivered
    assert [d.job.id for d in delivered] == ids[:3]
    for d in delivered:
        row = job(dsn, d.job.id)
        assert isinstance(d.job, Claimed)
        assert (d.job.kind, d.job.run_lease) == (row["kind"], row["run_lease"])
        assert row["state"] == "running"
    running = set(zip(*p.inflight.running(), strict=True))
    assert running == {(d.job.id, d.job.run_lease) for d in delivered}
    assert p.claimer.claims_by_queue == [1]  # the second round ran no statement


def test_a_short_claim_spreads_over_the_workers(dsn: str) -> None:
    """Two workers, each holding its share of 2 and a prefetch of 4: a claim that finds 6
    jobs gives each worker 3, not one worker 6 and the other none."""
    insert(dsn, 6)
    p = parts(dsn, concurrency=4, workers=2, prefetch=4)

    async def one_round() -> Any:
        async with (
            registered(p.host),
            await connect_claimer(Database(dsn), application_name="test") as conn,
        ):
            return await p.claimer.claim_round(conn.cursor(binary=True))

    done = run(one_round())
    assert (done.claimed, done.full) == ([6], False)
    assert p.workers.by_worker == {0: 3, 1: 3}
    assert [p.inflight.in_flight(cap) for cap in (0, 1)] == [3, 3]  # the rest given back


def note(channel: str, payload: str) -> psycopg.Notify:
    return psycopg.Notify(channel, payload, 0)


@pytest.mark.parametrize("cancelled", [True, False])
def test_notes_heard_together_wake_once_and_flag_only_a_confirmed_cancel(
    dsn: str, cancelled: bool
) -> None:
    """A batch of notes: news of the queue wakes claiming; garbage is counted and skipped;
    a cancel note flags its attempt only when the row says an admin cancelled it."""
    [job_id] = insert(dsn, 1)
    p = parts(dsn, concurrency=1)
    flags = CancelFlags(p.inflight, workers=1, on_ended=lambda: None)
    hearing = listener(dsn, p, flags)

    async def claim_then_hear() -> Any:
        async with (
            registered(p.host),
            await connect_claimer(Database(dsn), application_name="test") as conn,
        ):
            cur = conn.cursor(binary=True)
            await p.claimer.claim_round(cur)
            if cancelled:
                with awa_fast.Client(dsn) as client:
                    assert client.cancel(job_id)
            lease = p.workers.delivered[0].job.run_lease
            notes = [
                note("awa_fast_jobs", "default"),
                note("awa_fast_jobs", "default"),
                note("awa_fast_cancel", "not an attempt"),
                note("awa_fast_cancel", f"{job_id}:{lease}"),
                note("awa_fast_cancel", f"{job_id + 1}:{lease}"),
            ]
            return await hearing.heard(cur, notes, stopping=False), lease

    heard, lease = run(claim_then_hear())
    assert (heard.woke, heard.collected, heard.not_understood) == (True, False, 1)
    assert heard.flagged == ([(job_id, lease)] if cancelled else [])
    assert flags.reasons() == ({(job_id, lease): "cancelled by admin"} if cancelled else {})


SERVICES = {"heartbeat": heartbeat, "listener": listener}


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_stop_landing_while_a_service_connects_closes_that_connection(
    dsn: str, service: str
) -> None:
    """The runner stops a service by cancelling it, maybe while it connects, which psycopg
    would leave unclosed (its session open for as long as the cancelled task is kept):
    the connect goes on, and closes the connection once it is made."""

    def loop(url: str) -> Coroutine[Any, Any, None]:
        p = parts(url, concurrency=1)
        flags = CancelFlags(p.inflight, workers=1, on_ended=lambda: None)
        return SERVICES[service](url, p, flags).run(lambda: False)

    run(cancel_while_connecting(dsn, loop, application_name=f"awa-fast {service}"))
