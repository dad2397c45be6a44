"""Queue and job-kind descriptors: validated when declared, upserted when a client starts
handlers, refused for a queue the client does not run, listed by both clients; refreshed
while their host runs, and deleted by the leader once nobody refreshed them for the
retention."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast import descriptors
from awa_fast.errors import ConfigError, ValidationError
from awa_fast.maintenance.service import Maintenance
from tests.helpers import await_until, leading, lock_waiters, run
from tests.maintenance.support import maintenance as build_maintenance


@dataclass
class SendEmail:
    to: str


def _client(dsn: str, **email: Any) -> awa_fast.AsyncClient:
    """A client handling SendEmail on "email" that describes the queue and the kind."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(SendEmail, queue="email")
    async def send(job: awa_fast.Job[SendEmail]) -> None:
        return None

    client.queue_descriptor("email", **email)
    client.job_kind_descriptor("send_email", display_name="Send user email", tags=["ses"])
    return client


def _start_and_stop(client: awa_fast.AsyncClient) -> None:
    async def main() -> None:
        try:
            await client.start({"email": 1})
        finally:
            await client.close()

    run(main())


def _only(rows: list[dict[str, Any]]) -> dict[str, Any]:
    [row] = rows
    return row


def test_descriptors_are_stored_at_start_and_listed_by_both_clients(
    dsn: str, client: awa_fast.Client
) -> None:
    worker = _client(
        dsn,
        display_name="Outbound email",
        description="Transactional mail",
        owner="growth@company.com",
        docs_url="https://runbook/email",
        tags=["user-facing"],
        extra={"slo_seconds": 30, "pager": {"team": "growth"}},
    )
    assert client.list_queue_descriptors() == []  # declared, not yet written
    _start_and_stop(worker)

    queue = _only(client.list_queue_descriptors())
    assert {k: v for k, v in queue.items() if not k.endswith("_at")} == {
        "queue": "email",
        "display_name": "Outbound email",
        "description": "Transactional mail",
        "owner": "growth@company.com",
        "docs_url": "https://runbook/email",
        "tags": ["user-facing"],
        "extra": {"slo_seconds": 30, "pager": {"team": "growth"}},
    }
    kind = _only(client.list_job_kind_descriptors())
    assert (kind["kind"], kind["display_name"], kind["tags"], kind["extra"]) == (
        "send_email",
        "Send user email",
        ["ses"],
        {},
    )
    assert kind["description"] is None and kind["docs_url"] is None

    async def from_async() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with awa_fast.AsyncClient(dsn) as reader:
            return await reader.list_queue_descriptors(), await reader.list_job_kind_descriptors()

    assert run(from_async()) == ([queue], [kind])


