"""client.transaction(): the application's rows and its jobs commit together or not at all,
with the Awa SDK's Transaction/SyncTransaction methods and its exit rules."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

import awa_fast
from awa_fast import AwaError, UniqueConflict, ValidationError
from awa_fast.transaction import placeholder_count
from tests.helpers import await_until, lock_waiters, run, run_until, sessions, states


@dataclass
class SendEmail:
    to: str


@pytest.fixture
def orders(dsn: str) -> Iterator[str]:
    """The application's own table, beside awa-fast's."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note jsonb)")
    yield dsn


def order_ids(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM orders ORDER BY id")]


def job_count(dsn: str) -> int:
    return sum(states(dsn).values())


def idle_in_transaction(dsn: str) -> int:
    """Client connections left inside a transaction."""
    client = "application_name = 'awa-fast client'"
    return sessions(dsn, f"{client} AND state LIKE 'idle in transaction%'")


# ---- commit, rollback, and what leaving the block does ---------------------------------


def test_a_committed_transaction_makes_its_jobs_visible_and_claimable(orders: str) -> None:
    client = awa_fast.AsyncClient(orders)
    client.task(SendEmail)(lambda job: None)

    async def main() -> int:
        async with client:
            async with await client.transaction() as tx:
                assert await tx.execute("INSERT INTO orders VALUES ($1, $2)", 1, None) == 1
                row = await tx.insert(SendEmail("a@example.com"))
                assert job_count(orders) == 0 and order_ids(orders) == []  # not yet
            assert tx.closed
            assert order_ids(orders) == [1]
            await run_until(
                client, {"default": 1}, lambda: states(orders) == {"completed": 1}, timeout=30
            )
            return row.id

    assert run(main()) > 0


def test_leaving_the_block_commits_as_the_sdk_does(orders: str, client: awa_fast.Client) -> None:
    with client.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES ($1, $2)", 1, None)
        row = tx.insert(SendEmail("a@example.com"))
    assert order_ids(orders) == [1]
    assert client.get_job(row.id) is not None


def test_an_explicit_commit_inside_the_block_ends_it(orders: str, client: awa_fast.Client) -> None:
    with client.transaction() as tx:
        tx.insert(SendEmail("a@example.com"))
        tx.commit()
    assert job_count(orders) == 1


def test_rollback_leaves_no_job_and_no_row(orders: str, client: awa_fast.Client) -> None:
    tx = client.transaction()
    tx.execute("INSERT INTO orders VALUES ($1, $2)", 1, None)
    tx.insert(SendEmail("a@example.com"))
    tx.insert_many([SendEmail("b@example.com"), SendEmail("c@example.com")])
    tx.rollback()
    assert (order_ids(orders), job_count(orders)) == ([], 0)


def test_an_exception_rolls_back_and_propagates(orders: str, client: awa_fast.Client) -> None:
    with pytest.raises(KeyError, match="boom"), client.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES ($1, $2)", 1, None)
        tx.insert(SendEmail("a@example.com"))
        raise KeyError("boom")
    assert (order_ids(orders), job_count(orders)) == ([], 0)
    assert idle_in_transaction(orders) == 0


def test_an_exception_rolls_back_an_async_transaction(orders: str) -> None:
    async def main() -> None:
        async with awa_fast.AsyncClient(orders) as client:
            with pytest.raises(KeyError):
                async with await client.transaction() as tx:
                    await tx.execute("INSERT INTO orders VALUES ($1, $2)", 1, None)
                    await tx.insert_many([SendEmail("a@example.com")])
                    raise KeyError("boom")
            assert (order_ids(orders), job_count(orders)) == ([], 0)

    run(main())


def test_using_a_finished_transaction_raises(client: awa_fast.Client) -> None:
    tx = client.transaction()
    tx.commit()
    for use in (
        lambda: tx.execute("SELECT 1"),
        lambda: tx.fetch_all("SELECT 1"),
        lambda: tx.insert(SendEmail("a@example.com")),
        tx.commit,
        tx.rollback,
    ):
        with pytest.raises(AwaError, match="already committed or rolled back"):
            use()


def test_using_a_rolled_back_async_transaction_raises(dsn: str) -> None:
    async def main() -> None:
        async with awa_fast.AsyncClient(dsn) as client:
            tx = await client.transaction()
            await tx.rollback()
            with pytest.raises(AwaError, match="already committed or rolled back"):
                await tx.insert(SendEmail("a@example.com"))
            with pytest.raises(AwaError, match="already committed or rolled back"):
                await tx.commit()

    run(main())


def test_commit_after_a_failed_statement_says_nothing_was_committed(
    orders: str, client: awa_fast.Client
) -> None:
    tx = client.transaction()
    tx.insert(SendEmail("a@example.com"))
    with pytest.raises(psycopg.errors.UndefinedColumn):
        tx.execute("SELECT nope")
    with pytest.raises(AwaError, match="aborted by an earlier failed statement"):
        tx.commit()
    assert job_count(orders) == 0
    assert tx.closed and idle_in_transaction(orders) == 0


# ---- statements: $N placeholders, rows as dicts -----------------------------------------


def test_statements_take_dollar_placeholders_and_return_dicts(
    orders: str, client: awa_fast.Client
) -> None:
    with client.transaction() as tx:
        assert (
            tx.execute("INSERT INTO orders VALUES ($1, $2), ($3, $4)", 1, {"a": [1]}, 2, [3]) == 2
        )
        assert tx.fetch_one("SELECT id, note FROM orders WHERE id = $1", 1) == {
            "id": 1,
            "note": {"a": [1]},
        }
        assert tx.fetch_optional("SELECT id FROM orders WHERE id = $1", 99) is None
        assert tx.fetch_all("SELECT id, note FROM orders ORDER BY id") == [
            {"id": 1, "note": {"a": [1]}},
            {"id": 2, "note": [3]},
        ]
        assert tx.fetch_one("SELECT '100%' AS pct, $1::text AS dollar", "$2") == {
            "pct": "100%",
            "dollar": "$2",
        }
        assert tx.execute("UPDATE orders SET note = NULL") == 2
        with pytest.raises(AwaError, match="returned no row"):
            tx.fetch_one("SELECT id FROM orders WHERE id = $1", 99)
        try:  # the SDK raises DatabaseError here, and ported code catches that
            tx.fetch_one("SELECT id FROM orders WHERE id = $1", 99)
        except awa_fast.DatabaseError as exc:
            assert exc.sqlstate == "P0002"
        else:
            pytest.fail("fetch_one of no row raised nothing")


def test_the_wrong_number_of_arguments_is_refused_before_anything_is_sent(
    orders: str, client: awa_fast.Client
) -> None:
    with client.transaction() as tx:
        with pytest.raises(ValidationError, match=r"1 placeholder\(s\).*got 0") as few:
            tx.execute("INSERT INTO orders VALUES ($1, NULL)")
        assert few.value.field == "args"
        with pytest.raises(ValidationError, match=r"2 placeholder\(s\).*got 3"):
            tx.fetch_all("SELECT $1::int, $2::int", 1, 2, 3)
        with pytest.raises(ValidationError, match=r"0 placeholder\(s\).*got 1"):
            tx.fetch_one("SELECT 1", 5)
        tx.execute("INSERT INTO orders VALUES ($1, NULL)", 7)  # still usable
    assert order_ids(orders) == [7]


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("SELECT 1", 0),
        ("SELECT $1, $2, $1", 2),
        ("SELECT $3", 3),
        ("SELECT '$4', $1", 1),
        ("SELECT 'it''s $5', E'\\' $6', $2", 2),
        ('SELECT 1 AS "$7", $1', 1),
        ("SELECT $1 -- and $8\n", 1),
        ("SELECT /* $9 */ $1", 1),
        ("SELECT $$ $9 $$, $tag$ $9 $tag$, $1", 1),
    ],
)
def test_placeholders_are_counted_outside_literals_and_comments(query: str, count: int) -> None:
    assert placeholder_count(query) == count


