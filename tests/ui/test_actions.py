"""Every action of the dashboard (ui/actions.py): it asks first, with a preview count,
changing nothing; confirmed, it acts and logs who did it. Without a valid CSRF token, in
read-only mode, by GET, or with bad input, it does nothing."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

import awa_fast
from awa_fast.db.queries import Q
from awa_fast.lifecycle.schedules import periodic_job
from awa_fast.ui import BasicAuth, create_app
from awa_fast.ui.actions import ACTIONS, safe_next
from tests.admin.test_catalog import Report
from tests.factories import finish_jobs, insert_job
from tests.ui.conftest import act, ask, csrf, get

Conn = psycopg.Connection[Any]
LOGIN = {"Authorization": "Basic " + base64.b64encode(b"ops:secret").decode()}


@pytest.fixture
def ops_http(dsn: str) -> Iterator[TestClient]:
    """The dashboard behind basic auth, logged in as "ops"."""
    app = create_app(dsn, auth=BasicAuth("ops", "secret"))
    with TestClient(app, headers=LOGIN) as client:
        yield client


def _state(conn: Conn, job_id: int) -> str | None:
    row = conn.execute("SELECT state::text FROM awa_fast.jobs WHERE id = %s", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def _failed(conn: Conn, **columns: Any) -> int:
    job_id = insert_job(conn, **columns)
    finish_jobs(conn, "failed", [job_id])
    return job_id


def _dead(client: awa_fast.Client, conn: Conn, **columns: Any) -> int:
    job_id = _failed(conn, **columns)
    assert client.move_failed_to_dlq(job_id, "gave up") is not None
    return job_id


def _in_dlq(conn: Conn, job_id: int) -> bool:
    return (
        conn.execute("SELECT 1 FROM awa_fast.dlq WHERE id = %s", (job_id,)).fetchone() is not None
    )


def _snapshot(conn: Conn) -> list[Any]:
    """Everything an action may change, to show that asking changed none of it."""
    tables = ("jobs", "dlq", "queue_meta", "batch_operations", "cron_jobs")
    return [
        conn.execute(
            f"SELECT coalesce(jsonb_agg(t ORDER BY t), '[]') FROM awa_fast.{t} t"
        ).fetchone()
        for t in tables
    ]


Done = Callable[[awa_fast.Client, Conn, dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    """An action's test: what its form sends, given rows ``setup`` made; the count its
    question shows; and ``done``, which asserts what confirming it did."""

    setup: Callable[[awa_fast.Client, Conn], dict[str, Any]]
    count: int | None
    done: Done


def _ids_in(state: str | None) -> Done:
    def done(client: awa_fast.Client, conn: Conn, fields: dict[str, Any]) -> None:
        assert [_state(conn, i) for i in fields["id"]] == [state] * len(fields["id"])

    return done


def _paused(paused: bool, by: str | None) -> Done:
    def done(client: awa_fast.Client, conn: Conn, fields: dict[str, Any]) -> None:
        stat = {s.queue: s for s in client.queue_stats()}[fields["queue"]]
        assert (stat.paused, stat.paused_by) == (paused, by)

    return done


def _schedule(client: awa_fast.Client, conn: Conn) -> dict[str, Any]:
    schedule = periodic_job("nightly", "0 3 * * *", Report, Report("x"), queue="reports")
    conn.execute(Q.cron_register, schedule.params())
    return {"name": "nightly"}


def _ran_now(client: awa_fast.Client, conn: Conn, fields: dict[str, Any]) -> None:
    (job,) = client.list_jobs(queue="reports")
    assert job.metadata == {"cron_name": "nightly", "cron_run_by": "ops"}


def _batch_submitted(kind: str) -> Done:
    def done(client: awa_fast.Client, conn: Conn, fields: dict[str, Any]) -> None:
        (operation,) = client.list_batch_operations()
        assert (operation["op_kind"], operation["submitted_by"]) == (kind, "ops")
        assert operation["filter"]["queue"] == "q" and operation["state"] == "pending"

    return done


def _batch(client: awa_fast.Client, conn: Conn) -> dict[str, Any]:
    client.insert({}, kind="k", queue="q")
    return {"name": client.set_priority(1, filter={"queue": "q"})["id"]}


def _stopping(client: awa_fast.Client, conn: Conn, fields: dict[str, Any]) -> None:
    assert client.get_batch_operation(fields["name"])["state"] == "cancelling"


def _queued(client: awa_fast.Client, conn: Conn) -> dict[str, Any]:
    for _ in range(3):
        insert_job(conn, queue="q")
    return {"queue": "q"}


CASES: dict[str, Case] = {
    "retry": Case(lambda c, conn: {"id": [_failed(conn), _failed(conn)]}, 2, _ids_in("available")),
    "cancel": Case(
        lambda c, conn: {"id": [insert_job(conn), insert_job(conn, state="scheduled")]},
        2,
        _ids_in("cancelled"),
    ),
    "delete": Case(lambda c, conn: {"id": [_failed(conn), insert_job(conn)]}, 2, _ids_in(None)),
    "retry_failed": Case(
        lambda c, conn: {
            "queue": "q",
            "id_kept": _failed(conn, queue="q"),
            "id_other": _failed(conn, queue="r"),
        },
        1,
        lambda c, conn, f: (
            None
            if (_state(conn, f["id_kept"]), _state(conn, f["id_other"])) == ("available", "failed")
            else pytest.fail("retried the wrong jobs")
        ),
    ),
    "discard_failed": Case(
        lambda c, conn: {
            "kind": "k",
            "id_gone": _failed(conn, kind="k"),
            "id_kept": _failed(conn, kind="other"),
        },
        1,
        lambda c, conn, f: (
            None
            if (_state(conn, f["id_gone"]), _state(conn, f["id_kept"])) == (None, "failed")
            else pytest.fail("deleted the wrong jobs")
        ),
    ),
    "pause": Case(lambda c, conn: {"queue": "q"}, None, _paused(True, "ops")),
    "resume": Case(
        lambda c, conn: c.pause_queue("q", paused_by="x") or {"queue": "q"},
        None,
        _paused(False, None),
    ),
    "drain": Case(
        _queued,
        3,
        lambda c, conn, f: (
            None
            if {s.queue: s for s in c.queue_stats()}["q"].cancelled == 3
            else pytest.fail("not drained")
        ),
    ),
    "dlq_retry": Case(
        lambda c, conn: {"id": [_dead(c, conn), _dead(c, conn)]}, 2, _ids_in("available")
    ),
    "dlq_purge": Case(
        lambda c, conn: {"id": [_dead(c, conn)]},
        1,
        lambda c, conn, f: None if not _in_dlq(conn, f["id"][0]) else pytest.fail("kept"),
    ),
    "dlq_retry_matching": Case(
        lambda c, conn: {
            "kind": "k",
            "id_back": _dead(c, conn, kind="k"),
            "id_kept": _dead(c, conn, kind="other"),
        },
        1,
        lambda c, conn, f: (
            None
            if (_state(conn, f["id_back"]), _in_dlq(conn, f["id_kept"])) == ("available", True)
            else pytest.fail("revived the wrong jobs")
        ),
    ),
    "dlq_purge_matching": Case(
        lambda c, conn: {
            "queue": "q",
            "id_gone": _dead(c, conn, queue="q"),
            "id_kept": _dead(c, conn, queue="r"),
        },
        1,
        lambda c, conn, f: (
            None
            if (_in_dlq(conn, f["id_gone"]), _in_dlq(conn, f["id_kept"])) == (False, True)
            else pytest.fail("purged the wrong jobs")
        ),
    ),
    "run_periodic": Case(_schedule, None, _ran_now),
    "move_queue": Case(
        lambda c, conn: {**_queued(c, conn), "to_queue": "elsewhere"},
        3,
        _batch_submitted("move_queue"),
    ),
    "set_priority": Case(
        lambda c, conn: {**_queued(c, conn), "priority": "1"}, 3, _batch_submitted("set_priority")
    ),
    "batch_cancel": Case(_batch, None, _stopping),
}


def test_every_action_has_a_case() -> None:
    assert set(CASES) == set(ACTIONS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_action_asks_with_its_preview_then_acts_and_logs_who_did_it(
    name: str,
    ops_http: TestClient,
    client: awa_fast.Client,
    conn: Conn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    case = CASES[name]
    fields = case.setup(client, conn)
    form = {k: v for k, v in fields.items() if not k.startswith("id_")}  # id_*: the test's
    before = _snapshot(conn)
    question = ask(ops_http, name, **form, next="/queue?name=q")
    assert question.status_code == 200 and 'id="confirm"' in question.text
    if case.count is not None:
        assert f'id="preview-count">{case.count}<' in question.text
    assert "logged as done by ops" in question.text
    assert 'href="/queue?name=q" id="cancel"' in question.text
    assert _snapshot(conn) == before, "asking changed something"
    with caplog.at_level(logging.INFO, logger="awa_fast.ui"):
        act(ops_http, name, **form)
    case.done(client, conn, fields)
    (record,) = [r for r in caplog.records if r.name == "awa_fast.ui"]
    assert (record.actor, record.action) == ("ops", name)  # type: ignore[attr-defined]


def _posted(http: TestClient, conn: Conn, job_id: int, **kwargs: Any) -> int:
    """Post a confirmed retry of ``job_id`` as ``kwargs`` say; the status, with the job
    checked to be still failed."""
    response = http.post("/actions/retry", **kwargs)
    assert _state(conn, job_id) == "failed"
    return response.status_code


def test_an_action_without_this_browsers_valid_token_does_nothing(
    http: TestClient, conn: Conn, dsn: str
) -> None:
    job_id = _failed(conn)
    token = csrf(http)
    form = {"id": job_id, "confirm": "yes"}
    assert _posted(http, conn, job_id, data=form) == 403
    assert _posted(http, conn, job_id, data={**form, "csrf": "0" * 64}) == 403
    assert _posted(http, conn, job_id, data={**form, "csrf": token[:-1]}) == 403
    cross = {"Sec-Fetch-Site": "cross-site"}
    assert _posted(http, conn, job_id, data={**form, "csrf": token}, headers=cross) == 403
    foreign = {"Origin": "https://evil.example"}
    assert _posted(http, conn, job_id, data={**form, "csrf": token}, headers=foreign) == 403
    with TestClient(create_app(dsn)) as other:  # another browser, its own cookie
        get(other, "/")
        assert _posted(other, conn, job_id, data={**form, "csrf": token}) == 403
    assert act(http, "retry", id=job_id).startswith("Retried 1 of 1 job")


def test_actions_are_posts_only(http: TestClient, conn: Conn) -> None:
    job_id = _failed(conn)
    assert http.get(f"/actions/retry?id={job_id}&confirm=yes").status_code == 405
    assert _state(conn, job_id) == "failed"


def test_read_only_shows_no_action_and_takes_none(dsn: str, conn: Conn) -> None:
    job_id = _failed(conn, queue="q")
    with TestClient(create_app(dsn, read_only=True)) as http:
        pages = [get(http, path).text for path in ("/", "/queue?name=q", f"/jobs/{job_id}")]
        assert not any("data-action" in page for page in pages)
        assert "read-only" in pages[0]
        response = http.post("/actions/retry", data={"id": job_id, "confirm": "yes"})
        assert response.status_code == 403 and "read-only" in response.text
    assert _state(conn, job_id) == "failed"


def test_bad_input_is_answered_not_acted_on(http: TestClient, conn: Conn) -> None:
    assert ask(http, "nonsense").status_code == 404
    assert ask(http, "retry", id="12abc").status_code == 400
    assert ask(http, "retry").status_code == 400  # no job selected
    assert ask(http, "discard_failed").status_code == 400  # no kind
    assert ask(http, "batch_cancel", name="not-an-id").status_code == 400
    response = http.post(
        "/actions/run_periodic", data={"csrf": csrf(http), "confirm": "yes", "name": "none"}
    )
    assert response.status_code == 400 and "no periodic job named" in response.text


def test_back_links_stay_on_the_dashboard() -> None:
    assert safe_next("/jobs?queue=q") == "/jobs?queue=q"
    for outside in ("//evil.example/x", "https://evil.example", "/\\evil.example", None, 7):
        assert safe_next(outside) == "/"
