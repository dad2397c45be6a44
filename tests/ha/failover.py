"""A drain through a failover, shared by the failover tests and benches/failover.py: the
serve pool and a producer on a URL naming a primary and its standby, the primary killed
and the standby promoted mid-run, and what the rows say afterwards."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import awa_fast
from tests.ha.app import Work
from tests.ha.conftest import Replicated
from tests.runtime.work.pool.conftest import Serve

APP = "tests.ha.app"
PROCESSES = 2
CONCURRENCY = 16  # over both worker processes
# Fast rescue, as a failover test wants it: a claim whose reply the failover lost, or a job
# a lost standby claim started, is rescued once its heartbeat is 5 s stale.
SETTINGS = {
    "heartbeat_staleness": 5,
    "backstop_interval": 1,
    "rescue_interval": 0.2,
    "election_interval": 0.5,
}


def serve(pair: Replicated, tmp_path: Path, *, prefetch: int = 4) -> Serve:
    """``awa-fast serve`` of the app's handlers on the URL naming both servers."""
    settings = [arg for name, value in SETTINGS.items() for arg in ("--set", f"{name}={value}")]
    return Serve(
        pair.url,
        tmp_path,
        *("--processes", str(PROCESSES), "--queue", f"default={CONCURRENCY}"),
        *("--prefetch", str(prefetch), *settings),
        app=APP,
    )


class Producer:
    """Inserts ``batch`` jobs every ``every`` seconds through ``url`` on a thread until
    stopped, each with a token of its own: the tokens of the calls that returned, with when
    they did, and those of the calls that raised (their jobs may be there or not)."""

    def __init__(
        self, url: str, prefix: str, *, seconds: float, batch: int = 20, every: float = 0.05
    ) -> None:
        self.url, self.prefix, self.seconds = url, prefix, seconds
        self.batch, self.every = batch, every
        self.returned: list[tuple[str, float]] = []
        self.raised: list[str] = []
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer {prefix}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        made = 0
        with awa_fast.Client(self.url, connect_timeout=2) as client:
            while not self._halt.wait(self.every):  # the pace of a steady producer
                tokens = [f"{self.prefix}-{made + n}" for n in range(self.batch)]
                made += self.batch
                try:
                    client.insert_many([Work(token, self.seconds) for token in tokens])
                except awa_fast.DatabaseError as exc:
                    self.raised += tokens
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                now = time.time()
                self.returned += [(token, now) for token in tokens]

    def returned_since(self, moment: float) -> int:
        return sum(1 for _, at in self.returned if at >= moment)

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the producer did not stop"


def completed(pair: Replicated, cluster: Any) -> int:
    """Jobs completed on ``cluster``'s server; -1 while it cannot be read."""
    try:
        [(count,)] = pair.query(
            cluster, "SELECT count(*) FROM awa_fast.jobs WHERE state = 'completed'"
        )
    except awa_fast.DatabaseError:
        return -1
    return int(count)


def unfinished(pair: Replicated, cluster: Any) -> dict[str, int]:
    """Jobs not completed on ``cluster``'s server, by state."""
    rows = pair.query(
        cluster,
        "SELECT state::text, count(*) FROM awa_fast.jobs WHERE state <> 'completed' GROUP BY 1",
    )
    return {state: int(count) for state, count in rows}


@dataclass(frozen=True)
class Pause:
    """Completions around a failover, read from the promoted standby's rows: the last
    before ``killed``, the first after it, and the rate over ``window`` seconds either
    side (jobs/s)."""

    last_before: float
    first_after: float
    before_per_s: float
    after_per_s: float

    @property
    def seconds(self) -> float:
        return self.first_after - self.last_before


def pause(pair: Replicated, *, dead: float, window: float = 3.0) -> Pause:
    """The completions either side of ``dead`` (time.time(): the primary killed, the
    standby not yet promoted), by the rows' finalized_at, and the rates over ``window``
    seconds either side."""
    [(last, first)] = pair.query(
        pair.standby,
        "SELECT max(t) FILTER (WHERE t <= %s), min(t) FILTER (WHERE t > %s) FROM (SELECT"
        " extract(epoch FROM finalized_at)::float8 AS t FROM awa_fast.jobs"
        " WHERE state = 'completed') s",
        dead,
        dead,
    )
    [(before, after)] = pair.query(
        pair.standby,
        "SELECT count(*) FILTER (WHERE finalized_at > to_timestamp(%s) AND finalized_at"
        " <= to_timestamp(%s)), count(*) FILTER (WHERE finalized_at >= to_timestamp(%s)"
        " AND finalized_at < to_timestamp(%s)) FROM awa_fast.jobs WHERE state = 'completed'",
        last - window,
        last,
        first,
        first + window,
    )
    return Pause(last, first, int(before) / window, int(after) / window)
