"""The registry of a process's live runners (``snapshot.LIVE``), which telemetry reads from
a thread of its own: which runners it lists and in what order, the stopped runners it
hands over once while someone watches, the databases they use, and a forked child that
starts with none. A client reaches it only through telemetry, where a runner counted twice
or never shows as numbers slightly off."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field

import awa_fast
from awa_fast.db.connections import Database
from awa_fast.runtime.snapshot import LIVE, LiveRunners, Snapshot
from tests.helpers import run


@dataclass(eq=False)
class Runner:
    """An Observed runner whose snapshot says which runner it is (its claimed count)."""

    number: int
    database: Database = field(default_factory=lambda: Database("postgresql:///one"))
    snapshots: int = 0

    def snapshot(self) -> Snapshot:
        self.snapshots += 1
        return snapshot(claimed=self.number)


def snapshot(*, claimed: int) -> Snapshot:
    return Snapshot(
        queues={"default": 1},
        weights={},
        in_flight={},
        running={},
        prefetched={},
        claimed={"default": claimed},
        claims={},
        started_on_standby={},
        committed={},
        stale=0,
        batches=0,
        failed_batches=0,
        worker_processes=1,
        worker_exits={},
        leader=False,
        heartbeat_age=None,
        promoted=0,
        rescued={},
        deleted=0,
        claiming=True,
        heartbeat_alive=True,
        stopping=False,
        loops_down=(),
    )


def numbers(snapshots: list[Snapshot]) -> list[int]:
    return [s.claimed["default"] for s in snapshots]


def taken(live: LiveRunners) -> tuple[list[int], list[int]]:
    """Which runners a take() read: the live, then the stopped."""
    now, stopped = live.take()
    return numbers(now), numbers(stopped)


def test_take_reads_the_live_runners_in_start_order() -> None:
    live, runners = LiveRunners(), [Runner(n) for n in (3, 1, 2)]
    for runner in runners:
        live.add(runner)
    assert taken(live) == ([3, 1, 2], [])
    live.remove(runners[1])
    assert taken(live) == ([3, 2], [])


def test_nobody_watching_keeps_no_stopped_runner() -> None:
    live, runner = LiveRunners(), Runner(1)
    live.add(runner)
    live.remove(runner)
    live.watch(True)
    assert taken(live) == ([], [])
    assert runner.snapshots == 0


def test_while_watched_a_stopped_runner_is_handed_over_once() -> None:
    live, stays, stops = LiveRunners(), Runner(1), Runner(2)
    live.watch(True)
    live.add(stays)
    live.add(stops)
    live.remove(stops)
    live.remove(stops)  # a second stop of the same runner is no second hand-over
    assert taken(live) == ([1], [2])
    assert taken(live) == ([1], [])


def test_unwatching_forgets_the_stopped_runners() -> None:
    live, runner = LiveRunners(), Runner(1)
    live.watch(True)
    live.add(runner)
    live.remove(runner)
    live.watch(False)
    assert taken(live) == ([], [])


def test_a_runner_never_added_is_not_handed_over() -> None:
    live = LiveRunners()
    live.watch(True)
    live.remove(Runner(1))
    assert taken(live) == ([], [])


def test_databases_are_those_of_the_live_runners_once_each() -> None:
    live, other = LiveRunners(), Database("postgresql:///two")
    gone = Runner(3, Database("postgresql:///three"))
    for runner in (Runner(1), Runner(2), Runner(4, other), gone):
        live.add(runner)
    live.remove(gone)
    assert live.databases() == {Database("postgresql:///one"), other}


def test_a_forked_child_starts_with_no_runners_and_a_free_lock() -> None:
    """Forked while a thread of the parent held the registry's lock (here, this one), the
    child lists none of its parent's runners, and can add its own."""
    live = LiveRunners()
    live.watch(True)
    live.add(Runner(1))
    with live._lock:  # held across the fork, as another thread of the parent may
        pid = os.fork()
        if pid == 0:  # the child: without a lock of its own, add() waits forever (SIGALRM)
            code = 1
            try:
                signal.alarm(5)
                empty = live.take() == ([], []) and live.databases() == set()
                live.add(Runner(2))
                code = 0 if empty and taken(live) == ([2], []) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert taken(live) == ([1], [])  # the parent's registry is as it was


def test_a_runner_is_live_from_its_start_to_its_stop(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(kind="noop")(lambda job: None)

    async def main() -> tuple[set[Database], set[Database]]:
        async with client:
            await client.start({"default": 1})
            try:
                during = LIVE.databases()
            finally:
                await client.shutdown()
            return during, LIVE.databases()

    during, after = run(main())
    assert (client.database in during, client.database in after) == (True, False)
