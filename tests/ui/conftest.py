"""The dashboard under test: its app on a fresh database, driven over HTTP by Starlette's
test client, and the helpers that post its actions as a browser would."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from awa_fast.ui import create_app

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def http(dsn: str) -> Iterator[TestClient]:
    """The dashboard with no auth, as ``awa-fast ui`` serves it on loopback."""
    with TestClient(create_app(dsn)) as client:
        yield client


def csrf(http: TestClient, page: str = "/jobs") -> str:
    """The CSRF token a page's forms carry (the page also sets its cookie): the jobs
    list always has one, its selection's."""
    found = _CSRF.search(get(http, page).text)
    assert found is not None, "the page has no form"
    return found.group(1)


def get(http: TestClient, path: str, **kwargs: Any) -> httpx2.Response:
    response = http.get(path, **kwargs)
    assert response.status_code == 200, response.text
    return response


def ask(http: TestClient, action: str, **fields: Any) -> httpx2.Response:
    """Post an action unconfirmed: the question it asks, having changed nothing."""
    return http.post(f"/actions/{action}", data={"csrf": csrf(http), **fields})


def act(http: TestClient, action: str, **fields: Any) -> str:
    """Post an action confirmed, as its question's button does; the result it reports."""
    response = http.post(
        f"/actions/{action}", data={"csrf": csrf(http), "confirm": "yes", **fields}
    )
    assert response.status_code == 200, response.text
    found = re.search(r'<h1 id="result">(.*?)</h1>', response.text, re.DOTALL)
    assert found is not None, response.text
    return found.group(1)
