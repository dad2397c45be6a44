"""Connections for the hot statements: claims, outcome batches and heartbeats.

Every hot statement touches at most a few hundred rows, found by key (or, for the claim's
pick, in the claim index's order). So these connections leave the planner nothing else to
choose: no sequential or bitmap scans, no hash or merge joins, no parallel workers, no JIT, and
one generic plan per statement, prepared at first use. Otherwise the plan depends on the
statistics of the moment, and the planner's mistakes here are costly:

* on an empty or freshly truncated table it plans sequential scans, and the cached plan
  keeps scanning the whole queue until autovacuum's first ANALYZE;
* a custom plan joins a batch of ids against a bitmap scan of every row of a state,
  which visits every dead version since the last vacuum and marks none;
* a rescue sweep reads all of jobs_hot with parallel workers, or a bitmap of every entry
  of its partial index, where an index scan skips entries marked dead
  (benches/RESULTS.md, "Design measurements");
* with a large queue the generic plan's estimates pass JIT's cost thresholds, and each
  execution compiles itself again: a claim of 500 rows from 120,000 spent 430 ms in
  LLVM and 4 ms running. These connections turn JIT off.

No planner setting stops a nested loop from putting the table outside a batch joined as
a table, so the statements on a batch of attempts join nothing (:class:`IdMap`).

``tests/db/test_queries.py`` plans each hot statement and each rescue sweep under these
settings on an empty, an emptied, an unanalyzed and an analyzed table and holds it to key
access.

Behind a transaction pooler (PgBouncer's ``pool_mode=transaction``, docs/pgbouncer.md) a
connection gets whichever server session is free for each transaction, so nothing may
outlive one: connections there prepare no statement and apply no session setting (the
pooler's database entry may carry the planner settings), and LISTEN goes to a direct URL
(:meth:`Database.session`). Only the caller knows whether a URL goes through one, so it is
said where the URL is given and carried with it as a :class:`Database` to every part that
keeps a connection open: the runner's, the heartbeat's, the leader's and the workers'.
"""

from __future__ import annotations

import asyncio
import math
import re
import select
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson
import psycopg
from psycopg import conninfo
from psycopg.adapt import Dumper
from psycopg.postgres import types as pg_types

from awa_fast.db.dsn import for_writes, servers_of
from awa_fast.db.primary import (
    AsyncPrimaryCursor,
    PrimaryCursor,
    check_primary,
    check_primary_async,
)
from awa_fast.errors import ConfigError, ConfigTypeError, DatabaseUnreachable, ServerIsStandby
from awa_fast.validation import MAX_SECONDS

PLANNER_SETTINGS = {
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    "max_parallel_workers_per_gather": "0",
    # A generic plan's estimates grow with the table: past jit_above_cost every claim
    # compiled itself, hundreds of milliseconds, to run for a few.
    "jit": "off",
}


def _apply(*, local: bool) -> str:
    flag = "true" if local else "false"
    return "SELECT " + ", ".join(
        f"set_config('{k}', '{v}', {flag})" for k, v in PLANNER_SETTINGS.items()
    )


_APPLY = _apply(local=False)
_IN_EFFECT = "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)"


