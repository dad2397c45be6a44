"""Connections for the hot statements: claims, outcome batches and heartbeats.

Every hot statement touches at most a few hundred rows, found by key (or, for the claim's
pick, in the claim index's order), so these connections leave the planner nothing else to
choose: no sequential or bitmap scans, no hash or merge joins, and one generic plan per
statement, prepared at first use. What the planner would otherwise pick depends on the
statistics of the moment, and both of its usual mistakes here were costly:

* on an empty or freshly truncated table (every run's start) it planned sequential
  scans, and the cached plan kept scanning the whole queue until autovacuum's first
  ANALYZE invalidated it, seconds later under load;
* a custom plan joined a batch of ids against a bitmap scan of every row of a state,
  which visits every dead version left since the last vacuum and marks none, so under
  load each statement got slower than the last.

``tests/db/test_queries.py`` plans each hot statement under these settings on an empty,
an unanalyzed and an analyzed table and holds it to key access.
"""

from __future__ import annotations

from typing import Any

import psycopg

PLANNER_SETTINGS = {
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
}
_APPLY = "SELECT " + ", ".join(
    f"set_config('{k}', '{v}', false)" for k, v in PLANNER_SETTINGS.items()
)


def connect_hot(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, **kwargs)
    conn.execute(_APPLY)
    return conn


async def connect_hot_async(dsn: str, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, prepare_threshold=0, **kwargs
    )
    await conn.execute(_APPLY)
    return conn
