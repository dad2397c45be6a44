"""Connections for the hot statements: claims, outcome batches and heartbeats.

They are prepared at first use and always planned generically. A custom plan sees the
array sizes and the statistics of the moment and may join a batch of ids against every
row of a state (a bitmap scan through a partial index), which costs nothing on paper and
everything in practice: such a scan visits every dead version left since the last vacuum
and marks none of them, so under load each statement gets slower than the last. The
generic plans reach rows by primary key, and ``tests/db/test_queries.py`` holds them to it.
"""

from __future__ import annotations

from typing import Any

import psycopg

_GENERIC = "SET plan_cache_mode = force_generic_plan"


def connect_hot(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, **kwargs)
    conn.execute(_GENERIC)
    return conn


async def connect_hot_async(dsn: str, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, prepare_threshold=0, **kwargs
    )
    await conn.execute(_GENERIC)
    return conn
