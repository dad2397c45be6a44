"""The paced producer (awa_fast.paced) against a real database and real workers: a bulk
load finishes while a worker drains the queue, and the queue's available jobs, watched
from the rows by an observer of their own, never pass the high mark by more than one
chunk; its holds are counted as backpressure signals; bad settings are refused by name."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.backpressure import PRESSURE
from awa_fast.errors import ValidationError
from awa_fast.types import InsertRequest
from tests.helpers import await_until, run, states
from tests.test_backpressure import available


@dataclass
class Load:
    n: int


class Watch:
    """The most available jobs ``queue`` held while it ran, from the rows, read in a loop
    on a thread of its own."""

    def __init__(self, dsn: str, queue: str) -> None:
        self.most = 0
        self.looks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(dsn, queue), daemon=True)

    def _run(self, dsn: str, queue: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                self.most = max(self.most, available(conn, queue))
                self.looks += 1

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _drained_by_a_worker(dsn: str) -> awa_fast.AsyncClient:
    """A client whose handler takes a little while a job, so that a load outruns it."""
    worker = awa_fast.AsyncClient(dsn)

    @worker.task(Load, queue="bulk")
    async def load(job: awa_fast.Job[Load]) -> None:
        await asyncio.sleep(0.002)

    return worker


def _items(count: int, taken: list[int]) -> Iterator[Load]:
    """Jobs made as the load asks for them, counted in ``taken``."""
    for n in range(count):
        taken[0] += 1
        yield Load(n)


@pytest.mark.parametrize("twin", ["async", "sync"])
def test_a_paced_load_finishes_while_a_worker_drains_and_keeps_to_its_marks(
    dsn: str, twin: str
) -> None:
    total, chunk, high, low = 3000, 200, 600, 300
    taken = [0]
    before = PRESSURE.read()[0].get("bulk", 0)

    async def main() -> awa_fast.Paced:
        worker = _drained_by_a_worker(dsn)
        await worker.start({"bulk": 4}, poll_interval=0.05)
        try:
            items = _items(total, taken)
            marks: dict[str, Any] = {"max_depth": high, "resume_depth": low, "chunk": chunk}
            if twin == "async":
                paced = await awa_fast.insert_paced_async(worker, items, queue="bulk", **marks)
            else:
                with awa_fast.Client(dsn) as sync:
                    load = functools.partial(awa_fast.insert_paced, sync, items, queue="bulk")
                    paced = await asyncio.to_thread(load, **marks)
            await await_until(lambda: states(dsn) == {"completed": total}, what="the drain")
            return paced
        finally:
            await worker.close()

    with Watch(dsn, "bulk") as watch:
        paced = run(main())
    assert (paced.inserted, paced.chunks) == (total, total // chunk)
    assert paced.holds >= 1 and paced.held_for > 0  # it did outrun the worker
    assert 0 < watch.most <= high + chunk, watch.most
    assert watch.looks > 10
    assert PRESSURE.read()[0]["bulk"] - before == paced.holds
    assert taken == [total]


def test_the_load_takes_its_items_a_chunk_at_a_time(dsn: str) -> None:
    """A generator is read as the load goes, not whole first: the item that fails is
    reached only after the chunks before it are in."""

    def items() -> Iterator[object]:
        yield from (Load(n) for n in range(5))
        yield InsertRequest(Load(5), queue="elsewhere")

    with awa_fast.Client(dsn) as client:
        with pytest.raises(ValidationError) as caught:
            awa_fast.insert_paced(client, items(), queue="bulk", max_depth=100, chunk=2)
        assert caught.value.field == "items[5].queue"
        assert client.queue_depth("bulk") == 4  # two chunks in, the third refused


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"max_depth": 0}, "max_depth"),
        ({"max_depth": 10, "resume_depth": 10}, "resume_depth"),
        ({"max_depth": 10, "resume_depth": -1}, "resume_depth"),
        ({"max_depth": 10, "chunk": 0}, "chunk"),
        ({"max_depth": 10, "poll_interval": 0}, "poll_interval"),
        ({"max_depth": 10, "queue": ""}, "queue"),
    ],
)
def test_bad_settings_are_refused_by_name_before_anything_is_read(
    dsn: str, settings: dict[str, Any], field: str
) -> None:
    taken = [0]
    with awa_fast.Client(dsn) as client, pytest.raises(ValidationError) as caught:
        awa_fast.insert_paced(client, _items(3, taken), **settings)
    assert caught.value.field == field and taken == [0]


def test_an_unknown_option_is_refused_as_python_refuses_one(dsn: str) -> None:
    with awa_fast.Client(dsn) as client, pytest.raises(TypeError, match="queu"):
        awa_fast.insert_paced(client, [Load(0)], max_depth=5, queu="x")  # type: ignore[call-arg]
