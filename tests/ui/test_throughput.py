"""The charts' window (ui/throughput.py): the first read counts the whole window, later
ones read again only the newest buckets and keep the rest as read."""

from __future__ import annotations

from typing import Any

import psycopg

import awa_fast
from awa_fast.ui.throughput import Window
from tests.helpers import run
from tests.ui.test_ops import _finished


def test_a_refresh_reads_again_only_the_newest_buckets(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    window = Window(3600, 60)
    client = awa_fast.AsyncClient(dsn)

    async def main() -> None:
        at = _finished(conn, "a", "completed", 300)
        first = await window.read(client.run_op)
        assert len(first.starts) == 60 and first.sums("a") == (1, 0)
        assert first.series("a")[first.starts.index(at // 60 * 60)] == (1, 0)
        _finished(conn, "a", "failed", 600)  # in a bucket already read: kept as it was
        _finished(conn, "a", "failed", 0)  # in the open bucket: read again
        second = await window.read(client.run_op)
        assert second.sums("a") == (1, 1)
        assert [f for _, f in second.series("a")[-2:]] in ([0, 1], [1, 0])  # a minute may turn
        assert second.total() == second.series("a") and second.series("b") == [(0, 0)] * 60
        await client.close()

    run(main())
