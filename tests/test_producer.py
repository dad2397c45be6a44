from __future__ import annotations

import contextlib
import select
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import psycopg
import pydantic
import pytest
from psycopg.pq import PGconn, Trace

import awa_fast
import awa_fast.producer
from awa_fast import InsertRequest, UniqueConflict, ValidationError
from tests.factories import finish_jobs
from tests.helpers import job, run, states
from tests.test_producer_batches import UNIFORM


@dataclass
class SendEmail:
    to: str


@dataclass
class Notice:
    to: str


class Resize(msgspec.Struct):
    path: str


class Charge(pydantic.BaseModel):
    cents: int


def test_insert_returns_the_stored_job(client: awa_fast.Client, dsn: str) -> None:
    row = client.insert(SendEmail("a@example.com"), priority=1, tags=["t"], metadata={"m": 1})
    stored = job(dsn, row.id)
    assert (row.kind, row.state, row.priority) == ("send_email", "available", 1)
    assert stored["args"] == {"to": "a@example.com"}
    assert stored["tags"] == ["t"]
    assert stored["metadata"] == {"m": 1}
    assert (stored["attempt"], stored["max_attempts"], stored["run_lease"]) == (0, 25, 0)


@pytest.mark.parametrize("args", [Resize("p"), Charge(cents=5), {"x": 1}])
def test_every_args_flavour_is_accepted(client: awa_fast.Client, args: object) -> None:
    kind = "explicit" if isinstance(args, dict) else None
    expected = kind or awa_fast.derive_kind(type(args))
    assert client.insert(args, kind=kind).kind == expected


def test_run_at_as_the_sdk_gives_it_naive_utc_or_iso_text(client: awa_fast.Client) -> None:
    """A naive run_at is UTC and an ISO 8601 text is parsed, as the Awa SDK takes them."""
    due = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    naive = client.insert(SendEmail("naive"), run_at=due.replace(tzinfo=None))
    text = client.insert(SendEmail("text"), run_at="2030-01-01T14:00:00+02:00")
    bare = client.insert(SendEmail("bare"), run_at="2030-01-01T12:00:00")
    assert [j.datetimes.run_at for j in (naive, text, bare)] == [due, due, due]
    assert {j.state for j in (naive, text, bare)} == {"scheduled"}


