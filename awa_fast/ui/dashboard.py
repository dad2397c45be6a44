"""What every page and action of the dashboard shares: the client its Ops run on, its
templates and their filters, the CSRF signer, and whether it may act at all."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from orjson import dumps as encode
from starlette.requests import Request
from starlette.responses import HTMLResponse

from awa_fast.admin import Op
from awa_fast.admin.ops import pretty
from awa_fast.client import AsyncClient
from awa_fast.ui.security import ACTOR, CSRF_COOKIE, Csrf, route_path, set_cookie

T = TypeVar("T")
LIVE_HEADER = "x-awa-live"  # what the page's script sends when it asks for a live region
LIVE_MS = 3000  # how often a live region refreshes


class Dashboard:
    """The dashboard's one instance per app. ``actor``, when given, names who made a
    request (an application mounting the dashboard behind its own login); else the auth
    in front of it does."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        csrf: Csrf,
        read_only: bool,
        actor: Callable[[Request], str] | None,
    ) -> None:
        self.client = client
        self.csrf = csrf
        self.read_only = read_only
        self._actor = actor
        self.templates = Environment(
            loader=PackageLoader("awa_fast.ui", "templates"),
            autoescape=True,  # every template, whatever its name
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(
            ago=ago, when=when, since=since, json=pretty, compact=lambda v: encode(v).decode()
        )

    async def run(self, op: Op[T]) -> T:
        """Run an admin Op as the clients run theirs: an action's, on the primary."""
        return await self.client.run_op(op)

    async def read(self, op: Op[T]) -> T:
        """Run a page's Op, which only reads: on the client's read URL, a standby's, if it
        has one (its counts lag the primary by the standby's replay delay)."""
        return await self.client.run_read_op(op)

    def actor(self, request: Request) -> str:
        """Who made the request; empty on the login page, before anyone has said."""
        if self._actor is not None:
            return self._actor(request)
        return request.scope.get(ACTOR) or ""

    def render(
        self, request: Request, name: str, context: dict[str, Any], *, status: int = 200
    ) -> HTMLResponse:
        """The page ``name``; only its live region (``_name_live.html``) when the page's
        script asks for it. A browser new to the dashboard gets its CSRF nonce here."""
        live = request.headers.get(LIVE_HEADER) == "1"
        template = self.templates.get_template(f"_{name}_live.html" if live else f"{name}.html")
        nonce, new = self.csrf.nonce(request)
        base = request.scope.get("root_path", "")
        here = route_path(request.scope) + (f"?{request.url.query}" if request.url.query else "")
        shared = {
            "base": base,
            "here": here,
            "page": name,
            "csrf": self.csrf.token(nonce),
            "can_act": not self.read_only,
            "read_only": self.read_only,
            "actor": self.actor(request),
            "live_ms": LIVE_MS,
            "url": lambda path, **query: link(base, path, **query),
        }
        response = HTMLResponse(template.render({**shared, **context}), status_code=status)
        response.headers["cache-control"] = "no-store"
        if new:
            set_cookie(response, request, CSRF_COOKIE, nonce)
        return response


def link(base: str, path: str, **query: object) -> str:
    """``path`` under the dashboard's mount, with the query's given values."""
    given = {k: v for k, v in query.items() if v is not None and v != ""}
    return f"{base}{path}?{urlencode(given)}" if given else f"{base}{path}"


def ago(seconds: float | None) -> str:
    """A duration as people read one at a glance: 45s, 12m, 3h, 2d."""
    if seconds is None:
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(seconds, 0):.0f}s"


def since(moment: datetime | str | None) -> str:
    """How long ago ``moment`` was, or how soon it comes (an aware datetime, or RFC 3339
    text)."""
    if moment is None:
        return "—"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    seconds = time.time() - moment.timestamp()
    return f"{ago(seconds)} ago" if seconds >= 0 else f"in {ago(-seconds)}"


def when(moment: datetime | str | None) -> str:
    """A moment in UTC to the second."""
    if moment is None:
        return "—"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
