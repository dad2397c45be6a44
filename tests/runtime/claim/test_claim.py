"""Claiming: order, paused queues, and lifecycle events around an attempt."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import psycopg.conninfo
import pytest

import awa_fast
from awa_fast import EventType
from awa_fast.runtime.config import RunnerConfig
from awa_fast.runtime.runner import Runner
from tests.helpers import await_until, job, run, run_until, settled, states


@dataclass
class Mark:
    label: str


def test_claim_order_is_priority_then_run_at_then_id(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    seen: list[str] = []

    @client.task(Mark)
    async def mark(job: awa_fast.Job[Mark]) -> None:
        seen.append(job.args.label)

    async def main() -> None:
        async with client:
            for label, priority in [("p4", 4), ("p1a", 1), ("p3", 3), ("p1b", 1), ("p2", 2)]:
                await client.insert(Mark(label), priority=priority)
            await run_until(client, {"default": 1}, lambda: settled(dsn))

    run(main())
    assert seen == ["p1a", "p1b", "p2", "p3", "p4"]


@pytest.mark.parametrize("processes", [None, 2])
def test_freed_capacity_wakes_claiming_without_polling(dsn: str, processes: int | None) -> None:
    """A claim held back for capacity resumes when handlers return, not at the next poll:
    with the poll an hour away, 30 jobs still run through one slot per worker. (Claiming
    listens for returning handlers only while it waits for capacity. Each handler outlasts
    a claim, so that claiming does wait for it.)"""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Mark)
    async def outlast_a_claim(job: awa_fast.Job[Mark]) -> None:
        await asyncio.sleep(0.02)

    slots = {"default": processes or 1}

    async def main() -> None:
        async with client:
            await client.insert_many([Mark(str(n)) for n in range(30)])
            await run_until(
                client, slots, lambda: settled(dsn), poll_interval=3600.0, processes=processes
            )

    run(main())
    assert states(dsn) == {"completed": 30}


@pytest.mark.parametrize(
    ("running", "reserved"),
    [
        (0, 500),  # idle: a whole batch
        (751, 0),  # 249 free: less than half a batch, wait for more
        (750, 250),  # half a batch free: claim it
        (400, 500),  # more than a batch free: a batch, no more
    ],
)
def test_a_claim_waits_for_half_a_batch_and_takes_up_to_a_batch(
    dsn: str, running: int, reserved: int
) -> None:
    """With jobs in flight a claim waits until half a claim batch is free (so the workers
    are refilled while a claim waits on its fsync) and then takes what is free, up to a
    whole batch (so a claim beside a producer takes what arrived in one go)."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)
    config = RunnerConfig(claim_batch=500, prefetch=0)
    runner = Runner(dsn, client.handlers, {"default": 1000}, config)
    if running:
        assert runner.inflight.reserve(0, running) == running
    assert sum(n for _, n in runner.claimer.reserve(0)) == reserved


