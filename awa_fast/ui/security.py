"""Who may use the dashboard and how its actions are kept theirs: token and basic-auth
checks, the CSRF token every action's form carries, the headers every response carries,
and which addresses are this machine's alone."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Names a browser on this machine reaches a loopback-bound dashboard by. Without auth no
# other Host is served: a page elsewhere that rebinds its own name to 127.0.0.1 (DNS
# rebinding) would otherwise read the dashboard and post its forms.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")

# Scripts and styles from the dashboard's own files only, so that markup that slipped
# past escaping still runs nothing; data: for the page's empty icon.
_HEADERS = {
    b"content-security-policy": (
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    b"x-content-type-options": b"nosniff",
    b"x-frame-options": b"DENY",
    b"referrer-policy": b"same-origin",
}
SESSION_COOKIE = "awa_fast_session"
ACTOR = "awa_fast.actor"  # the scope key Guard leaves who made the request under
CSRF_COOKIE = "awa_fast_csrf"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` leaves the dashboard reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def route_path(scope: Scope) -> str:
    """The path below where the dashboard is mounted."""
    root: str = scope.get("root_path", "")
    path: str = scope["path"]
    return path[len(root) :] if root and path.startswith(root) else path


class Auth(Protocol):
    """How requests prove who they are."""

    def identify(self, request: Request) -> str | None:
        """Who made the request (the name actions are logged with), None if unproven."""
        ...

    def challenge(self, request: Request) -> Response:
        """What a request that proved nothing gets."""
        ...


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """HTTP basic auth with one user: the browser asks for it, and actions are logged
    with ``username``."""

    username: str
    password: str = field(repr=False)

    def identify(self, request: Request) -> str | None:
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        # Both compared whatever the first gives, so the time taken says nothing.
        user_ok = hmac.compare_digest(user.encode(), self.username.encode())
        password_ok = hmac.compare_digest(password.encode(), self.password.encode())
        return self.username if user_ok and password_ok else None

    def challenge(self, request: Request) -> Response:
        return PlainTextResponse(
            "authentication required",
            status_code=401,
            headers={"WWW-Authenticate": 'Basic realm="awa-fast", charset="UTF-8"'},
        )


@dataclass(frozen=True, slots=True)
class TokenAuth:
    """A shared token: sent as ``Authorization: Bearer TOKEN`` by scripts, or typed once
    into the login page by a person, whose browser then keeps a session cookie derived
    from it (the token itself is never stored there)."""

    token: str = field(repr=False)
    actor: str = "token"

    def session(self) -> str:
        """The session cookie's value: restarts keep it, a new token ends it."""
        return hmac.new(self.token.encode(), b"awa-fast ui session", hashlib.sha256).hexdigest()

    def accepts(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.token.encode())

    def identify(self, request: Request) -> str | None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.accepts(given):
            return self.actor
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return self.actor if hmac.compare_digest(cookie.encode(), self.session().encode()) else None

    def challenge(self, request: Request) -> Response:
        if request.method != "GET":
            return PlainTextResponse("authentication required", status_code=401)
        root = request.scope.get("root_path", "")
        target = quote(route_path(request.scope) + _query(request), safe="/")
        return RedirectResponse(f"{root}/login?next={target}", status_code=303)


def _query(request: Request) -> str:
    return f"?{request.url.query}" if request.url.query else ""


class Guard:
    """Every response gets the security headers; every request but the login page's and
    the static files' must prove who it is (when there is auth) and is stamped with who
    did it, in ``scope[ACTOR]``."""

    def __init__(self, app: ASGIApp, *, auth: Auth | None, anonymous: str = "anonymous") -> None:
        self.app = app
        self.auth = auth
        self.anonymous = anonymous

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS.items()]
            await send(message)

        request = Request(scope)
        actor = self.anonymous if self.auth is None else self.auth.identify(request)
        open_path = route_path(scope) == "/login" or route_path(scope).startswith("/static/")
        if actor is None and not open_path:
            assert self.auth is not None
            await self.auth.challenge(request)(scope, receive, with_headers)
            return
        scope[ACTOR] = actor
        await self.app(scope, receive, with_headers)


@dataclass(frozen=True, slots=True)
class Csrf:
    """Signed double-submit tokens: a random nonce in a cookie, and in each form the
    nonce's HMAC under a secret the page never shows, so that a value planted in the
    cookie by another site is still no token."""

    secret: bytes = field(repr=False)

    def token(self, nonce: str) -> str:
        return hmac.new(self.secret, nonce.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def nonce(request: Request) -> tuple[str, bool]:
        """The request's nonce, and whether it is new (the response must set it)."""
        given = request.cookies.get(CSRF_COOKIE)
        return (given, False) if given else (secrets.token_urlsafe(24), True)

    def valid(self, request: Request, token: str) -> bool:
        """Whether a form came from one of this dashboard's pages, in this browser."""
        nonce = request.cookies.get(CSRF_COOKIE)
        if not nonce or not token or not same_origin(request):
            return False
        return hmac.compare_digest(self.token(nonce).encode(), token.encode())


def same_origin(request: Request) -> bool:
    """False when the browser says the request came from another site."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


def set_cookie(response: Response, request: Request, name: str, value: str) -> None:
    """A cookie only the dashboard's own pages send, out of scripts' reach."""
    response.set_cookie(
        name,
        value,
        path=request.scope.get("root_path", "") or "/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