def test_a_second_start_upserts_changed_fields_and_keeps_unchanged_ones(
    dsn: str, client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    _start_and_stop(_client(dsn, description="v1", owner="growth", tags=["a"]))
    conn.execute(
        "UPDATE awa_fast.descriptors SET created_at = created_at - interval '1 hour',"
        " updated_at = updated_at - interval '1 hour', last_seen_at = last_seen_at - interval"
        " '1 hour' WHERE scope = 'queue'"
    )
    conn.execute(
        "UPDATE awa_fast.descriptors SET updated_at = updated_at - interval '1 hour',"
        " last_seen_at = last_seen_at - interval '1 hour' WHERE scope = 'kind'"
    )
    before_queue = _only(client.list_queue_descriptors())
    before_kind = _only(client.list_job_kind_descriptors())

    _start_and_stop(_client(dsn, description="v2", tags=["a", "b"]))

    queue = _only(client.list_queue_descriptors())
    assert (queue["description"], queue["owner"], queue["tags"]) == ("v2", None, ["a", "b"])
    assert queue["created_at"] == before_queue["created_at"]
    assert queue["updated_at"] > before_queue["updated_at"]
    kind = _only(client.list_job_kind_descriptors())
    assert kind["display_name"] == "Send user email"
    assert kind["updated_at"] == before_kind["updated_at"]  # unchanged definition
    assert kind["last_seen_at"] > before_kind["last_seen_at"]  # but seen again


def test_declaring_again_replaces_the_declaration(dsn: str, client: awa_fast.Client) -> None:
    worker = _client(dsn, owner="first")
    worker.queue_descriptor("email", owner="second")
    _start_and_stop(worker)
    assert _only(client.list_queue_descriptors())["owner"] == "second"


@pytest.mark.parametrize(
    ("name", "options", "field"),
    [
        ("", {}, "queue"),
        ("q" * 129, {}, "queue"),
        ("email", {"display_name": 7}, "display_name"),
        ("email", {"display_name": "d" * 201}, "display_name"),
        ("email", {"description": "d" * 2001}, "description"),
        ("email", {"owner": "nul\x00"}, "owner"),
        ("email", {"docs_url": "runbook/email"}, "docs_url"),
        ("email", {"docs_url": "https://runbook/ email"}, "docs_url"),
        ("email", {"docs_url": "https://x/" + "y" * 2048}, "docs_url"),
        ("email", {"tags": "user-facing"}, "tags"),
        ("email", {"tags": [""]}, "tags"),
        ("email", {"tags": [f"t{i}" for i in range(21)]}, "tags"),
        ("email", {"extra": ["not", "an", "object"]}, "extra"),
        ("email", {"extra": {"when": object()}}, "extra"),
        ("email", {"colour": "blue"}, "options"),
    ],
)
def test_bad_input_is_refused_when_declared_naming_the_field(
    dsn: str, name: str, options: dict[str, Any], field: str
) -> None:
    client = awa_fast.AsyncClient(dsn)
    with pytest.raises(ValidationError) as queue_error:
        client.queue_descriptor(name, **options)
    kind_field = "kind" if field == "queue" else field
    with pytest.raises(ValidationError) as kind_error:
        client.job_kind_descriptor(name, **options)
    assert (queue_error.value.field, kind_error.value.field) == (field, kind_field)
    assert client.handlers.queue_descriptors == {} and client.handlers.kind_descriptors == {}


def test_a_descriptor_of_a_queue_not_run_refuses_the_start(
    dsn: str, client: awa_fast.Client
) -> None:
    worker = _client(dsn)
    worker.queue_descriptor("billing", owner="finance")

    async def main() -> None:
        with pytest.raises(ConfigError, match=r"does not run: billing \(it runs email\)"):
            await worker.start({"email": 1})
        await worker.close()

    run(main())
    assert client.list_queue_descriptors() == []
    assert client.list_job_kind_descriptors() == []


def test_a_kind_not_handled_here_may_be_described(dsn: str, client: awa_fast.Client) -> None:
    """As in the SDK: only queues are checked; producers and other deployments own kinds
    this host does not handle."""
    worker = _client(dsn)
    worker.job_kind_descriptor("nightly_report", owner="analytics")
    _start_and_stop(worker)
    assert [row["kind"] for row in client.list_job_kind_descriptors()] == [
        "nightly_report",
        "send_email",
    ]


def test_two_hosts_starting_at_once_leave_one_row_each(dsn: str, client: awa_fast.Client) -> None:
    """Two hosts race to upsert the same descriptors: neither start fails, and each row
    holds one host's definition whole."""
    first, second = _client(dsn, owner="first"), _client(dsn, owner="second")

    async def main() -> None:
        try:
            await asyncio.gather(first.start({"email": 1}), second.start({"email": 1}))
        finally:
            await asyncio.gather(first.close(), second.close())

    run(main())
    assert _only(client.list_queue_descriptors())["owner"] in {"first", "second"}
    assert _only(client.list_job_kind_descriptors())["kind"] == "send_email"


# -- retention ---------------------------------------------------------------------------

FAST_REFRESH = {"heartbeat_interval": 0.05, "descriptor_refresh_interval": 0.05}
HOSTS_OWN = [("kind", "send_email"), ("queue", "email")]  # what _client declares


def _describe(conn: psycopg.Connection[Any], scope: str, name: str, *, age: str) -> None:
    """A descriptor some other deployment registered, last seen ``age`` ago."""
    conn.execute(
        "INSERT INTO awa_fast.descriptors (scope, name, last_seen_at)"
        " VALUES (%s, %s, now() - %s::interval)",
        (scope, name, age),
    )


def _age(conn: psycopg.Connection[Any], age: str) -> None:
    """Take the host's own descriptors back ``age``, as if it had run that long."""
    conn.execute(
        "UPDATE awa_fast.descriptors SET last_seen_at = now() - %s::interval"
        " WHERE (scope, name) IN (('kind', 'send_email'), ('queue', 'email'))",
        (age,),
    )


def _last_seen(dsn: str) -> dict[tuple[str, str], Any]:
    with psycopg.connect(dsn) as c:
        rows = c.execute("SELECT scope, name, last_seen_at FROM awa_fast.descriptors")
        return {(scope, name): seen for scope, name, seen in rows}


def _seen_within_a_minute(dsn: str) -> set[tuple[str, str]]:
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT scope, name FROM awa_fast.descriptors"
            " WHERE last_seen_at > now() - interval '1 minute'"
        )
        return {(scope, name) for scope, name in rows}


