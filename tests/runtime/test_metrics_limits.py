"""The metrics server's bounds: connections past its limit are closed as soon as they are
accepted, so a flood of idle clients holds no more than the limit of the runner's
descriptors, and /health answers again once they go."""

from __future__ import annotations

import asyncio
import os

import awa_fast
from awa_fast.runtime.metrics import serve_metrics
from tests.helpers import await_until, free_port, run
from tests.runtime.test_metrics import get

LIMIT = 4
FLOOD = 40
SLACK = 4  # descriptors the runner may open meanwhile of its own (a connection, say)


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_connections_past_the_limit_are_closed_at_once_and_health_answers_after(
    dsn: str,
) -> None:
    client = awa_fast.AsyncClient(dsn)
    client.task(kind="idle", queue="q")(lambda job: None)  # start() needs a handler
    port = free_port()

    async def main() -> None:
        async with client:
            runner = await client.start({"q": 1})
            # Held ones would wait this long for a request: only the bound closes them sooner.
            server = await serve_metrics(runner, port, read_timeout=60, max_connections=LIMIT)
            try:
                before = _descriptors()
                flood = [await asyncio.open_connection("127.0.0.1", port) for _ in range(FLOOD)]
                reads = [asyncio.create_task(reader.read()) for reader, _ in flood]
                await await_until(
                    lambda: sum(r.done() for r in reads) >= FLOOD - LIMIT,
                    timeout=20,
                    what="the connections past the limit closed",
                )
                assert sum(r.done() for r in reads) == FLOOD - LIMIT
                assert all(r.result() == b"" for r in reads if r.done())
                # The test's own ends of the flood, and the server's ends of those it holds.
                assert _descriptors() - before <= FLOOD + LIMIT + SLACK
                for _, writer in flood:
                    writer.close()
                await asyncio.gather(*reads)
                assert (await get(port, "/health")).status == 200
            finally:
                server.close()
                await server.wait_closed()

    run(main())
