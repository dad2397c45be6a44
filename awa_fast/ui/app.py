"""The dashboard as an ASGI application: its routes, the guard in front of them, and the
client it reads through, owned (and closed) by the app when it was given a URL."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from awa_fast.client import AsyncClient
from awa_fast.errors import AwaError, ConfigError, JobNotFound
from awa_fast.ui.actions import Actions, safe_next
from awa_fast.ui.dashboard import Dashboard
from awa_fast.ui.pages import Pages
from awa_fast.ui.security import SESSION_COOKIE, Auth, Csrf, Guard, TokenAuth, set_cookie

POOL_SIZE = 4  # connections of a client the app makes itself


def create_app(
    database: str | AsyncClient,
    *,
    auth: Auth | None = None,
    read_only: bool = False,
    actor: Callable[[Request], str] | None = None,
    secret: bytes | None = None,
    read_url: str | None = None,
) -> Starlette:
    """The dashboard. ``database`` is a URL (the app opens a small pool, closed when it
    shuts down) or an application's own ``AsyncClient``, which stays the application's to
    close. ``auth`` is :class:`~awa_fast.ui.security.BasicAuth`,
    :class:`~awa_fast.ui.security.TokenAuth` or None (the application in front of it decides
    who gets in, and ``actor`` may name them in the log). ``secret`` signs the CSRF tokens:
    give each process of one deployment the same. ``read_url``, a standby's, with a URL:
    the pages read there, the actions write to ``database`` (an application's own client
    takes its ``read_url`` itself)."""
    owned = isinstance(database, str)
    if isinstance(database, str):
        client = AsyncClient(database, max_connections=POOL_SIZE, read_url=read_url)
    elif read_url is not None:
        raise ConfigError("read_url goes with a database URL; give the client its own read_url")
    else:
        client = database
    dash = Dashboard(
        client, csrf=Csrf(secret or secrets.token_bytes(32)), read_only=read_only, actor=actor
    )
    pages, actions = Pages(dash), Actions(dash)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if owned:
            await client.close()

    async def failed(request: Request, exc: Exception) -> Response:
        status = 404 if isinstance(exc, JobNotFound) else 400
        return dash.render(request, "error", {"message": str(exc)}, status=status)

    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/queue", pages.queue),
        Route("/jobs", pages.jobs),
        Route("/jobs/{job_id:int}", pages.job),
        Route("/dlq", pages.dlq),
        Route("/periodic", pages.periodic),
        Route("/batches", pages.batches),
        Route("/actions/{name}", actions.act, methods=["POST"]),
        Route("/login", _login(dash, auth), methods=["GET", "POST"]),
        Mount("/static", StaticFiles(packages=[("awa_fast.ui", "static")])),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(Guard, auth=auth)],
        exception_handlers={AwaError: failed},
        lifespan=lifespan,
    )


def _login(dash: Dashboard, auth: Auth | None) -> Callable[[Request], object]:
    """The token's login page: a person types the token once, the browser keeps a session
    cookie. Other auth has nothing to type here."""

    async def login(request: Request) -> Response:
        back = safe_next(request.query_params.get("next"))
        if not isinstance(auth, TokenAuth):
            return RedirectResponse(request.scope.get("root_path", "") + back, status_code=303)
        if request.method == "GET":
            return dash.render(request, "login", {"back": back, "wrong": False})
        form = await request.form()
        token, given = form.get("csrf"), form.get("token")
        if not isinstance(token, str) or not dash.csrf.valid(request, token):
            return dash.render(request, "error", {"message": "stale form: reload"}, status=403)
        if not isinstance(given, str) or not auth.accepts(given):
            return dash.render(request, "login", {"back": back, "wrong": True}, status=401)
        response = RedirectResponse(request.scope.get("root_path", "") + back, status_code=303)
        set_cookie(response, request, SESSION_COOKIE, auth.session())
        return response

    return login