TESTS = "tests"  # the leader's holder the tests' steps run as


async def _step(maintenance: Maintenance) -> int:
    """The leader's step, under the term _hold_leadership took (or a term of its own),
    which never waits on a lock: were it to, this fails."""
    maintenance.leader.holder = TESTS
    async with (
        leading(maintenance),
        await psycopg.AsyncConnection.connect(maintenance.database.dsn, autocommit=True) as c,
    ):
        await c.execute("SET lock_timeout = '5s'")
        return await maintenance.descriptor_cleaner.run_once(c)


def _hold_leadership(conn: psycopg.Connection[Any]) -> None:
    """Keep the hosts a test starts from leading: the term is the test's, for its _step."""
    conn.execute(
        "UPDATE awa_fast.leader SET term = term + 1, holder = %s, expires_at = 'infinity'",
        (TESTS,),
    )


def test_the_leader_deletes_what_nobody_refreshed_within_retention(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """As in the SDK: a descriptor unrefreshed for the retention (30 days by default) is
    deleted; one seen within it stays, and so do a running host's, which it refreshes
    however long ago it registered them."""
    _hold_leadership(conn)
    _describe(conn, "kind", "retired_report", age="31 days")
    _describe(conn, "queue", "retired_queue", age="31 days")
    _describe(conn, "kind", "nightly_report", age="29 days")
    worker = _client(dsn)

    async def main() -> int:
        await worker.start({"email": 1}, **FAST_REFRESH)
        try:
            await asyncio.to_thread(_age, conn, "31 days")
            await await_until(
                lambda: set(HOSTS_OWN) <= _seen_within_a_minute(dsn),
                timeout=10,
                what="the running host to refresh its descriptors",
            )
            return await _step(build_maintenance(dsn))
        finally:
            await worker.close()

    assert run(main()) == 2
    assert sorted(_last_seen(dsn)) == [
        ("kind", "nightly_report"),
        ("kind", "send_email"),
        ("queue", "email"),
    ]


def test_the_leaders_periodic_cleanup_deletes_stale_descriptors(dsn: str) -> None:
    """The step runs in the leader's cleanup: a host that leads deletes a stale
    descriptor by itself, and keeps its own."""
    with psycopg.connect(dsn, autocommit=True) as c:
        _describe(c, "kind", "retired_report", age="31 days")
    worker = _client(dsn)

    async def main() -> int:
        runner = await worker.start({"email": 1})
        try:
            await await_until(
                lambda: ("kind", "retired_report") not in _last_seen(dsn),
                timeout=10,
                what="the leader to delete the stale descriptor",
            )
            return runner.maintenance.stats.descriptors_deleted
        finally:
            await worker.close()

    assert run(main()) == 1
    assert sorted(_last_seen(dsn)) == HOSTS_OWN


def test_retention_0_deletes_nothing(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """The SDK's descriptor_retention_days=0, accepted by start: retention off (a catalog
    managed elsewhere), however old a descriptor is."""
    _hold_leadership(conn)
    _describe(conn, "kind", "ancient_report", age="10 years")
    worker = _client(dsn)

    async def main() -> tuple[float, int]:
        runner = await worker.start({"email": 1}, descriptor_retention_days=0)
        try:
            await asyncio.to_thread(_age, conn, "10 years")
            retention = runner.config.descriptor_retention
            return retention, await _step(build_maintenance(dsn, descriptor_retention=retention))
        finally:
            await worker.close()

    assert run(main()) == (0, 0)
    assert run(_step(build_maintenance(dsn, descriptor_retention=0))) == 0
    assert sorted(_last_seen(dsn)) == [("kind", "ancient_report"), *HOSTS_OWN]


def test_start_takes_descriptor_retention_days_in_days(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """descriptor_retention_days=1 at start: a day-and-a-bit-old descriptor goes, a
    day-less-a-bit-old one stays; None keeps the 30 days."""
    _describe(conn, "kind", "older", age="25 hours")
    _describe(conn, "kind", "newer", age="23 hours")

    async def main(**options: Any) -> tuple[float, int]:
        _hold_leadership(conn)  # again: the last _step ended the term
        worker = _client(dsn)
        runner = await worker.start({"email": 1}, **options)
        try:
            retention = runner.config.descriptor_retention
            return retention, await _step(build_maintenance(dsn, descriptor_retention=retention))
        finally:
            await worker.close()

    assert run(main(descriptor_retention_days=None)) == (30 * 86400.0, 0)
    assert run(main(descriptor_retention_days=1)) == (86400.0, 1)
    assert ("kind", "older") not in _last_seen(dsn) and ("kind", "newer") in _last_seen(dsn)


def test_a_running_host_refreshes_its_own_descriptors_only(
    dsn: str, conn: psycopg.Connection[Any], client: awa_fast.Client
) -> None:
    """last_seen_at moves for what the host declared (updated_at does not: the definition
    did not change); another deployment's descriptor is left to that deployment."""
    _describe(conn, "kind", "billing_export", age="1 hour")
    worker = _client(dsn)

    async def main() -> None:
        await worker.start({"email": 1}, **FAST_REFRESH)
        try:
            await asyncio.to_thread(_age, conn, "1 hour")
            await await_until(
                lambda: set(HOSTS_OWN) <= _seen_within_a_minute(dsn),
                timeout=10,
                what="the running host to refresh its descriptors",
            )
        finally:
            await worker.close()

    [before] = client.list_job_kind_descriptors()
    run(main())
    assert ("kind", "billing_export") not in _seen_within_a_minute(dsn)
    kinds = {row["kind"]: row for row in client.list_job_kind_descriptors()}
    assert kinds["billing_export"] == before
    mine = kinds["send_email"]
    assert mine["updated_at"] == mine["created_at"] < mine["last_seen_at"]


# -- races: a host's refresh or registration against the leader's delete ------------------


def test_the_leader_skips_a_descriptor_a_host_is_refreshing(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A stale row a host is refreshing (its transaction open) is skipped, not waited
    for, and stays once the refresh commits."""
    _describe(conn, "kind", "send_email", age="31 days")
    mine = [descriptors.descriptor("kind", "send_email")]

    async def main() -> tuple[int, int, int]:
        async with await psycopg.AsyncConnection.connect(dsn) as host:
            refreshed = await descriptors.refresh(host, mine)
            deleted_meanwhile = await _step(build_maintenance(dsn))
            await host.commit()
        return refreshed, deleted_meanwhile, await _step(build_maintenance(dsn))

    assert run(main()) == (1, 0, 0)
    assert _seen_within_a_minute(dsn) == {("kind", "send_email")}


def test_a_refresh_skips_a_descriptor_the_leader_is_deleting(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A host refreshing while the leader deletes its stale row (the leader's transaction
    open) does not wait, and two hosts refreshing the same rows cannot deadlock: a row
    another session holds is skipped."""
    _describe(conn, "kind", "send_email", age="31 days")
    mine = [descriptors.descriptor("kind", "send_email")]

    async def main() -> tuple[int, int]:
        async with (
            leading(build_maintenance(dsn)) as maintenance,
            await psycopg.AsyncConnection.connect(dsn) as leader,
        ):
            await leader.execute("SELECT 1")  # the transaction held open over the delete
            deleted = await maintenance.descriptor_cleaner.run_once(leader)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as host:
                await host.execute("SET lock_timeout = '5s'")
                refreshed = await descriptors.refresh(host, mine)
            await leader.commit()
        return deleted, refreshed

    assert run(main()) == (1, 0)
    assert _last_seen(dsn) == {}


def test_a_host_starting_while_the_leader_deletes_its_stale_descriptors_keeps_them(
    dsn: str, conn: psycopg.Connection[Any], client: awa_fast.Client
) -> None:
    """Registration waits for the delete, then writes the descriptors afresh: a host
    that starts as the leader takes its old rows for abandoned loses nothing."""
    _describe(conn, "queue", "email", age="31 days")
    _describe(conn, "kind", "send_email", age="31 days")
    worker = _client(dsn, owner="growth")

    async def main() -> int:
        try:
            async with (
                leading(build_maintenance(dsn)) as maintenance,
                await psycopg.AsyncConnection.connect(dsn) as leader,
            ):
                await leader.execute("SELECT 1")  # the transaction held open over the delete
                deleted = await maintenance.descriptor_cleaner.run_once(leader)
                start = asyncio.create_task(worker.start({"email": 1}))
                await await_until(
                    lambda: lock_waiters(dsn) > 0,
                    timeout=10,
                    what="the registration to wait on the delete",
                )
                await leader.commit()
                await start
        finally:
            await worker.close()
        return deleted

    assert run(main()) == 2
    assert _seen_within_a_minute(dsn) == set(HOSTS_OWN)
    assert _only(client.list_queue_descriptors())["owner"] == "growth"
