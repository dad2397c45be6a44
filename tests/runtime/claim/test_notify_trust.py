"""NOTIFY and LISTEN need no privilege: any role that can connect sends and hears every
note. Each note here comes from such a role (``outsider_dsn``), and none of them makes a
runner start, flag or skip anything, or hears a job's data (issue #28, items 1-4)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import psycopg
import pytest

import awa_fast
from awa_fast.runtime.claim.listener import CHANNELS
from awa_fast.runtime.runner import Runner
from tests.helpers import await_until, job, listening, run
from tests.runtime.claim.test_standby import Mark, run_one, start_with_claim, waiting_claims

EPOCH_2000 = 946_684_800  # Unix time of 2000-01-01, where a row's microseconds count from


def notify(dsn: str, *notes: tuple[str, str]) -> None:
    """Send ``notes`` (channel, payload) as ``dsn``'s role, in this order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for channel, payload in notes:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def forged_start(host_id: int, *, claim: int, job_id: int, lease: int, kind: str) -> str:
    """A note in the form migration 0018's trigger sent: the host's id, then the row of a
    job started on its claim, here with args of the sender's choosing."""
    now = int((time.time() - EPOCH_2000) * 1_000_000)
    row = [claim, job_id, lease, kind, "default", json.dumps({"label": "forged"}), 1, 25, 2]
    return f"{host_id} {json.dumps([*row, [], None, None, None, now, now, now + 60_000_000])}"


def test_a_forged_standby_note_starts_nothing(dsn: str, outsider_dsn: str) -> None:
    """Notes naming a job that does not exist, and a completed job's id and lease, with
    the sender's args: no handler runs on them. The host's id alone, as the trigger
    sends it, has the runner read its claims, which started nothing."""
    client = awa_fast.AsyncClient(dsn)
    ran: list[str] = []
    client.task(Mark)(lambda job: ran.append(job.args.label))

    async def main() -> None:
        async with client:
            runner = await start_with_claim(client, dsn, {"default": 2}, poll_interval=3600.0)
            host = runner.host.id
            assert host is not None
            done = job(dsn, await run_one(client, dsn, "real"))
            await await_until(lambda: waiting_claims(dsn, runner) == 1, what="a claim again")
            attempts = [(900_001, 424_242, 1), (900_002, done["id"], done["run_lease"])]
            notes = [
                forged_start(host, claim=c, job_id=j, lease=lease, kind=done["kind"])
                for c, j, lease in attempts
            ]
            notify(outsider_dsn, *[("awa_fast_standby", note) for note in [*notes, str(host)]])
            await run_one(client, dsn, "after")  # its note comes after the forged ones
            assert (
                runner.claimer.standby is not None
                and runner.claimer.standby.started_by_queue == [2]
            )
            await client.shutdown()

    run(main())
    assert ran == ["real", "after"]


def cancel_reasons(runner: Runner) -> dict[tuple[int, int], str]:
    """The attempts whose cancel flag the runner set, and why."""
    return runner.flags.reasons()


