"""An insert that raises wrote nothing: what Postgres would store but not give back (a due
time psycopg cannot read), or would store as something else, is refused before any
statement, on every way in: both clients, insert and insert_many (one statement or COPY),
the caller's connection and the bridge's drivers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg import conninfo

import awa_fast
from awa_fast import InsertRequest, ValidationError
from awa_fast.bridge import insert_job, insert_job_sync
from awa_fast.lifecycle.schedules import periodic_job
from awa_fast.producer import PACK_MIN_JOBS
from tests.helpers import run, states


@dataclass
class SendEmail:
    to: str


@dataclass
class Reading:
    value: float
    extra: dict[str, Any]


Insert = Callable[[str, object, dict[str, Any]], object]


def client_insert(dsn: str, args: object, options: dict[str, Any]) -> object:
    with awa_fast.Client(dsn) as client:
        return client.insert(args, **options)


def client_insert_many(dsn: str, args: object, options: dict[str, Any]) -> object:
    with awa_fast.Client(dsn) as client:
        return client.insert_many([SendEmail("fine"), args], **options)


def async_client_insert(dsn: str, args: object, options: dict[str, Any]) -> object:
    async def main() -> object:
        async with awa_fast.AsyncClient(dsn) as client:
            return await client.insert(args, **options)

    return run(main())


def async_client_insert_many(dsn: str, args: object, options: dict[str, Any]) -> object:
    async def main() -> object:
        async with awa_fast.AsyncClient(dsn) as client:
            return await client.insert_many([SendEmail("fine"), args], **options)

    return run(main())


def client_insert_many_of_one_type(dsn: str, args: object, options: dict[str, Any]) -> object:
    """Args of one type under one set of options: one statement (as packs) when due now."""
    with awa_fast.Client(dsn) as client:
        return client.insert_many([args] * PACK_MIN_JOBS, **options)


def insert_many_of_requests(dsn: str, args: object, options: dict[str, Any]) -> object:
    """Each item its own request, so the batch goes over COPY (and its options per item)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        items = [InsertRequest(SendEmail("fine")), InsertRequest(args, **options)]
        return awa_fast.insert_many(conn, items)


def insert_in_callers_transaction(dsn: str, args: object, options: dict[str, Any]) -> object:
    with psycopg.connect(dsn) as conn:
        awa_fast.insert(conn, SendEmail("fine"))
        job = awa_fast.insert(conn, args, **options)
        conn.commit()
        return job


def bridge_psycopg(dsn: str, args: object, options: dict[str, Any]) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return insert_job_sync(conn, args, **options)


def bridge_asyncpg(dsn: str, args: object, options: dict[str, Any]) -> object:
    async def main() -> object:
        conn = await asyncpg.connect(dsn)
        try:
            return await insert_job(conn, args, **options)
        finally:
            await conn.close()

    return run(main())


INSERTS: dict[str, Insert] = {
    "client.insert": client_insert,
    "client.insert_many": client_insert_many,
    "client.insert_many, one args type": client_insert_many_of_one_type,
    "async_client.insert": async_client_insert,
    "async_client.insert_many": async_client_insert_many,
    "insert_many over COPY": insert_many_of_requests,
    "insert in the caller's transaction": insert_in_callers_transaction,
    "bridge, psycopg": bridge_psycopg,
    "bridge, asyncpg": bridge_asyncpg,
}


def refused(dsn: str, insert: Insert, args: object, options: dict[str, Any]) -> ValidationError:
    """The error ``insert`` raises, once it is shown to have written nothing and to have
    left every job listable."""
    with pytest.raises(ValidationError) as err:
        insert(dsn, args, options)
    assert states(dsn) == {}
    with awa_fast.Client(dsn) as client:
        assert client.list_jobs() == []
    return err.value


def field(error: ValidationError) -> str:
    """The field an error names, without the item index insert_many puts before it."""
    return error.field.split(".", 1)[1] if error.field.startswith("items[") else error.field


