"""awa_fast.bridge: a job inserted on the application's own connection commits and rolls
back with the application's rows, on every driver it takes, and is the row awa_fast.insert
would write."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import awa_fast
from awa_fast import UniqueConflict, ValidationError
from awa_fast.bridge import insert_job, insert_job_sync
from tests.helpers import job, run, states


@dataclass
class SendEmail:
    to: str


class Undone(Exception):
    """Raised inside a transaction block to roll it back."""


ORDER = "INSERT INTO orders VALUES (1)"


@pytest.fixture
def orders(dsn: str) -> Iterator[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    yield dsn


def url(dsn: str, driver: str) -> str:
    return dsn.replace("postgresql://", f"postgresql+{driver}://", 1)


# Each driver's way to insert a job (first, before any statement of the application's)
# and an order in one transaction, then commit it or roll it back. Returns the job.
SyncApp = Callable[[str, bool], dict[str, Any]]
AsyncApp = Callable[[str, bool], Awaitable[dict[str, Any]]]


def psycopg_transaction_block(dsn: str, commit: bool) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction() as tx:
        row = insert_job_sync(conn, SendEmail("a"))
        conn.execute(ORDER)
        if not commit:
            raise psycopg.Rollback(tx)
    return row


def psycopg_implicit_transaction(dsn: str, commit: bool) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        row = insert_job_sync(conn, SendEmail("a"))
        conn.execute(ORDER)
        conn.commit() if commit else conn.rollback()
    return row


def sqlalchemy_session(dsn: str, commit: bool) -> dict[str, Any]:
    engine = create_engine(url(dsn, "psycopg"))
    try:
        with contextlib.suppress(Undone), Session(engine) as session, session.begin():
            row = insert_job_sync(session, SendEmail("a"))
            session.execute(text(ORDER))
            if not commit:
                raise Undone
        return row
    finally:
        engine.dispose()


def sqlalchemy_connection(dsn: str, commit: bool) -> dict[str, Any]:
    engine = create_engine(url(dsn, "psycopg"))
    try:
        with contextlib.suppress(Undone), engine.begin() as conn:
            row = insert_job_sync(conn, SendEmail("a"))
            conn.execute(text(ORDER))
            if not commit:
                raise Undone
        return row
    finally:
        engine.dispose()


async def psycopg_async_transaction_block(dsn: str, commit: bool) -> dict[str, Any]:
    connect = psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with await connect as conn, conn.transaction() as tx:
        row = await insert_job(conn, SendEmail("a"))
        await conn.execute(ORDER)
        if not commit:
            raise psycopg.Rollback(tx)
    return row


async def psycopg_async_implicit_transaction(dsn: str, commit: bool) -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        row = await insert_job(conn, SendEmail("a"))
        await conn.execute(ORDER)
        await (conn.commit() if commit else conn.rollback())
    return row


async def asyncpg_transaction(dsn: str, commit: bool) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        with contextlib.suppress(Undone):
            async with conn.transaction():
                row = await insert_job(conn, SendEmail("a"))
                await conn.execute(ORDER)
                if not commit:
                    raise Undone
        return row
    finally:
        await conn.close()


async def sqlalchemy_async_session(dsn: str, commit: bool) -> dict[str, Any]:
    engine = create_async_engine(url(dsn, "asyncpg"))
    try:
        with contextlib.suppress(Undone):
            async with AsyncSession(engine) as session, session.begin():
                row = await insert_job(session, SendEmail("a"))
                await session.execute(text(ORDER))
                if not commit:
                    raise Undone
        return row
    finally:
        await engine.dispose()


async def sqlalchemy_async_connection(dsn: str, commit: bool) -> dict[str, Any]:
    engine = create_async_engine(url(dsn, "psycopg"))
    try:
        with contextlib.suppress(Undone):
            async with engine.begin() as conn:
                row = await insert_job(conn, SendEmail("a"))
                await conn.execute(text(ORDER))
                if not commit:
                    raise Undone
        return row
    finally:
        await engine.dispose()


SYNC_APPS = [
    psycopg_transaction_block,
    psycopg_implicit_transaction,
    sqlalchemy_session,
    sqlalchemy_connection,
]
ASYNC_APPS = [
    psycopg_async_transaction_block,
    psycopg_async_implicit_transaction,
    asyncpg_transaction,
    sqlalchemy_async_session,
    sqlalchemy_async_connection,
]
APPS: list[Callable[[str, bool], dict[str, Any]]] = [
    *SYNC_APPS,
    *(lambda dsn, commit, app=app: run(app(dsn, commit)) for app in ASYNC_APPS),
]
IDS = [app.__name__ for app in [*SYNC_APPS, *ASYNC_APPS]]


def order_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM orders").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("app", APPS, ids=IDS)
def test_a_job_commits_with_the_applications_row(orders: str, app: SyncApp) -> None:
    row = app(orders, True)
    assert (order_count(orders), states(orders)) == (1, {"available": 1})
    stored = job(orders, row["id"])
    assert (row["kind"], row["args"], row["state"]) == ("send_email", {"to": "a"}, "available")
    assert {k: stored[k] for k in row} == row


@pytest.mark.parametrize("app", APPS, ids=IDS)
def test_a_rollback_removes_the_job_and_the_row(orders: str, app: SyncApp) -> None:
    app(orders, False)
    assert (order_count(orders), states(orders)) == (0, {})


# ---- the same row as awa_fast.insert ----------------------------------------------------------

OPTIONS: dict[str, Any] = {
    "queue": "mail",
    "priority": 1,
    "max_attempts": 3,
    "tags": ["a", "b"],
    "metadata": {"m": [1]},
    "deadline": 30.0,
}
FROM_CLIENT = ("id", "created_at", "run_at")  # differ between any two inserts


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in FROM_CLIENT}


async def through_asyncpg(dsn: str, args: object, **options: Any) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        return await insert_job(conn, args, **options)
    finally:
        await conn.close()


async def through_sqlalchemy_asyncpg(dsn: str, args: object, **options: Any) -> dict[str, Any]:
    engine = create_async_engine(url(dsn, "asyncpg"))
    try:
        async with engine.begin() as conn:
            return await insert_job(conn, args, **options)
    finally:
        await engine.dispose()


def through_psycopg_implicit(dsn: str, args: object, **options: Any) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        return insert_job_sync(conn, args, **options)


@pytest.mark.parametrize(
    "insert",
    [
        lambda dsn, args, **o: run(through_asyncpg(dsn, args, **o)),
        lambda dsn, args, **o: run(through_sqlalchemy_asyncpg(dsn, args, **o)),
        through_psycopg_implicit,
    ],
    ids=["asyncpg", "sqlalchemy_asyncpg", "psycopg_implicit"],
)
def test_the_row_is_the_one_awa_fast_insert_writes(
    dsn: str, client: awa_fast.Client, insert: Callable[..., dict[str, Any]]
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    for args, options in [
        (SendEmail("a"), OPTIONS),
        ({"x": "ü\\n"}, {"kind": "raw"}),
        (SendEmail("b"), {"run_at": later}),
    ]:
        bridged = insert(dsn, args, **options)
        stored = job(dsn, bridged["id"])
        assert comparable(stored) == comparable(job(dsn, client.insert(args, **options).id))
        assert comparable(bridged) == {k: v for k, v in comparable(stored).items() if k in bridged}
    # The same unique key: each way of inserting conflicts with the other's job.
    unique = insert(dsn, SendEmail("c"), unique_opts={"by_args": True})
    for again in (insert, lambda dsn, args, **o: client.insert(args, **o)):
        with pytest.raises(UniqueConflict) as conflict:
            again(dsn, SendEmail("c"), unique_opts={"by_args": True})
        assert conflict.value.job_id == unique["id"]


def test_a_unique_conflict_leaves_an_asyncpg_transaction_usable(orders: str) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(orders)
        try:
            async with conn.transaction():
                first = await insert_job(conn, SendEmail("a"), unique_opts={"by_args": True})
                with pytest.raises(UniqueConflict) as conflict:
                    await insert_job(conn, SendEmail("a"), unique_opts={"by_args": True})
                assert conflict.value.job_id == first["id"]
                await conn.execute(ORDER)
        finally:
            await conn.close()

    run(main())
    assert (order_count(orders), states(orders)) == (1, {"available": 1})


def test_a_full_queue_refuses_on_asyncpg_and_sqlalchemy_leaving_them_usable(
    orders: str,
) -> None:
    """Backpressure through the bridge: the depth read on the application's connection,
    QueueFull between statements, and the transaction goes on to commit its row."""

    async def on_asyncpg() -> None:
        conn = await asyncpg.connect(orders)
        try:
            async with conn.transaction():
                await insert_job(conn, SendEmail("a"), max_queue_depth=1)
                with pytest.raises(awa_fast.QueueFull) as full:
                    await insert_job(conn, SendEmail("b"), max_queue_depth=1)
                assert (full.value.depth, full.value.limit) == (1, 1)
                await conn.execute(ORDER)
        finally:
            await conn.close()

    run(on_asyncpg())
    engine = create_engine(url(orders, "psycopg"))
    try:
        with Session(engine) as session, session.begin():
            with pytest.raises(awa_fast.QueueFull):
                insert_job_sync(session, SendEmail("c"), max_queue_depth=1)
            session.execute(text("INSERT INTO orders VALUES (2)"))
    finally:
        engine.dispose()
    assert (order_count(orders), states(orders)) == (2, {"available": 1})


def test_workers_are_woken_when_the_bridges_transaction_commits(dsn: str) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                await insert_job(conn, SendEmail("a"), queue="bridged")
                awa_fast.insert(meanwhile, SendEmail("b"), queue="meanwhile")
        finally:
            await conn.close()

    with (
        psycopg.connect(dsn, autocommit=True) as listener,
        psycopg.connect(dsn, autocommit=True) as meanwhile,
    ):
        listener.execute("LISTEN awa_fast_jobs")
        run(main())
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=2)]
    assert heard == ["meanwhile", "bridged"]


# ---- what the bridge refuses -------------------------------------------------------------------


def test_an_unsupported_object_is_a_type_error_naming_it() -> None:
    """Opening with the words of awa-pg 0.6.9's bridge: "Unsupported connection type: str
    (module=builtins). Supported drivers: asyncpg, psycopg3, SQLAlchemy, and Django." """
    with pytest.raises(TypeError, match=r"^Unsupported connection type: object \(module=built"):
        insert_job_sync(object(), SendEmail("a"))
    with pytest.raises(TypeError, match=r"^Unsupported connection type: str .*insert_job\(\)"):
        run(insert_job("not a connection", SendEmail("a")))


