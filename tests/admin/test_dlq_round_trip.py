"""Dead-letter queue: exhausted and terminal failures of opted-in queues go there with a
reason; Exhausted still fires; retry brings a job back; purge empties it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import awa_fast
from awa_fast import EventType, TerminalError
from tests.helpers import run, run_until, settled, states


@dataclass
class Flaky:
    fail: bool


def test_dlq_round_trip(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    events: list[EventType] = []
    should_fail = {"yes": True}

    @client.task(Flaky, queue="dl")  # a queue each runner runs, as start() asks
    async def flaky(job: awa_fast.Job[Flaky]) -> None:
        if should_fail["yes"]:
            raise TerminalError("broken") if job.args.fail else RuntimeError("flaky")

    client.on_event(Flaky, lambda e: events.append(e.type))

    def dead_lettered(n: int) -> Any:
        def check() -> bool:
            with awa_fast.Client(dsn) as admin:
                return (
                    settled(dsn) and "retryable" not in states(dsn) and len(admin.list_dlq()) == n
                )

        return check

    async def main() -> None:
        async with client:
            terminal = await client.insert(Flaky(fail=True), queue="dl")
            retried = await client.insert(Flaky(fail=False), queue="dl", max_attempts=2)
            kept = await client.insert(Flaky(fail=True), queue="plain")
            await run_until(
                client,
                {"dl": 2, "plain": 1},
                dead_lettered(2),
                dlq_queues={"dl": True},
                backoff=awa_fast.Backoff(base=0.01),
                promote_interval=0.02,
            )
            entries = {e.job.id: e for e in await client.list_dlq(queue="dl")}
            assert set(entries) == {terminal.id, retried.id}
            assert entries[terminal.id].reason == "TerminalError: broken"
            assert entries[retried.id].job.attempt == 2
            assert (await client.get_job(kept.id)).state == "failed"
            with pytest.raises(awa_fast.JobNotFound):  # not among live jobs
                await client.get_job(terminal.id)
            should_fail["yes"] = False
            back = await client.retry_from_dlq(terminal.id)
            assert back is not None and back.state == "available" and back.attempt == 0
            await run_until(client, {"dl": 2}, lambda: states(dsn).get("completed") == 1)
            assert await client.purge_dlq(queue="dl") == 1

    run(main())
    assert events.count(EventType.EXHAUSTED) == 3  # Exhausted fires, DLQ or not
    assert states(dsn) == {"completed": 1, "failed": 1}