PLUS_5 = timezone(timedelta(hours=5))
OUT_OF_RANGE_DUE = {
    "before year 1 in UTC": datetime(1, 1, 1, 2, tzinfo=PLUS_5),
    "after 9999 in UTC, as text": "9999-12-31T23:00:00-05:00",
    "its last day, which a session east of UTC reads as year 10000": "9999-12-31T12:00:00Z",
    "its first day, which a session west of UTC reads as 1 BC": datetime(1, 1, 1, 12, tzinfo=UTC),
}


@pytest.mark.parametrize("insert", INSERTS.values(), ids=INSERTS.keys())
@pytest.mark.parametrize("due", OUT_OF_RANGE_DUE.values(), ids=OUT_OF_RANGE_DUE.keys())
def test_a_due_time_that_cannot_be_read_back_is_refused_and_nothing_written(
    dsn: str, insert: Insert, due: object
) -> None:
    error = refused(dsn, insert, SendEmail("a"), {"run_at": due})
    assert field(error) == "run_at"
    assert "out of range" in error.message


EDGES = (datetime(1, 1, 2, tzinfo=UTC), datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC))


@pytest.mark.parametrize("zone", ["Etc/GMT-14", "Etc/GMT+12", "UTC"])
def test_the_earliest_and_latest_due_times_read_back_in_any_session_time_zone(
    dsn: str, zone: str
) -> None:
    with awa_fast.Client(dsn) as client:
        ids = [client.insert(SendEmail("edge"), run_at=due).id for due in EDGES]
    with awa_fast.Client(conninfo.make_conninfo(dsn, options=f"-c TimeZone={zone}")) as reader:
        listed = {job.id: job.datetimes.run_at for job in reader.list_jobs()}
    assert listed == dict(zip(ids, EDGES, strict=True))


def test_retry_from_dlq_refuses_a_due_time_out_of_range(client: awa_fast.Client) -> None:
    with pytest.raises(ValidationError, match="out of range") as err:
        client.retry_from_dlq(1, run_at=datetime(1, 1, 1, 2, tzinfo=PLUS_5))
    assert err.value.field == "run_at"


ADMIN_TIMESTAMPS = {
    "list_dlq": (lambda c, at: c.list_dlq(before_dlq_at=at), "before_dlq_at"),
    "purge_dlq": (lambda c, at: c.purge_dlq(kind="k", before_dlq_at=at), "before_dlq_at"),
    "purge_batch_operations": (lambda c, at: c.purge_batch_operations(at), "before"),
    "set_priority": (
        lambda c, at: c.set_priority(1, filter={"created_at_gte": at}),
        "filter.created_at_gte",
    ),
    "set_priority, as text": (
        lambda c, at: c.set_priority(1, filter={"created_at_lt": at.isoformat()}),
        "filter.created_at_lt",
    ),
}


@pytest.mark.parametrize(("call", "name"), ADMIN_TIMESTAMPS.values(), ids=ADMIN_TIMESTAMPS.keys())
def test_admin_timestamps_that_leave_pythons_range_in_utc_are_refused_by_name(
    client: awa_fast.Client, call: Callable[[awa_fast.Client, datetime], object], name: str
) -> None:
    with pytest.raises(ValidationError, match="out of range") as err:
        call(client, datetime(1, 1, 1, 2, tzinfo=PLUS_5))
    assert err.value.field == name
    assert client.list_batch_operations() == []


NAN, INF = float("nan"), float("inf")
NOT_FINITE = {
    "NaN in dict args": ({"ratio": NAN}, {"kind": "k"}, "args.ratio"),
    "infinity deep in dict args": ({"a": [1, {"b": -INF}]}, {"kind": "k"}, "args.a[1].b"),
    "NaN in dataclass args": (Reading(NAN, {}), {}, "args.value"),
    "infinity in a dataclass's dict": (Reading(1.0, {"x": [INF]}), {}, "args.extra.x[0]"),
    "NaN in metadata": ({"n": None}, {"kind": "k", "metadata": {"score": NAN}}, "metadata.score"),
}


@pytest.mark.parametrize("insert", INSERTS.values(), ids=INSERTS.keys())
@pytest.mark.parametrize(("args", "options", "name"), NOT_FINITE.values(), ids=NOT_FINITE.keys())
def test_nan_or_infinity_is_refused_by_field_not_stored_as_null(
    dsn: str, insert: Insert, args: object, options: dict[str, Any], name: str
) -> None:
    error = refused(dsn, insert, args, options)
    assert field(error) == name
    assert "NaN or infinite" in error.message


