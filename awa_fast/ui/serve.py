"""The dashboard on its own (``awa-fast ui``): who may come in, where it listens, and the
refusal to listen beyond this machine with nobody asked who they are."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import uvicorn
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp

from awa_fast import logs
from awa_fast.errors import ConfigError
from awa_fast.ui.app import create_app
from awa_fast.ui.security import LOOPBACK_HOSTS, Auth, BasicAuth, TokenAuth, is_loopback

# Secrets come from the environment or a file, never the command line, which ps shows.
TOKEN_ENV = "AWA_FAST_UI_TOKEN"
BASIC_AUTH_ENV = "AWA_FAST_UI_BASIC_AUTH"  # USER:PASSWORD


def auth_from(
    *, token_file: str | None, basic_auth_file: str | None, environ: Mapping[str, str]
) -> Auth | None:
    """The auth the options and environment ask for: a token, basic auth, or none."""
    token = _secret(token_file) if token_file else environ.get(TOKEN_ENV)
    basic = _secret(basic_auth_file) if basic_auth_file else environ.get(BASIC_AUTH_ENV)
    if token and basic:
        raise ConfigError("give a token or basic auth, not both")
    if token:
        return TokenAuth(token)
    if basic:
        user, sep, password = basic.partition(":")
        if not (sep and user and password):
            raise ConfigError("basic auth must be USER:PASSWORD, both non-empty")
        return BasicAuth(user, password)
    return None


def _secret(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def check_binding(host: str, auth: Auth | None) -> None:
    """Refuse an address other machines reach unless requests must prove who they are."""
    if auth is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the dashboard on {host} without auth: set {TOKEN_ENV} or "
            f"{BASIC_AUTH_ENV} (or --token-file, --basic-auth-file), or bind 127.0.0.1"
        )


def app_for(
    database_url: str,
    *,
    host: str,
    auth: Auth | None,
    read_only: bool,
    read_url: str | None = None,
) -> ASGIApp:
    """The app ``awa-fast ui`` serves: without auth, to requests naming this machine
    alone (a page elsewhere may point its own name at 127.0.0.1); its pages read from
    ``read_url`` (a standby's) when one is given."""
    check_binding(host, auth)
    app = create_app(database_url, auth=auth, read_only=read_only, read_url=read_url)
    return app if auth is not None else TrustedHostMiddleware(app, list(LOOPBACK_HOSTS))


def command(
    opts: argparse.Namespace,
    *,
    database_url: Callable[[], str],
    environ: Mapping[str, str],
    read_url: str | None = None,
) -> int:
    """``awa-fast ui`` with its parsed options (awa_fast.cli); ``database_url`` is asked for once
    the options are known to be served, so that no local Postgres starts for nothing."""
    auth = auth_from(
        token_file=opts.token_file, basic_auth_file=opts.basic_auth_file, environ=environ
    )
    check_binding(opts.host, auth)
    logs.configure(fmt=opts.log_format, level="INFO")  # the actions' log lines, on stderr
    url = database_url()
    return serve(
        url, host=opts.host, port=opts.port, auth=auth, read_only=opts.read_only, read_url=read_url
    )


def serve(
    database_url: str,
    *,
    host: str,
    port: int,
    auth: Auth | None,
    read_only: bool,
    read_url: str | None = None,
) -> int:
    app = app_for(database_url, host=host, auth=auth, read_only=read_only, read_url=read_url)
    if not is_loopback(host):
        print(
            "awa-fast ui: serving plain HTTP beyond this machine; put a TLS proxy in front "
            "so that the credentials cannot be read on the way",
            file=sys.stderr,
        )
    uvicorn.run(app, host=host, port=port, lifespan="on", log_level="info")
    return 0