async def planner_settings_missing(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """The hot connections' planner settings not in effect on ``conn``'s session, as
    ``name = value`` wanted: behind a transaction pooler only the pooler's database entry
    can apply them (docs/pgbouncer.md)."""
    cur = await conn.execute(_IN_EFFECT, (list(PLANNER_SETTINGS),))
    in_effect = {name: str(setting).lower() for name, setting in await cur.fetchall()}
    return [f"{k} = {v}" for k, v in PLANNER_SETTINGS.items() if in_effect.get(k) != v]


# The same settings for the rest of the current transaction only: the leader's rescue
# sweeps, which look for the few running or parked rows among every finished one.
APPLY_IN_TRANSACTION = _apply(local=True)


@dataclass(frozen=True, slots=True)
class Int8Array:
    """A ``bigint[]`` parameter (a batch's ids or leases) for a hot connection: psycopg's
    list dumper runs Python code for every element, this one a single join
    (benches/RESULTS.md, "Design measurements")."""

    values: Sequence[int]


class _Int8ArrayDumper(Dumper):
    oid = pg_types["int8"].array_oid

    def dump(self, obj: Int8Array) -> bytes:
        return ("{" + ",".join(map(str, obj.values)) + "}").encode()


@dataclass(frozen=True, slots=True)
class IdMap:
    """A ``jsonb`` parameter mapping job ids to values (a batch's leases, outcomes or
    rescue reasons). The statements on a batch of attempts reach their rows by id alone and
    look each row's values up here rather than join the batch as a table, whose plan can
    flip (awa_fast/db/sql/jobs.sql, job_complete_many)."""

    values: Mapping[int, Any]


class _IdMapDumper(Dumper):
    oid = pg_types["jsonb"].oid

    def dump(self, obj: IdMap) -> bytes:
        return orjson.dumps(obj.values, option=orjson.OPT_NON_STR_KEYS)


def attempts_params(lease_of: Mapping[int, int]) -> dict[str, Any]:
    """The batch of attempts (job id -> run_lease) every statement on attempts takes: its
    ids, in the order ``id = ANY`` reaches them, and the lease of each."""
    return {"ids": Int8Array(list(lease_of)), "leases": IdMap(lease_of)}


# Process-wide: the leader's connections pass these parameters too.
psycopg.adapters.register_dumper(Int8Array, _Int8ArrayDumper)
psycopg.adapters.register_dumper(IdMap, _IdMapDumper)


# TCP keepalives and a send timeout for every connection the runtime holds open. Without
# them a connection whose server vanished (a partition, a paused VM, a failover) looks
# alive for as long as the kernel's defaults allow, two hours when idle, and a statement
# sent into it waits as long.
class RetryBackoff(Protocol):
    """The retry backoff job_rescue_many applies (awa_fast.lifecycle.transitions.Backoff)."""

    @property
    def base(self) -> float: ...

    @property
    def max(self) -> float: ...

    @property
    def jitter(self) -> float: ...


def rescue_params(
    lease_of: Mapping[int, int],
    reason_of: Mapping[int, str],
    *,
    from_state: str,
    backoff: RetryBackoff,
    dlq: Mapping[str, Any],
) -> dict[str, Any]:
    """job_rescue_many's parameters: the attempts, the error each records, the state they
    leave, the retry backoff and the DLQ policy (RunnerConfig.dlq_params)."""
    return {
        **attempts_params(lease_of),
        "messages": IdMap(reason_of),
        "base": backoff.base,
        "max": backoff.max,
        "jitter": backoff.jitter,
        "from_state": from_state,
        **dlq,
    }


KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,  # seconds idle before the first probe
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # ms a sent byte may stay unacknowledged
}


def keepalives(dsn: str) -> dict[str, Any]:
    """The :data:`KEEPALIVES` connection parameters that ``dsn`` does not set itself, to
    pass to every connect of a connection the runtime keeps open (an operator's own
    values stand)."""
    given = conninfo.conninfo_to_dict(dsn)
    return {name: value for name, value in KEEPALIVES.items() if name not in given}


# Seconds a connection the runtime keeps open waits for each server it tries: libpq's own
# default is to wait for ever, and a server whose machine is gone answers nothing, so a
# URL naming it before the new primary would hold every reconnect after a failover.
CONNECT_TIMEOUT = 5


def held_open(dsn: str) -> dict[str, Any]:
    """The parameters of every connection the runtime keeps open, that ``dsn`` does not set
    itself: :data:`KEEPALIVES`, :data:`CONNECT_TIMEOUT` (per server tried), and the cursor
    that takes a write refused by a standby for a lost connection (:mod:`awa_fast.db.primary`)."""
    given = conninfo.conninfo_to_dict(dsn)
    timeout = {} if "connect_timeout" in given else {"connect_timeout": CONNECT_TIMEOUT}
    return {**keepalives(dsn), **timeout, "cursor_factory": AsyncPrimaryCursor}


def closed_meanwhile(conn: psycopg.BaseConnection[Any]) -> bool:
    """Whether an idle connection has anything to read: what a server that closed it (a
    restart, a failover, an administrator's terminate) leaves there, unseen until the
    connection is used again."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


def held_open_sync(dsn: str) -> dict[str, Any]:
    """:func:`held_open` for a synchronous connection."""
    return {**held_open(dsn), "cursor_factory": PrimaryCursor}


_PSYCOPG_THRESHOLD = 5  # psycopg's own default


# A password in a URL's user info, or a key=value string's password value.
_PASSWORDS = re.compile(r"://[^:/@]*:([^@/]+)@|password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")


def _without_secrets(message: str, dsn: str) -> str:
    """libpq's complaint about ``dsn``, which may quote it whole, with ``dsn`` and any
    password in it masked: errors reach logs."""
    message = message.replace(dsn, "<the URL>")
    for found in _PASSWORDS.finditer(dsn):
        secret = found.group(1) or found.group(2)
        message = message.replace(secret, "***")
    return message.strip()


def server_of(dsn: str) -> str:
    """Where ``dsn`` connects, as ``host:port`` (several, comma-separated, for a URL that
    names several hosts): all an error shows of a URL."""
    try:
        return ",".join(servers_of(dsn))
    except ConfigError:  # named in an error about something else: say what libpq would
        given = conninfo.conninfo_to_dict(dsn)
        return f"{given.get('host') or 'the local socket'}:{given.get('port') or 5432}"


# What libpq says of a server that target_session_attrs=read-write passed over.
_STANDBY_SAID = ("server is in hot standby mode", "session is read-only")


def unreachable(dsn: str, why: str) -> DatabaseUnreachable:
    """What a client raises when the server of ``dsn`` is out of its reach, and ``why``
    (libpq's words, any password in them masked): ServerIsStandby when a server answered
    but every one that did is a standby, so that there is no primary to write to."""
    said = f"database unreachable at {server_of(dsn)}: {_without_secrets(why, dsn)}"
    if any(words in why for words in _STANDBY_SAID):
        return ServerIsStandby(f"{said} (a standby answered; no primary among the servers)")
    return DatabaseUnreachable(said)


def refused(exc: psycopg.OperationalError) -> bool:
    """Whether a connection attempt that failed with ``exc`` was answered by the server
    (it refused a role, a password, a database), rather than finding no server at all. A
    refusal carries no SQLSTATE, only libpq's rendering of the server's error, whose
    severity reads ``FATAL:`` (a server whose messages are in another language is not
    recognised, and its refusals read as no answer)."""
    return "FATAL:" in str(exc)


def connect_timeout_params(dsn: str, seconds: object) -> dict[str, Any]:
    """libpq's ``connect_timeout`` for a client that waits ``seconds`` for a connection
    (whole seconds, at least 2, as libpq counts them), unless ``dsn`` sets its own."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds < MAX_SECONDS
    ):
        raise ConfigError(f"connect_timeout must be a positive number of seconds, got {seconds!r}")
    if "connect_timeout" in conninfo.conninfo_to_dict(dsn):
        return {}
    return {"connect_timeout": max(2, math.ceil(seconds))}