def test_none_beside_finite_numbers_is_stored_as_null(client: awa_fast.Client) -> None:
    args = {"none": None, "numbers": [1.5, -2.25], "text": "null"}
    assert client.insert(args, kind="k", metadata={"none": None}).args == args
    assert [job.args for job in client.list_jobs()] == [args]


SURROGATE = "lone \ud800 surrogate"
UNCARRIED = {
    "args value": ({"s": SURROGATE}, {}, "args"),
    "args key": ({SURROGATE: 1}, {}, "args"),
    "dataclass args": (Reading(1.0, {"s": SURROGATE}), {}, "args"),
    "kind": ({"s": "x"}, {"kind": SURROGATE}, "kind"),
    "queue": ({"s": "x"}, {"queue": SURROGATE}, "queue"),
    "tags": ({"s": "x"}, {"tags": ["fine", SURROGATE]}, "tags"),
    "metadata": ({"s": "x"}, {"metadata": {"m": SURROGATE}}, "metadata"),
    "NUL in args": ({"s": "a\x00b"}, {}, "args"),
    "NUL after a backslash in args": ({"s": "a\\\x00"}, {}, "args"),
    "NUL in metadata": ({"s": "x"}, {"metadata": {"m\x00": 1}}, "metadata"),
    "NUL in kind": ({"s": "x"}, {"kind": "k\x00"}, "kind"),
    "NUL in queue": ({"s": "x"}, {"queue": "q\x00"}, "queue"),
    "NUL in a tag": ({"s": "x"}, {"tags": ["t\x00"]}, "tags"),
}


@pytest.mark.parametrize("insert", INSERTS.values(), ids=INSERTS.keys())
@pytest.mark.parametrize(("args", "options", "name"), UNCARRIED.values(), ids=UNCARRIED.keys())
def test_text_postgres_cannot_carry_is_refused_by_field(
    dsn: str, insert: Insert, args: object, options: dict[str, Any], name: str
) -> None:
    assert field(refused(dsn, insert, args, {"kind": "k", **options})) == name


ESCAPED = "\\u0000"  # the six characters, no NUL
ESCAPED_TEXT = {
    "text": ESCAPED,
    "two backslashes": "\\" + ESCAPED,
    "nested": [ESCAPED, {ESCAPED: "x" + ESCAPED}],
}


@pytest.mark.parametrize("insert", INSERTS.values(), ids=INSERTS.keys())
def test_text_holding_an_escaped_nul_is_stored_and_read_back_as_given(
    dsn: str, insert: Insert
) -> None:
    options = {
        "kind": "k" + ESCAPED,
        "queue": "q" + ESCAPED,
        "tags": [ESCAPED],
        "metadata": {ESCAPED: ESCAPED},
    }
    insert(dsn, ESCAPED_TEXT, options)
    with awa_fast.Client(dsn) as client:
        mine = [job for job in client.list_jobs() if job.args == ESCAPED_TEXT]
    assert mine
    given = (options["kind"], options["queue"], options["tags"], options["metadata"])
    assert all((job.kind, job.queue, job.tags, job.metadata) == given for job in mine)


@pytest.mark.parametrize(
    ("name", "args", "options", "refused_field"),
    [
        ("nightly", Reading(NAN, {}), {}, "args.value"),
        ("nightly", Reading(1.0, {"s": SURROGATE}), {}, "args"),
        ("nightly", Reading(1.0, {}), {"metadata": {"at": INF}}, "metadata.at"),
        ("nightly", Reading(1.0, {}), {"tags": [SURROGATE]}, "tags"),
        (SURROGATE, Reading(1.0, {}), {}, "name"),
    ],
)
def test_a_schedule_is_refused_at_registration_as_an_insert_would_be(
    name: str, args: Reading, options: Any, refused_field: str
) -> None:
    with pytest.raises(ValidationError) as err:
        periodic_job(name, "@daily", Reading, args, **options)
    assert err.value.field == refused_field