@pytest.mark.parametrize(("running", "wakes"), [(751, False), (750, True)])
def test_returning_handlers_wake_claiming_once_a_claim_is_worth_it(
    dsn: str, running: int, wakes: bool
) -> None:
    """The committer tells claiming that handlers returned as often as it drains outcomes,
    about every millisecond under load. A claim waiting for capacity wakes only once half
    a batch is free, as it would claim then: each wake-up before that cost the claim loop
    a round, and a handler its core, for nothing."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)
    config = RunnerConfig(claim_batch=500, prefetch=0, standby=False)  # no host to collect for
    runner = Runner(dsn, client.handlers, {"default": 1000}, config)
    claimer = runner.claimer

    async def main() -> bool:
        claimer.bind(asyncio.get_running_loop())
        assert runner.inflight.reserve(0, 752) == 752  # 248 free: the round waits
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert (await claimer.claim_round(conn.cursor(binary=True))).starved
        claimer._wake.clear()
        runner.inflight.release(0, 752 - running)  # handlers returned
        claimer.capacity_freed()
        await asyncio.sleep(0)  # one turn of the loop: a wake-up scheduled runs in it
        return claimer._wake.is_set()

    assert run(main()) is wakes


def test_returning_handlers_send_no_second_wake_up_while_one_is_pending(dsn: str) -> None:
    """The committer reports returned handlers after every drain, about every millisecond.
    While a wake-up it sent has not been taken up by a claim round, it sends no other: the
    round reads capacity after taking the wake-up, so it sees every handler returned
    before. (Each wake-up sent is a write to the loop's pipe and a turn of the loop.)"""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)
    config = RunnerConfig(claim_batch=500, prefetch=0, standby=False)
    runner = Runner(dsn, client.handlers, {"default": 1000}, config)
    claimer = runner.claimer

    async def main() -> list[bool]:
        claimer.bind(asyncio.get_running_loop())
        assert runner.inflight.reserve(0, 1000) == 1000  # none free: the round waits
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert (await claimer.claim_round(conn.cursor(binary=True))).starved
        claimer._wake.clear()
        runner.inflight.release(0, 1000)  # handlers returned
        claimer.capacity_freed()
        await asyncio.sleep(0)  # the wake-up sent runs
        woken = claimer._wake.is_set()
        claimer.capacity_freed()  # more returned before a round took the wake-up
        claimer._wake.clear()  # taken up by a round now
        await asyncio.sleep(0)  # a second wake-up, had one been sent, would run here
        return [woken, claimer._wake.is_set()]

    assert run(main()) == [True, False]


def _old_and_new(dsn: str, queue: str) -> dict[int, str]:
    """An old job of priority 4 (run_at ten seconds ago) and a new one of priority 1, by id."""
    with awa_fast.Client(dsn) as client:
        old = client.insert(
            Mark("old"), queue=queue, priority=4, run_at=datetime.now(UTC) - timedelta(seconds=10)
        )
        new = client.insert(Mark("new"), queue=queue, priority=1)
    return {old.id: "old", new.id: "new"}


def _handed_out(runner: Runner) -> list[int]:
    """The ids of the jobs the runner's claimer hands its workers, in order (its workers
    are not run)."""
    handed: list[int] = []
    runner.workers.deliver = lambda worker, jobs: handed.extend(d.job.id for d in jobs)  # type: ignore[method-assign]
    return handed


def test_an_aged_claim_hands_out_its_jobs_in_aged_order(dsn: str) -> None:
    """With priority aging, a claim of several jobs hands them out in the order it chose
    them: the old job of priority 4, aged to 1, ahead of the newer one of priority 1."""
    names = _old_and_new(dsn, "aged")
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark, queue="aged")(lambda job: None)
    config = RunnerConfig(queue_aging={"aged": 1.0}, standby=False)
    runner = Runner(dsn, client.handlers, {"aged": 2}, config)
    handed = _handed_out(runner)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert (await runner.claimer.claim_round(conn.cursor(binary=True))).claimed == [2]

    run(main())
    assert [names[i] for i in handed] == ["old", "new"]


class _Gated:
    """A claim connection's cursor whose steps wait for, or announce, the other's."""

    def __init__(
        self,
        cur: psycopg.AsyncCursor[Any],
        *,
        execute_after: asyncio.Event | None = None,
        executed: asyncio.Event | None = None,
        fetch_after: asyncio.Event | None = None,
        fetched: asyncio.Event | None = None,
    ) -> None:
        self.cur = cur
        self.execute_after, self.executed = execute_after, executed
        self.fetch_after, self.fetched = fetch_after, fetched

    async def execute(self, query: str, params: dict[str, Any]) -> None:
        if self.execute_after is not None:
            await self.execute_after.wait()
        await self.cur.execute(query, params)
        if self.executed is not None:
            self.executed.set()

    async def fetchall(self) -> list[Any]:
        if self.fetch_after is not None:
            await self.fetch_after.wait()
        rows = await self.cur.fetchall()
        if self.fetched is not None:
            self.fetched.set()
        return rows