@dataclass(frozen=True, slots=True)
class Database:
    """A database URL, and whether it reaches Postgres through a transaction pooler
    (``pooled``) rather than directly: nothing in the URL tells, so whoever gives the URL
    says, and every connection made from it follows."""

    dsn: str = field(repr=False)  # it may hold a password
    pooled: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.dsn, str):
            raise ConfigTypeError(f"a database URL must be a string, got {type(self.dsn).__name__}")
        if not self.dsn:
            raise ConfigError("a database URL is required")
        try:  # checked here, not at the first connection, which may come much later
            conninfo.conninfo_to_dict(self.dsn)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(
                f"not a database URL: {_without_secrets(str(exc), self.dsn)}"
            ) from None
        if not isinstance(self.pooled, bool):
            raise ConfigError(f"transaction_pooling must be True or False, got {self.pooled!r}")
        # Several hosts: a read-write session, the primary among them (docs/high-availability.md).
        object.__setattr__(self, "dsn", for_writes(self.dsn))

    def prepare_threshold(self, threshold: int = _PSYCOPG_THRESHOLD) -> int | None:
        """psycopg's ``prepare_threshold`` for a connection here: ``threshold``, or never
        (None) behind a transaction pooler, where a statement prepared in one transaction's
        server session is missing from the next one's and in the way of that session's
        next client."""
        return None if self.pooled else threshold

    def session(self, *, direct: str | None) -> Database | None:
        """Where a connection that must keep its session (LISTEN) goes: here, or, behind a
        transaction pooler, to ``direct``, Postgres itself (None: no session to be had)."""
        if not self.pooled:
            return self
        return None if direct is None else Database(direct)


def _hot_params(database: Database) -> dict[str, Any]:
    return {
        "autocommit": True,
        "prepare_threshold": database.prepare_threshold(0),
        **held_open(database.dsn),
    }


def connect_hot(database: Database, **kwargs: Any) -> psycopg.Connection[Any]:
    """A hot connection, to the primary; closed again if it reached a standby or its
    settings cannot be applied (an interrupt, a server gone in between), not left open
    to the collector."""
    params = {**_hot_params(database), **held_open_sync(database.dsn), **kwargs}
    conn = psycopg.connect(database.dsn, **params)
    try:
        check_primary(conn)
        if not database.pooled:  # a session setting would stay with a server session lent out
            conn.execute(_APPLY)
    except BaseException:
        conn.close()
        raise
    return conn


async def connect_hot_async(database: Database, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    """A hot connection, to the primary; one whose task is cancelled while it connects or
    its settings are applied (a runner stopped just after it started) is closed, not left
    open."""
    return await connect_or_close(_open_hot_async(database, **kwargs))


async def _open_hot_async(database: Database, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    params = {**_hot_params(database), **kwargs}
    conn = await psycopg.AsyncConnection.connect(database.dsn, **params)
    try:
        await check_primary_async(conn)
        if not database.pooled:
            await conn.execute(_APPLY)
    except BaseException:
        await conn.close()
        raise
    return conn


Conn = TypeVar("Conn", bound=psycopg.AsyncConnection[Any])


async def connect_or_close(connect: Coroutine[Any, Any, Conn]) -> Conn:
    """The connection ``connect`` opens; if this task is cancelled meanwhile, the connect
    goes on and closes its connection once made. Cancelled inside a connect, psycopg
    drops the connection unclosed, its session open for as long as the cancelled task is
    kept (its traceback holds the connection)."""
    opening = asyncio.ensure_future(connect)
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_close_opened)
        raise


def _close_opened(opening: asyncio.Future[Conn]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().pgconn.finish()  # all that close() does, which a callback cannot await