def test_a_connection_of_the_other_flavour_points_to_the_right_function(dsn: str) -> None:
    """awa-pg 0.6.9: "insert_job() requires an async connection. For sync
    psycopg3/SQLAlchemy/Django connections, use insert_job_sync(). Got: Connection"."""
    with psycopg.connect(dsn) as conn, pytest.raises(TypeError, match="use insert_job_sync"):
        run(insert_job(conn, SendEmail("a")))
    with pytest.raises(TypeError, match=r"^insert_job\(\) requires an async .*orm.session.Sess"):
        run(insert_job(Session(), SendEmail("a")))

    async def main() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            with pytest.raises(TypeError, match=r"^insert_job_sync\(\) requires a sync.*asyncpg\."):
                insert_job_sync(conn, SendEmail("a"))
        finally:
            await conn.close()

    run(main())


def test_bad_input_is_refused_as_awa_fast_insert_refuses_it(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(ValidationError) as no_kind:
            insert_job_sync(conn, {"x": 1})
        assert no_kind.value.field == "kind"
        with pytest.raises(ValidationError) as not_a_time:
            insert_job_sync(conn, SendEmail("a"), run_at="next week")
        assert not_a_time.value.field == "run_at"
    assert states(dsn) == {}


def test_a_job_given_a_run_at_starts_scheduled_on_every_driver(dsn: str) -> None:
    """As the Awa SDK's bridge inserts it: due or not, for the promoter to make available."""
    earlier = datetime.now(UTC) - timedelta(minutes=5)
    unique = {"by_args": True}
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = [
            insert_job_sync(conn, SendEmail("psycopg"), run_at=earlier),
            insert_job_sync(conn, SendEmail("unique"), run_at=earlier, unique_opts=unique),
        ]
        with pytest.raises(UniqueConflict):
            insert_job_sync(conn, SendEmail("unique"), run_at=earlier, unique_opts=unique)

    async def from_async() -> list[dict[str, Any]]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            row = await insert_job(conn, SendEmail("psycopg async"), run_at=earlier)
            await conn.commit()
        pg = await asyncpg.connect(dsn)
        try:
            return [row, await insert_job(pg, SendEmail("asyncpg"), run_at=earlier)]
        finally:
            await pg.close()

    rows += run(from_async())
    assert [(r["state"], r["run_at"]) for r in rows] == [("scheduled", earlier)] * 4
    assert states(dsn) == {"scheduled": 4}