def test_a_queues_claims_are_handed_out_in_the_order_they_were_issued(dsn: str) -> None:
    """Two claim loops claim one queue at once. The first claim takes the job ahead in
    claim order; when the second one's answer comes back first, its job still waits for
    the first's, so a worker holding both starts them in claim order."""
    names = _old_and_new(dsn, "q")
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark, queue="q")(lambda job: None)
    runner = Runner(dsn, client.handlers, {"q": 2}, RunnerConfig(claim_batch=1, standby=False))
    handed = _handed_out(runner)

    async def main() -> None:
        first_executed, second_fetched = asyncio.Event(), asyncio.Event()
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as a,
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as b,
        ):
            first = _Gated(
                a.cursor(binary=True), executed=first_executed, fetch_after=second_fetched
            )
            second = _Gated(
                b.cursor(binary=True), execute_after=first_executed, fetched=second_fetched
            )
            rounds = await asyncio.gather(
                runner.claimer.claim_round(first),  # type: ignore[arg-type]
                runner.claimer.claim_round(second),  # type: ignore[arg-type]
            )
        assert [r.claimed for r in rounds] == [[1], [1]]

    run(main())
    assert [names[i] for i in handed] == ["new", "old"]


def test_news_that_finds_capacity_reserved_by_a_round_in_flight_is_claimed_after_it(
    dsn: str,
) -> None:
    """A job lands while one claim round's statement has run, before its answer is back,
    holding every unit free; the round its news wakes finds none left. Once the first
    round returns empty-handed, claiming wakes again and takes the job, with no poll."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark, queue="q")(lambda job: None)
    runner = Runner(dsn, client.handlers, {"q": 2}, RunnerConfig(standby=False))
    handed = _handed_out(runner)
    claimer = runner.claimer

    async def main() -> int:
        executed, answer = asyncio.Event(), asyncio.Event()
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as a,
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as b,
            awa_fast.AsyncClient(dsn) as producer,
        ):
            first = _Gated(a.cursor(binary=True), executed=executed, fetch_after=answer)
            in_flight = asyncio.create_task(claimer.claim_round(first))  # type: ignore[arg-type]
            await executed.wait()
            landed = await producer.insert(Mark("late"), queue="q")
            claimer._wake.clear()  # as a claim loop woken by its news does
            woken = await claimer.claim_round(b.cursor(binary=True))
            assert woken.claimed == [0] and woken.starved
            answer.set()
            assert (await in_flight).claimed == [0]
            assert claimer._wake.is_set()
            assert (await claimer.claim_round(b.cursor(binary=True))).claimed == [1]
            return landed.id

    landed = run(main())
    assert handed == [landed]


def test_paused_queue_is_not_claimed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO awa_fast.queue_meta (queue, paused) VALUES ('held', true)")
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark, queue="open")(lambda job: None)  # a queue the runner runs

    async def main() -> tuple[int, int]:
        async with client:
            held = await client.insert(Mark("held"), queue="held")
            free = await client.insert(Mark("free"), queue="open")
            await run_until(
                client, {"held": 5, "open": 5}, lambda: job(dsn, free.id)["state"] == "completed"
            )
            return held.id, free.id

    held_id, _ = run(main())
    assert job(dsn, held_id)["state"] == "available"
    assert states(dsn) == {"available": 1, "completed": 1}


def test_lifecycle_events_fire_after_commit(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    events: list[tuple[EventType, str]] = []

    @client.task(Mark)
    async def mark(job: awa_fast.Job[Mark]) -> None:
        if job.args.label == "fail":
            raise awa_fast.TerminalError("no")

    def hook(event: awa_fast.Event) -> None:
        # After commit: the stored row already shows the transition the event reports.
        events.append((event.type, event.job.state))

    client.on_event(Mark, hook)

    async def main() -> None:
        async with client:
            await client.insert(Mark("ok"))
            await run_until(client, {"default": 1}, lambda: settled(dsn))
            await client.insert(Mark("fail"))
            await run_until(client, {"default": 1}, lambda: settled(dsn))

    run(main())
    assert events == [
        (EventType.STARTED, "running"),
        (EventType.COMPLETED, "completed"),
        (EventType.STARTED, "running"),
        (EventType.EXHAUSTED, "failed"),
    ]


def test_deadline_per_queue_and_per_job(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    seen: dict[str, float] = {}

    @client.task(Mark, queue="q")  # a queue the runner runs, as start() asks
    async def mark(job: awa_fast.Job[Mark]) -> None:
        row = await client.get_job(job.id)
        times = row.datetimes if row is not None else None
        assert times is not None and times.deadline_at and times.attempted_at
        seen[job.args.label] = (times.deadline_at - times.attempted_at).total_seconds()

    async def main() -> None:
        async with client:
            await client.insert(Mark("queue"), queue="q")
            await client.insert(Mark("job"), queue="q", deadline=7)
            await client.insert(Mark("default"), queue="other")
            await run_until(
                client,
                {"q": 2, "other": 1},
                lambda: settled(dsn),
                deadline=100,
                queue_deadlines={"q": 50},
            )

    run(main())
    # A heartbeat that finds a job delivered but not started yet counts its deadline from
    # that beat (a held job's time starts when it starts): a few ms later than the claim.
    assert seen == pytest.approx({"queue": 50.0, "job": 7.0, "default": 100.0}, abs=0.5)


def test_start_retries_a_cut_session_then_fails_fast(
    dsn: str, server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A session cut off while the runner starts (its schema check, host registration or
    a claim connection: a restart, an admin's pg_terminate_backend) is retried a few times; a
    database that stays unreachable still fails start() within a second, with the
    database's own error."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]

    def allow(on: bool) -> None:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS {str(on).lower()}")

    async def main() -> None:
        allow(False)
        try:
            with pytest.raises(psycopg.OperationalError, match="not currently accepting"):
                await client.start({"default": 1})
        finally:
            allow(True)

    with caplog.at_level(logging.WARNING, logger="awa_fast.runner"):
        run(main())
    retries = [r for r in caplog.records if "schema check failed at start" in r.message]
    assert len(retries) == 3


@pytest.mark.parametrize("processes", [None, 2])
def test_a_rate_limited_queue_starts_no_more_than_its_bucket_allows(
    dsn: str, processes: int | None
) -> None:
    """25 jobs on a queue limited to 10 a second with bursts of 5, concurrency 50: the
    first claim takes the burst, then claims follow the refill, so the last starts 2 s
    after the first at the earliest. Every job of one claim shares its attempted_at (the
    claim's transaction time), which is how the claims are told apart here."""
    rate, burst, total = 10.0, 5, 25
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark, queue="limited")(lambda job: None)

    async def main() -> None:
        async with client:
            await client.insert_many([Mark(str(n)) for n in range(total)], queue="limited")
            queues = [{"name": "limited", "max_workers": 50, "rate_limit": (rate, burst)}]
            await run_until(client, queues, lambda: settled(dsn), processes=processes)

    run(main())
    assert states(dsn) == {"completed": total}
    with psycopg.connect(dsn) as conn:
        claims = conn.execute(
            "SELECT extract(epoch FROM attempted_at)::float8, count(*) FROM awa_fast.jobs"
            " GROUP BY attempted_at ORDER BY attempted_at"
        ).fetchall()
    assert sum(n for _, n in claims) == total
    # Replay the bucket on the claims' server times. A claim's time is taken a moment
    # after the runner read its bucket, and that moment varies: allow it one token.
    tokens, previous = float(burst), claims[0][0]
    for at, n in claims:
        tokens = min(float(burst), tokens + (at - previous) * rate)
        assert n <= tokens + 1, claims
        tokens, previous = tokens - n, at
    assert claims[-1][0] - claims[0][0] >= (total - burst) / rate - 0.1, claims


def test_an_idle_runner_claims_on_news_not_in_a_loop(dsn: str) -> None:
    """With the poll an hour away, an idle runner runs no claim until news comes. Its two
    claimers used to take turns every 50 ms, each reading the other's round in flight as a
    wait for capacity: about 20 claims in the quiet second below. The second is a window
    to count in, not a wait for anything: the right count is zero however slow it runs."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)

    async def main() -> tuple[int, int]:
        async with client:
            runner = await client.start({"default": 5}, poll_interval=3600.0)
            ran = await client.insert(Mark("one"))
            await await_until(lambda: job(dsn, ran.id)["state"] == "completed", what="the job")
            await await_until(lambda: runner.snapshot().in_flight == {"default": 0})
            before = runner.claimer.claims_by_queue[0]
            await asyncio.sleep(1.0)
            quiet = runner.claimer.claims_by_queue[0] - before
            news = await client.insert(Mark("two"))
            await await_until(lambda: job(dsn, news.id)["state"] == "completed", what="news")
            await client.shutdown()
            return quiet, runner.claimer.claims_by_queue[0] - before

    quiet, after_news = run(main())
    assert quiet == 0
    assert after_news >= 1
