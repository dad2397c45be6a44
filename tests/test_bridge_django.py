"""awa_fast.bridge on Django's own connection, as the Awa SDK's bridge takes it: the job
commits and rolls back with the application's rows, and one given a run_at starts
scheduled, as the SDK inserts it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import django
import psycopg
import pytest
from django.conf import settings
from django.db import connection, transaction
from psycopg import conninfo

import awa_fast
from awa_fast import UniqueConflict
from awa_fast.bridge import insert_job, insert_job_sync
from awa_fast.db.queries import Q
from tests.helpers import run, states


@dataclass
class SendEmail:
    to: str


class Undone(Exception):
    """Raised inside an atomic block to roll it back."""


# Configured as the module loads: django.db's connection proxy reads the settings whenever
# anything inspects it (a gc walk of every object, in another test), not only here.
if not settings.configured:
    settings.configure(
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql"}}, USE_TZ=True
    )
    django.setup()


@pytest.fixture
def django_connection(dsn: str) -> Iterator[Any]:
    """Django's default connection, on this test's database."""
    given = conninfo.conninfo_to_dict(dsn)
    connection.settings_dict.update(
        NAME=given["dbname"],
        USER=given.get("user", ""),
        PASSWORD=given.get("password", ""),
        HOST=given.get("host", ""),
        PORT=given.get("port", ""),
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    yield connection
    connection.close()


def test_a_job_commits_and_rolls_back_with_the_atomic_block(django_connection: Any) -> None:
    with transaction.atomic():
        with django_connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders VALUES (1)")
        kept = insert_job_sync(django_connection, SendEmail("a"))
    with pytest.raises(Undone), transaction.atomic():
        insert_job_sync(django_connection, SendEmail("b"))
        raise Undone
    with django_connection.cursor() as cursor:
        cursor.execute("SELECT args ->> 'to' FROM awa_fast.jobs")
        assert cursor.fetchall() == [("a",)]
    assert (kept["kind"], kept["state"], kept["args"]) == ("send_email", "available", {"to": "a"})
    assert isinstance(kept["created_at"], datetime)  # as the driver reads it, as the SDK's


def test_outside_an_atomic_block_each_insert_commits_itself(django_connection: Any) -> None:
    unique = {"by_args": True}
    first = insert_job_sync(django_connection, SendEmail("a"), unique_opts=unique)
    with pytest.raises(UniqueConflict):
        insert_job_sync(django_connection, SendEmail("a"), unique_opts=unique)
    with django_connection.cursor() as cursor:
        cursor.execute("SELECT id FROM awa_fast.jobs")
        assert cursor.fetchall() == [(first["id"],)]


def test_a_run_at_in_the_past_starts_scheduled_then_is_promoted(
    django_connection: Any, dsn: str
) -> None:
    """awa-pg 0.6.9's bridge: any explicit run_at starts the job scheduled."""
    earlier = datetime.now(UTC) - timedelta(minutes=5)
    row = insert_job_sync(django_connection, SendEmail("a"), run_at=earlier)
    assert (row["state"], row["run_at"]) == ("scheduled", earlier)
    assert states(dsn) == {"scheduled": 1}

    with psycopg.connect(dsn, autocommit=True) as conn:  # the promoter's pass
        assert conn.execute(Q.job_promote_due, {"limit": 10}).rowcount == 1
    with awa_fast.Client(dsn) as client:
        assert client.get_job(row["id"]).state == "available"


def test_the_async_bridge_points_a_django_connection_to_the_sync_one(
    django_connection: Any,
) -> None:
    with pytest.raises(TypeError, match="use insert_job_sync"):
        run(insert_job(django_connection, SendEmail("a")))