# ---- jobs in the transaction ---------------------------------------------------------------


def test_insert_many_returns_the_jobs_in_order(orders: str, client: awa_fast.Client) -> None:
    with client.transaction() as tx:
        jobs = tx.insert_many(
            [SendEmail("a"), awa_fast.InsertRequest({"n": 1}, kind="other", priority=1)],
            queue="mail",
        )
        assert [(j.kind, j.queue, j.priority) for j in jobs] == [
            ("send_email", "mail", 2),
            ("other", "default", 1),
        ]
        assert job_count(orders) == 0
    assert [client.get_job(j.id) for j in jobs] == jobs


def test_a_unique_conflict_raises_and_leaves_the_transaction_usable(
    orders: str, client: awa_fast.Client
) -> None:
    with client.transaction() as tx:
        first = tx.insert(SendEmail("a"), unique_opts={"by_args": True})
        with pytest.raises(UniqueConflict) as conflict:
            tx.insert(SendEmail("a"), unique_opts={"by_args": True})
        assert conflict.value.job_id == first.id
        tx.execute("INSERT INTO orders VALUES ($1, NULL)", 1)
    assert (order_ids(orders), job_count(orders)) == ([1], 1)


@pytest.mark.parametrize("first_commits", [True, False])
def test_two_transactions_racing_for_a_unique_key_insert_one_job(
    dsn: str, first_commits: bool
) -> None:
    """The second insert waits on the first transaction's claim: it conflicts if the first
    commits, and takes the key if the first rolls back."""

    async def main() -> None:
        async with awa_fast.AsyncClient(dsn) as client:
            first = await client.transaction()
            held = await first.insert(SendEmail("a"), unique_opts={"by_args": True})
            second = await client.transaction()
            racing = asyncio.ensure_future(
                second.insert(SendEmail("a"), unique_opts={"by_args": True})
            )
            await await_until(
                lambda: lock_waiters(dsn, application_name="awa-fast client") == 1,
                what="the second insert waiting",
            )
            await (first.commit() if first_commits else first.rollback())
            if first_commits:
                with pytest.raises(UniqueConflict) as conflict:
                    await racing
                assert conflict.value.job_id == held.id
            else:
                assert (await racing).id != held.id
            await second.commit()

    run(main())
    assert job_count(dsn) == 1


