"""Queue and job-kind descriptors: validated when declared, upserted when a client starts
handlers, refused for a queue the client does not run, listed by both clients."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_fast
from awa_fast.errors import ConfigError, ValidationError
from tests.helpers import run


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