def test_a_forged_cancel_flags_nothing_and_an_admin_cancel_still_does(
    dsn: str, outsider_dsn: str
) -> None:
    """Cancel notes for a running attempt (and for small ids and leases around it) flag
    nothing and the job completes; an admin's cancel, heard after them, flags its attempt.
    (The heartbeat, which flags attempts it finds cancelled too, is an hour away.)"""
    client = awa_fast.AsyncClient(dsn)
    release = asyncio.Event()
    cancelled: dict[str, bool] = {}

    @client.task(Mark)
    async def hold(job: awa_fast.Job[Mark]) -> None:
        await release.wait()
        cancelled[job.args.label] = job.is_cancelled()

    async def main() -> tuple[int, int]:
        async with client:
            runner = await client.start(
                {"default": 2}, poll_interval=3600.0, heartbeat_interval=3600.0
            )
            await await_until(lambda: listening(dsn), what="the listener")
            target = (await client.insert(Mark("target"))).id
            victim = (await client.insert(Mark("victim"))).id
            await await_until(lambda: runner.snapshot().in_flight == {"default": 2})
            lease = job(dsn, target)["run_lease"]
            forged = [f"{j}:{n}" for j in range(1, target + 3) for n in range(1, lease + 2)]
            notify(outsider_dsn, *[("awa_fast_cancel", note) for note in forged])
            await client.cancel(victim)
            flagged = (victim, job(dsn, victim)["run_lease"])
            await await_until(lambda: flagged in runner.flags, what="the admin's cancel")
            assert cancel_reasons(runner) == {flagged: "cancelled by admin"}
            release.set()
            await await_until(lambda: job(dsn, target)["state"] == "completed")
            await client.shutdown()
            return target, victim

    target, victim = run(main())
    assert cancelled == {"target": False, "victim": True}
    assert (job(dsn, target)["attempt"], job(dsn, victim)["state"]) == (1, "cancelled")


@pytest.mark.parametrize("standby", [False, True])
def test_notes_that_do_not_parse_are_skipped_and_the_listener_goes_on(
    dsn: str, outsider_dsn: str, caplog: pytest.LogCaptureFixture, standby: bool
) -> None:
    """The first is logged, a flood after it is not (anyone may send them), and the next
    job is still woken (no poll for an hour): by its awa_fast_jobs note, or, with standby
    claims, by its awa_fast_standby note."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)

    async def main() -> list[tuple[str, str]]:
        async with client:
            runner = await client.start({"default": 2}, poll_interval=3600.0, standby=standby)
            if standby:
                await await_until(lambda: waiting_claims(dsn, runner) == 1, what="a claim")
            await await_until(lambda: listening(dsn), what="the listener")
            garbage = [
                ("awa_fast_cancel", "x"),
                ("awa_fast_cancel", "1:"),
                ("awa_fast_standby", "[1]"),
                ("awa_fast_standby", f"{runner.host.id} [1]"),
                *[("awa_fast_cancel", f"flood {n}") for n in range(200)],
            ]
            notify(outsider_dsn, *garbage)
            await run_one(client, dsn, "after")
            await client.shutdown()
            return garbage

    garbage = run(main())
    logged = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "not understood" in r.getMessage()
    ]
    channel, payload = garbage[0]
    assert logged == [f"a NOTIFY on {channel} not understood: {payload!r}"]


def test_a_role_without_grants_hears_no_job_data(dsn: str, outsider_dsn: str) -> None:
    """A job inserted with a standby claim waiting starts on it: the outsider, listening
    on every channel, hears the host's id and the queue's name, never args or metadata."""
    client = awa_fast.AsyncClient(dsn)
    client.task(Mark)(lambda job: None)

    async def main() -> int:
        async with client:
            runner = await start_with_claim(client, dsn, {"default": 2}, poll_interval=3600.0)
            inserted = await client.insert(
                Mark("secret-args"), metadata={"m": "secret-meta"}, tags=["secret-tag"]
            )
            await await_until(lambda: job(dsn, inserted.id)["state"] == "completed")
            assert (
                runner.claimer.standby is not None
                and runner.claimer.standby.started_by_queue == [1]
            )
            await client.shutdown()
            assert runner.host.id is not None
            return runner.host.id

    with psycopg.connect(outsider_dsn, autocommit=True) as outsider:
        for channel in CHANNELS:
            outsider.execute(f"LISTEN {channel}")
        host = run(main())
        outsider.execute("NOTIFY awa_fast_jobs, 'end of test'")
        heard = []
        for note in outsider.notifies(timeout=10):
            if note.payload == "end of test":
                break
            heard.append((note.channel, note.payload))
    assert ("awa_fast_standby", str(host)) in heard
    assert not [payload for _, payload in heard if "secret" in payload]
    assert {payload for _, payload in heard} <= {str(host), "default"}
