"""The dashboard mounted in an application's own (ui/app.py): under a path prefix, on
the application's client, naming who acts as the application knows them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from starlette.testclient import TestClient

import awa_fast
from awa_fast.ui import create_app
from tests.ui.conftest import csrf, get


def _user(request: Request) -> str:
    return request.headers["x-user"]


def test_mounted_under_a_prefix_on_the_applications_client(
    dsn: str, client: awa_fast.Client, caplog: pytest.LogCaptureFixture
) -> None:
    own = awa_fast.AsyncClient(dsn)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await own.close()  # the application's client: the application closes it

    dashboard = create_app(own, actor=_user)
    application = Starlette(routes=[Mount("/admin/jobs", dashboard)], lifespan=lifespan)
    with TestClient(application, headers={"x-user": "kim"}) as http:
        page = get(http, "/admin/jobs/")
        assert 'href="/admin/jobs/jobs"' in page.text and 'href="/admin/jobs/dlq"' in page.text
        assert "Path=/admin/jobs" in page.headers["set-cookie"]
        assert get(http, "/admin/jobs/static/ui.js").text.startswith("// The dashboard")
        form = {"csrf": csrf(http, "/admin/jobs/jobs"), "queue": "q", "confirm": "yes"}
        with caplog.at_level(logging.INFO, logger="awa_fast.ui"):
            done = http.post("/admin/jobs/actions/pause", data={**form, "next": "/queue?name=q"})
        assert done.status_code == 200 and 'href="/admin/jobs/queue?name=q"' in done.text
    assert {s.queue: s.paused_by for s in client.queue_stats()} == {"q": "kim"}
    assert [r.actor for r in caplog.records if r.name == "awa_fast.ui"] == ["kim"]  # type: ignore[attr-defined]
