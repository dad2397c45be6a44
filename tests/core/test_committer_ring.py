"""The committer's end of the ring (issue #33): its stop path with a producer that died or
stopped mid-push, a lost attempt reported in the batch of its real outcome, and a record
whose payload does not decode."""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast._core import Batcher, OutcomeRing
from awa_fast.db.connections import connect_hot
from awa_fast.lifecycle import transitions as tr
from awa_fast.lifecycle.hooks import HookDispatcher
from awa_fast.runtime.committer import Committer, CommitterConfig
from awa_fast.worker import UNKNOWN_KIND
from tests.factories import insert_job
from tests.helpers import job

from ._fork import Pipe, fork_child, wait_ok

LOST_REASON = b'{"reason":"worker process died"}'


@dataclass
class Act:
    do: str


@pytest.fixture
def client(dsn: str) -> Iterator[awa_fast.Client]:
    c = awa_fast.Client(dsn)
    c.task(Act)(lambda job: None)
    yield c
    c.close()


def committer_for(client: awa_fast.Client, ring: OutcomeRing, **kw: Any) -> Committer:
    handlers = client.handlers
    return Committer(
        lambda: connect_hot(client.database),
        ring,
        registry=handlers.registry,
        followups=handlers.followups,
        hooks=HookDispatcher(handlers.hooks),
        **kw,
    )


def running_job(conn: psycopg.Connection[Any]) -> int:
    return insert_job(conn, kind="act", args={"do": "x"}, state="running", attempt=1, run_lease=1)


def push_lost(ring: OutcomeRing, job_id: int) -> None:
    """What the supervisor pushes for each attempt of a worker it reaped."""
    ring.push(job_id, 1, int(tr.Target.LOST), UNKNOWN_KIND, 0.0, LOST_REASON)


def run_stopped(committer: Committer, within: float) -> float:
    """Runs a committer whose stop is already set; returns the CPU seconds it used."""
    stop = threading.Event()
    stop.set()
    before = resource.getrusage(resource.RUSAGE_SELF)
    thread = threading.Thread(target=committer.run, args=(stop,))
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), f"the stopping committer still runs after {within} s"
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def test_stop_flushes_a_lost_record_queued_behind_a_dead_producer(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    ring = OutcomeRing(64, 128, stall_timeout=1.0)
    wait_ok(fork_child(lambda: ring._abandon(10)))  # killed after taking its slot
    job_id = running_job(conn)
    push_lost(ring, job_id)
    t0 = time.monotonic()
    cpu = run_stopped(committer_for(client, ring), within=20.0)
    waited = time.monotonic() - t0
    assert job(client.dsn, job_id)["state"] == "retryable"
    assert (ring.skipped, len(ring)) == (1, 0)
    # It slept through the stall timeout instead of spinning on an empty drain.
    assert waited >= 1.0
    assert cpu < 0.5 * waited, f"{cpu:.2f} s of CPU in {waited:.2f} s"


def test_stop_gives_up_behind_a_stopped_producer(
    client: awa_fast.Client, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    ring = OutcomeRing(64, 128, stall_timeout=0.05)
    holding, release = Pipe(), Pipe()

    def stall_mid_push() -> None:
        ring._abandon(10)
        holding.send(b"h")
        release.recv(1)  # alive, its slot claimed: as a worker under SIGSTOP

    pid = fork_child(stall_mid_push)
    holding.recv(1)
    job_id = running_job(conn)
    push_lost(ring, job_id)
    with caplog.at_level(logging.ERROR, logger="awa_fast.committer"):
        run_stopped(
            committer_for(client, ring, config=CommitterConfig(flush_timeout=0.5)), within=20.0
        )
    assert "ring slots unflushed" in caplog.text
    # A live producer's slot is never taken from it: the record behind it waits for rescue.
    assert (ring.skipped, len(ring)) == (0, 2)
    assert job(client.dsn, job_id)["state"] == "running"
    release.send(b"r")
    wait_ok(pid)
    holding.close()
    release.close()


def test_a_lost_report_in_the_batch_of_the_real_outcome_loses(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    """A worker killed between pushing its outcome and freeing its slot is reported lost as
    well; with follow-ups on the kind both can land in one batch, the real outcome first."""
    client.on_completed_enqueue(Act, lambda args, row, ctx: Act("next"))
    job_id = running_job(conn)
    committer = committer_for(client, OutcomeRing(64))
    batcher = Batcher(10, 10.0)
    code, number, payload = tr.encode(tr.COMPLETED)
    batcher.push(job_id, 1, code, client.handlers.registry.index_of("act"), number, payload)
    batcher.push(job_id, 1, int(tr.Target.LOST), UNKNOWN_KIND, 0.0, LOST_REASON)
    batch = batcher.take()
    assert batch is not None
    committer.commit(batch)
    committer.close()
    assert job(client.dsn, job_id)["state"] == "completed"
    follow = conn.execute("SELECT count(*) FROM awa_fast.jobs WHERE args->>'do' = 'next'")
    assert follow.fetchone() == (1,)
    assert (committer.stats.applied, committer.stats.stale) == (1, 1)


def test_a_payload_that_does_not_decode_holds_back_only_itself(
    client: awa_fast.Client, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A record whose outcome object is not JSON fails its batch's statement; the batch
    is finalized job by job, the good one settles, and the bad one is left running for
    the rescue, which retries or fails it."""
    bad, good = running_job(conn), running_job(conn)
    committer = committer_for(client, OutcomeRing(64))
    batcher = Batcher(10, 10.0)
    failed = int(tr.Target.RETRYABLE)
    batcher.push(bad, 1, failed, 0, 5.0, b'{"error": {"err')
    code, number, payload = tr.encode(tr.Transition(tr.Target.RETRYABLE, delay=5))
    batcher.push(good, 1, code, 0, number, payload)
    batch = batcher.take()
    assert batch is not None
    with caplog.at_level(logging.ERROR, logger="awa_fast.committer"):
        committer.commit(batch)
    committer.close()
    assert f"job {bad}: direct finalize failed" in caplog.text
    assert (job(client.dsn, bad)["state"], job(client.dsn, good)["state"]) == (
        "running",
        "retryable",
    )
