"""Who gets in and what a page can be made to run (ui/security.py): basic and token auth,
the login page, the headers on every response, and hostile names and values in every
place a page shows them, escaped."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

import awa_fast
from awa_fast.db.queries import Q
from awa_fast.ui import BasicAuth, TokenAuth, create_app
from awa_fast.ui.security import SESSION_COOKIE, is_loopback
from tests.factories import finish_jobs, insert_followup, insert_job
from tests.ui.conftest import ask, csrf, get

TOKEN = "t0ken-with-enough-entropy"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def basic(dsn: str) -> Iterator[TestClient]:
    with TestClient(create_app(dsn, auth=BasicAuth("ops", "pw"))) as client:
        yield client


@pytest.fixture
def token(dsn: str) -> Iterator[TestClient]:
    with TestClient(create_app(dsn, auth=TokenAuth(TOKEN)), follow_redirects=False) as client:
        yield client


def test_basic_auth_asks_the_browser_and_lets_the_right_user_in(basic: TestClient) -> None:
    asked = basic.get("/")
    assert asked.status_code == 401 and asked.headers["www-authenticate"].startswith("Basic")
    assert basic.get("/", headers=_basic("ops", "wrong")).status_code == 401
    assert basic.get("/", headers=_basic("root", "pw")).status_code == 401
    assert basic.get("/", headers={"Authorization": "Basic !!"}).status_code == 401
    page = basic.get("/", headers=_basic("ops", "pw"))
    assert page.status_code == 200
    assert re.search(r'<span class="who">\s*ops\s*</span>', page.text)
    assert basic.post("/actions/pause", data={"queue": "q"}).status_code == 401
    assert basic.get("/static/ui.css").status_code == 200  # the login page's styles
    assert "pw" not in repr(BasicAuth("ops", "pw"))


def test_token_auth_takes_a_bearer_header_or_a_login(token: TestClient) -> None:
    first = token.get("/jobs?queue=q")
    assert first.status_code == 303
    assert first.headers["location"] == "/login?next=/jobs%3Fqueue%3Dq"
    assert token.post("/actions/pause", data={"queue": "q"}).status_code == 401
    bearer = token.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 200
    login = get(token, "/login?next=/jobs%3Fqueue%3Dq")
    form = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert form is not None
    wrong = token.post("/login?next=/jobs", data={"csrf": form.group(1), "token": "guess"})
    assert wrong.status_code == 401 and "not the token" in wrong.text
    assert token.post("/login", data={"token": TOKEN}).status_code == 403  # no CSRF token
    right = token.post("/login?next=/jobs?queue=q", data={"csrf": form.group(1), "token": TOKEN})
    assert right.status_code == 303 and right.headers["location"] == "/jobs?queue=q"
    assert TOKEN not in right.headers["set-cookie"]
    assert token.cookies.get(SESSION_COOKIE)
    assert get(token, "/jobs?queue=q").status_code == 200  # the session cookie
    assert "t0ken" not in repr(TokenAuth(TOKEN))


def test_the_login_page_of_other_auth_sends_the_browser_on(basic: TestClient) -> None:
    answer = basic.get("/login?next=/dlq", follow_redirects=False)
    assert (answer.status_code, answer.headers["location"]) == (303, "/dlq")


def test_every_response_carries_the_security_headers(basic: TestClient) -> None:
    for response in (basic.get("/"), basic.get("/", headers=_basic("ops", "pw"))):
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"


def test_loopback_addresses() -> None:
    assert all(map(is_loopback, ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "::", "10.0.0.2", "example.com", "")))


HOSTILE = '<script>alert("x")</script>'
ATTRIBUTE = '"><img src=x onerror=alert(1)>'


def _hostile_everywhere(client: awa_fast.Client, conn: psycopg.Connection[Any]) -> int:
    """A failed job whose every field a page shows is hostile, a dead one, a schedule, a
    batch operation, a host and a paused queue, all named likewise; the failed job's id."""
    name = HOSTILE + ATTRIBUTE
    job = client.insert(
        {"html": HOSTILE, "attr": ATTRIBUTE},
        kind=name,
        queue=name,
        tags=[name],
        metadata={"note": HOSTILE},
    )
    errors = [
        {
            "error": HOSTILE,
            "attempt": 1,
            "at": "2026-01-01T00:00:00+00:00",
            "traceback": f"Traceback:\n  {ATTRIBUTE}\n{HOSTILE}",
        }
    ]
    finish_jobs(conn, "failed", [job.id], errors=errors, progress={"step": HOSTILE})
    insert_followup(conn, job.id, kind=name, queue=name, tags=[name])  # listed on its page
    dead = client.insert({"x": HOSTILE}, kind=name, queue=name)
    finish_jobs(conn, "failed", [dead.id])
    client.move_failed_to_dlq(dead.id, HOSTILE)
    conn.execute(
        Q.cron_register,
        {
            "name": name,
            "cron_expr": "0 3 * * *",
            "timezone": "UTC",
            "kind": name,
            "queue": name,
            "args": '{"x": "<script>"}',
            "priority": 2,
            "max_attempts": 3,
            "tags": [name],
            "metadata": "{}",
            "missed_fire_policy": "coalesce",
        },
    )
    client.insert({}, kind=name, queue=name)
    client.set_priority(1, filter={"queue": name}, submitted_by=name)
    conn.execute(Q.host_register, {"name": name, "queues": Jsonb({})})
    client.pause_queue(name, paused_by=name)
    insert_job(conn, kind=name, queue=name, state="running")
    return job.id


def test_hostile_names_and_values_are_shown_escaped_on_every_page(
    http: TestClient, client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    job_id = _hostile_everywhere(client, conn)
    name = HOSTILE + ATTRIBUTE
    pages = {
        path: get(http, path, params=params).text
        for path, params in (
            ("/", {}),
            ("/", {"range": "15m"}),
            ("/queue", {"name": name}),
            ("/jobs", {}),
            ("/jobs", {"kind": name, "queue": name, "tag": name, "q": HOSTILE}),
            (f"/jobs/{job_id}", {}),
            ("/dlq", {"kind": name}),
            ("/periodic", {}),
            ("/batches", {}),
        )
    }
    pages["confirm"] = ask(http, "retry_failed", kind=name, queue=name).text
    pages["error"] = ask(http, "run_periodic", name=name + "!", confirm="yes").text
    for where, html in pages.items():
        assert "<script>alert" not in html and "<img src=x" not in html, where
        assert html.count("<script") == 1, where  # the dashboard's own
        assert "&lt;script&gt;" in html, f"{where} does not show the hostile value at all"


def test_a_hostile_value_in_a_form_field_comes_back_escaped(http: TestClient) -> None:
    token = csrf(http)
    answer = http.post("/actions/pause", data={"csrf": token, "queue": HOSTILE, "next": ATTRIBUTE})
    assert answer.status_code == 200
    assert "<script>alert" not in answer.text and "<img src=x" not in answer.text
    assert 'href="/" id="cancel"' in answer.text  # a "next" that is no path goes home