def test_future_run_at_is_scheduled_in_the_deferred_table(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    row = client.insert(SendEmail("x"), run_at=later)
    assert row.state == "scheduled"
    found = conn.execute("SELECT state FROM awa_fast.jobs_deferred WHERE id = %s", (row.id,))
    assert found.fetchone() == ("scheduled",)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"kind": ""}, "kind"),
        ({"kind": "k" * 129}, "kind"),
        ({"queue": ""}, "queue"),
        ({"queue": "q" * 129}, "queue"),
        ({"queue": "a\x00b"}, "queue"),
        ({"priority": 0}, "priority"),
        ({"priority": 5}, "priority"),
        ({"priority": True}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"run_at": "tomorrow"}, "run_at"),
        ({"run_at": 1893456000}, "run_at"),
        ({"tags": "notalist"}, "tags"),
        ({"metadata": {"bad": object()}}, "metadata"),
        ({"metadata": [1, 2]}, "metadata"),
        ({"unique": {"states": ["nope"]}}, "unique"),
        ({"unique": {"states": 0}}, "unique"),
        ({"unique": {"states": 256}}, "unique"),
        ({"unique": {"states": "available"}}, "unique"),
        ({"unique": {"by_args": "yes"}}, "unique.by_args"),
        ({"unique_opts": {"by_queue": 1}}, "unique.by_queue"),
        ({"deadline": 0}, "deadline"),
        ({"deadline": "soon"}, "deadline"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    client: awa_fast.Client, dsn: str, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as err:
        client.insert(SendEmail("x"), **options)
    assert err.value.field == field
    assert states(dsn) == {}


@pytest.mark.parametrize("args", [{"x": object()}, {"s": "nul\x00"}, [1]])
def test_bad_args_raise_validation_error(client: awa_fast.Client, dsn: str, args: Any) -> None:
    with pytest.raises(ValidationError) as err:
        client.insert(args, kind="k")
    assert err.value.field == "args"
    assert states(dsn) == {}


def test_dict_args_need_a_kind(client: awa_fast.Client) -> None:
    with pytest.raises(ValidationError, match="kind"):
        client.insert({"x": 1})


def test_insert_many_over_copy(client: awa_fast.Client, dsn: str) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    items = [SendEmail(str(i)) for i in range(1000)]
    items.append(InsertRequest(SendEmail("later"), run_at=later, queue="other"))
    ids = client.insert_many(items, priority=3)
    assert len(ids) == len(set(ids)) == 1001
    assert states(dsn) == {"available": 1000, "scheduled": 1}
    assert job(dsn, ids[0])["priority"] == 3
    assert job(dsn, ids[-1])["queue"] == "other"


def test_insert_many_stores_options_left_to_defaults_as_given(
    client: awa_fast.Client, dsn: str
) -> None:
    """insert_many sends an option only where it differs from the table's default: a
    stored job must not show whether an option was left out, given with its default value,
    or inserted by insert; one batch may mix options (and so COPY column lists)."""
    defaults = {"priority": 2, "max_attempts": 25, "tags": [], "metadata": {}, "deadline": None}
    ids = [
        client.insert(SendEmail("single")).id,
        *client.insert_many([SendEmail("left out")]),
        *client.insert_many([SendEmail("given")], **defaults),  # type: ignore[arg-type]
        *client.insert_many(
            [
                SendEmail("plain"),
                InsertRequest(SendEmail("urgent"), priority=1, tags=["x"], metadata={"m": 1}),
                InsertRequest(SendEmail("short"), max_attempts=3, deadline=2.5),
            ]
        ),
    ]
    columns = ("priority", "max_attempts", "tags", "metadata", "deadline_seconds", "state")
    stored = [job(dsn, job_id) for job_id in ids]
    rows = [tuple(row[c] for c in columns) for row in stored]
    plain = (2, 25, [], {}, None, "available")
    assert rows == [plain] * 4 + [
        (1, 25, ["x"], {"m": 1}, None, "available"),
        (2, 3, [], {}, 2.5, "available"),
    ]
    assert all(row["run_at"] == row["created_at"] for row in stored)


AWKWARD = 'back\\slash\ttab\nnew\rline "quoted" {braced,comma} \\N é 🚀'


@pytest.mark.parametrize("flavour", ["insert", "insert_many"])
def test_awkward_text_is_stored_as_given(client: awa_fast.Client, dsn: str, flavour: str) -> None:
    """Every text column survives both insert paths (insert_many writes COPY text itself)."""
    options: dict[str, Any] = {
        "kind": AWKWARD,
        "queue": AWKWARD,
        "tags": [AWKWARD, "plain", "NULL"],
        "metadata": {AWKWARD: AWKWARD},
        "deadline": 1e-05,
        "run_at": datetime(2001, 2, 3, 4, 5, 6, 789, tzinfo=timezone(timedelta(hours=-5))),
    }
    args = {"text": AWKWARD, "nested": {"list": [AWKWARD, None, 1.5]}}
    if flavour == "insert":
        job_id = client.insert(args, **options).id
    else:
        [job_id] = client.insert_many([args], **options)
    stored = job(dsn, job_id)
    assert (stored["kind"], stored["queue"]) == (AWKWARD, AWKWARD)
    assert stored["args"] == args
    assert stored["tags"] == [AWKWARD, "plain", "NULL"]
    assert stored["metadata"] == {AWKWARD: AWKWARD}
    assert stored["deadline_seconds"] == 1e-05
    assert stored["run_at"] == options["run_at"]
    assert stored["state"] == "available"


@pytest.mark.parametrize("case", UNIFORM)
def test_a_uniform_batch_is_stored_as_item_by_item_would_store_it(
    dsn: str, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-statement insert of a batch of one args type stores every column the COPY of
    the item-by-item path does (the case list: tests/test_producer_batches.py)."""
    items, options = UNIFORM[case]
    with psycopg.connect(dsn, autocommit=True) as conn:
        uniform = awa_fast.insert_many(conn, items, **options)
        monkeypatch.setattr(awa_fast.producer, "_uniform_params", lambda items, options: None)
        item_by_item = awa_fast.insert_many(conn, items, **options)
    assert len(uniform) == len(item_by_item) == len(items)
    assert uniform == sorted(uniform) and item_by_item == sorted(item_by_item)
    varying = {"id", "run_at", "created_at"}
    for a, b in zip(uniform, item_by_item, strict=True):
        stored_a, stored_b = job(dsn, a), job(dsn, b)
        assert {k: v for k, v in stored_a.items() if k not in varying} == {
            k: v for k, v in stored_b.items() if k not in varying
        }
        assert stored_a["run_at"] == stored_a["created_at"]


def test_insert_many_of_one_args_type_stores_each_as_given(
    client: awa_fast.Client, dsn: str
) -> None:
    """A batch of one args type under one set of options goes out as one statement
    (awa_fast.producer._uniform_params): escapes, unicode and options arrive intact, and
    the ids come back in item order."""
    texts = ["plain", AWKWARD, 'say "hi"', "é 🚀", "\\N"]
    options: dict[str, Any] = {"queue": AWKWARD, "priority": 4, "tags": [AWKWARD]}
    ids = client.insert_many([SendEmail(text) for text in texts], **options)
    stored = [job(dsn, job_id) for job_id in ids]
    assert [row["args"] for row in stored] == [{"to": text} for text in texts]
    assert {(row["queue"], row["priority"], tuple(row["tags"])) for row in stored} == {
        (AWKWARD, 4, (AWKWARD,))
    }
    assert ids == sorted(ids)


@pytest.mark.parametrize(
    ("items", "kind", "field"),
    [
        ([SendEmail("a"), SendEmail("b"), SendEmail("nul\x00")], None, "items[2].args"),
        ([{"x": 1}, {"x": object()}], "k", "items[1].args"),
        ([{"x": 1}, {"x": 2}], None, "items[0].kind"),
    ],
)
def test_a_bad_item_among_args_of_one_type_is_named_and_nothing_written(
    client: awa_fast.Client, dsn: str, items: list[Any], kind: str | None, field: str
) -> None:
    with pytest.raises(ValidationError) as err:
        client.insert_many(items, **({"kind": kind} if kind else {}))
    assert err.value.field == field
    assert states(dsn) == {}


def test_insert_many_validates_shared_options_once_per_call(
    client: awa_fast.Client, dsn: str
) -> None:
    with pytest.raises(ValidationError) as err:
        client.insert_many([SendEmail("a"), SendEmail("b")], queue="")
    assert err.value.field == "items[0].queue"
    ids = client.insert_many([SendEmail("a"), {"x": 1}], kind="explicit", tags=["t"])
    assert [job(dsn, i)["kind"] for i in ids] == ["explicit", "explicit"]
    assert [job(dsn, i)["tags"] for i in ids] == [["t"], ["t"]]
    assert states(dsn) == {"available": 2}


def test_bad_item_in_insert_many_names_its_index(client: awa_fast.Client, dsn: str) -> None:
    with pytest.raises(ValidationError) as err:
        client.insert_many([SendEmail("a"), InsertRequest(SendEmail("b"), priority=9)])
    assert err.value.field == "items[1].priority"
    assert states(dsn) == {}


def test_insert_in_callers_transaction_commit_and_rollback(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            kept = awa_fast.insert(conn, SendEmail("kept"))
        with pytest.raises(RuntimeError), conn.transaction():
            awa_fast.insert(conn, SendEmail("gone"))
            awa_fast.insert_many(conn, [SendEmail("gone too")])
            raise RuntimeError("roll back")
    assert states(dsn) == {"available": 1}
    assert job(dsn, kept.id)["args"] == {"to": "kept"}


def test_async_insert_in_callers_transaction(dsn: str) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            async with conn.transaction():
                await awa_fast.insert_async(conn, SendEmail("a"))
                await awa_fast.insert_many_async(conn, [SendEmail("b"), SendEmail("c")])
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await awa_fast.insert_async(conn, SendEmail("gone"))
                    raise RuntimeError("roll back")

    run(main())
    assert states(dsn) == {"available": 3}


@contextlib.contextmanager
def round_trips(pgconn: PGconn) -> Iterator[list[int]]:
    """Count the statements the server finishes on ``pgconn`` inside the block (its
    ReadyForQuery messages, one per round trip) from libpq's trace of the session; the
    count is appended to the yielded list on exit, once libpq has flushed the trace."""
    counted: list[int] = []
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        try:
            yield counted
        finally:
            pgconn.untrace()
            trace.seek(0)
            lines = trace.read().decode().splitlines()
            counted.append(sum("\tReadyForQuery\t" in line for line in lines))


# A transaction would cost two more round trips (BEGIN, COMMIT) each.
ROUND_TRIPS = {
    "insert": (lambda conn: awa_fast.insert(conn, SendEmail("a")), 1),
    "insert_many of one args type": (
        lambda conn: awa_fast.insert_many(conn, [SendEmail("a")] * 3),
        1,  # one INSERT, the ids returned
    ),
    "insert_many of two args types": (
        lambda conn: awa_fast.insert_many(conn, [SendEmail("a"), {"to": "b"}], kind="k"),
        2,  # ids, COPY
    ),
    "insert_many, due and scheduled": (
        lambda conn: awa_fast.insert_many(
            conn, [SendEmail("a"), InsertRequest(SendEmail("b"), run_at=IN_AN_HOUR)]
        ),
        5,  # BEGIN, ids, COPY into jobs_hot, COPY into jobs_deferred, COMMIT
    ),
    "unique insert": (lambda conn: awa_fast.insert(conn, SendEmail("u"), unique={}), 5),
}
IN_AN_HOUR = datetime.now(UTC) + timedelta(hours=1)


@pytest.mark.parametrize("case", ROUND_TRIPS)
def test_an_insert_that_is_one_statement_sends_no_begin_or_commit(dsn: str, case: str) -> None:
    """On an autocommit connection with no transaction open, an insert that is one
    statement (one COPY for insert_many) is atomic by itself and goes out without a
    transaction around it; anything more gets one."""
    insert, expected = ROUND_TRIPS[case]
    with psycopg.connect(dsn, autocommit=True) as conn:
        with round_trips(conn.pgconn) as counted:
            insert(conn)
        assert counted == [expected]
    assert sum(states(dsn).values()) >= 1


def test_async_insert_that_is_one_statement_sends_no_begin_or_commit(dsn: str) -> None:
    async def main() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            with round_trips(conn.pgconn) as one:
                await awa_fast.insert_async(conn, SendEmail("a"))
            with round_trips(conn.pgconn) as uniform:
                await awa_fast.insert_many_async(conn, [SendEmail("b"), SendEmail("c")])
            with round_trips(conn.pgconn) as mixed:
                await awa_fast.insert_many_async(conn, [SendEmail("d"), {"to": "e"}], kind="k")
            return one + uniform + mixed

    assert run(main()) == [1, 1, 2]
    assert states(dsn) == {"available": 5}


def test_caller_transaction_on_an_autocommit_connection_still_holds_the_insert(
    dsn: str,
) -> None:
    """An autocommit connection with a transaction open is not alone: the insert joins the
    transaction and rolls back with it."""
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        pytest.raises(RuntimeError),
        conn.transaction(),
    ):
        awa_fast.insert(conn, SendEmail("gone"))
        awa_fast.insert_many(conn, [SendEmail("gone too")] * 2)
        raise RuntimeError("roll back")
    assert states(dsn) == {}


REJECT_THIRD = """
CREATE FUNCTION reject_third() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.args->>'to' = 'third' THEN RAISE EXCEPTION 'third row rejected'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER reject_third BEFORE INSERT ON awa_fast.{table}
    FOR EACH ROW EXECUTE FUNCTION reject_third();
"""


@pytest.mark.parametrize(
    ("table", "items"),
    [
        # one INSERT (args of one type), no transaction around it
        ("jobs_hot", [SendEmail("first"), SendEmail("second"), SendEmail("third")]),
        # one COPY (args of two types), no transaction around it
        ("jobs_hot", [SendEmail("first"), Notice("second"), SendEmail("third")]),
        # two COPYs in one transaction: the second one's failure takes the first back
        (
            "jobs_deferred",
            [
                SendEmail("first"),
                SendEmail("second"),
                InsertRequest(SendEmail("third"), run_at=IN_AN_HOUR),
            ],
        ),
    ],
)
def test_insert_many_rejected_midway_writes_nothing(
    dsn: str, conn: psycopg.Connection[Any], table: str, items: list[object]
) -> None:
    conn.execute(REJECT_THIRD.format(table=table))  # type: ignore[arg-type]
    conn.commit()
    with psycopg.connect(dsn, autocommit=True) as producer:
        with pytest.raises(psycopg.errors.RaiseException, match="third row rejected"):
            awa_fast.insert_many(producer, items)
        assert states(dsn) == {}
        # The connection is left as it was found, ready for the next insert.
        awa_fast.insert_many(producer, [SendEmail("next")])
    assert states(dsn) == {"available": 1}


def test_async_client_inserts(dsn: str) -> None:
    async def main() -> list[int]:
        async with awa_fast.AsyncClient(dsn) as client:
            one = await client.insert(SendEmail("a"))
            many = await client.insert_many([SendEmail("b")] * 10)
            return [one.id, *many]

    assert len(set(run(main()))) == 11


def test_unique_jobs_conflict_while_live(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    first = client.insert(SendEmail("u"), unique={"by_args": True})
    with pytest.raises(UniqueConflict) as err:
        client.insert(SendEmail("u"), unique_opts={"by_args": True})
    assert err.value.job_id == first.id
    assert client.insert(SendEmail("other"), unique={"by_args": True}).id != first.id
    # The default states are the Awa SDK's: a completed job still holds its key ...
    finish_jobs(conn, "completed", [first.id])
    with pytest.raises(UniqueConflict):
        client.insert(SendEmail("u"), unique={"by_args": True})
    # ... a failed one does not: once the holder leaves the unique states, the key is free.
    failed = client.insert(SendEmail("f"), unique={"by_args": True})
    finish_jobs(conn, "failed", [failed.id])
    assert client.insert(SendEmail("f"), unique={"by_args": True}).id != failed.id


def test_unique_states_as_the_sdks_bitmask(
    client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    """``unique_opts={"states": N}``, the SDK's form: bit i is the i-th state of
    scheduled, available, running, completed, retryable, failed, cancelled,
    waiting_external. With only "available" (2), a completed holder frees its key."""
    held = client.insert(SendEmail("b"), unique_opts={"states": 0b10})
    claimed = conn.execute(
        "SELECT states::text[] FROM awa_fast.unique_claims WHERE job_id = %s", (held.id,)
    ).fetchone()
    assert claimed == (["available"],)
    with pytest.raises(UniqueConflict):
        client.insert(SendEmail("b"), unique_opts={"states": 0b10})
    finish_jobs(conn, "completed", [held.id])
    assert client.insert(SendEmail("b"), unique_opts={"states": 0b10}).id != held.id
    every = client.insert(SendEmail("all"), unique_opts={"states": 255}).id
    [(states,)] = conn.execute(
        "SELECT states::text[] FROM awa_fast.unique_claims WHERE job_id = %s", (every,)
    ).fetchall()
    assert states == [
        "scheduled", "available", "running", "completed",
        "retryable", "failed", "cancelled", "waiting_external",
    ]  # fmt: skip


def test_unique_duplicates_are_skipped_in_insert_many(client: awa_fast.Client, dsn: str) -> None:
    unique = {"by_args": True}
    ids = client.insert_many([SendEmail("a"), SendEmail("a"), SendEmail("b")], unique=unique)
    assert len(ids) == 2
    assert states(dsn) == {"available": 2}


def test_one_notify_per_inserting_statement(client: awa_fast.Client, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN awa_fast_jobs")
        client.insert_many([SendEmail(str(i)) for i in range(500)])
        client.insert_many([InsertRequest(SendEmail("x"), queue="other")] * 3)
        select.select([listener.fileno()], [], [], 5)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    assert sorted(notes) == ["default", "other"]