def test_workers_are_woken_at_commit_and_not_by_a_rollback(
    dsn: str, client: awa_fast.Client
) -> None:
    """The insert's NOTIFY comes from its own statement, so Postgres sends it at commit:
    a job committed meanwhile by another session is announced first, and a rolled-back
    transaction announces nothing."""
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN awa_fast_jobs")
        rolled_back = client.transaction()
        rolled_back.insert(SendEmail("a"), queue="rolled_back")
        committed = client.transaction()
        committed.insert(SendEmail("b"), queue="in_tx")
        client.insert(SendEmail("c"), queue="meanwhile")
        committed.commit()
        rolled_back.rollback()
        client.insert(SendEmail("d"), queue="after")
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=3)]
    assert heard == ["meanwhile", "in_tx", "after"]


# ---- the connection goes back clean --------------------------------------------------------


def test_a_cancelled_task_leaves_its_connection_clean(orders: str) -> None:
    async def main() -> None:
        async with awa_fast.AsyncClient(orders, max_connections=1) as client:

            async def hold(query: str) -> None:
                async with await client.transaction() as tx:
                    await tx.execute("INSERT INTO orders VALUES ($1, NULL)", 1)
                    await tx.insert(SendEmail("a"))
                    await tx.execute(query)

            task = asyncio.ensure_future(hold("SELECT pg_sleep(60)"))
            await await_until(lambda: sleeping(orders), what="the transaction's sleep")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The pool's only connection: given back idle, with nothing committed.
            async with await client.transaction() as tx:
                assert await tx.fetch_one("SELECT count(*) AS n FROM orders") == {"n": 0}
            assert job_count(orders) == 0 and idle_in_transaction(orders) == 0
            assert not sleeping(orders)  # the server's query was cancelled too

    run(main())


def sleeping(dsn: str) -> bool:
    return sessions(dsn, "wait_event = 'PgSleep'") == 1


def test_a_task_cancelled_outside_a_statement_rolls_back(orders: str) -> None:
    async def main() -> None:
        async with awa_fast.AsyncClient(orders, max_connections=1) as client:
            inserted = asyncio.Event()

            async def hold() -> None:
                async with await client.transaction() as tx:
                    await tx.insert(SendEmail("a"))
                    inserted.set()
                    await asyncio.Event().wait()  # never set

            task = asyncio.ensure_future(hold())
            await inserted.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with await client.transaction() as tx:
                assert await tx.fetch_one("SELECT count(*) AS n FROM awa_fast.jobs") == {"n": 0}

    run(main())
