"""``awa-fast ui`` (ui/serve.py): the auth it takes from the environment or a file, its
refusal to listen beyond this machine without auth, and the Host names it answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from awa_fast.cli import main
from awa_fast.errors import ConfigError
from awa_fast.ui import BasicAuth, TokenAuth
from awa_fast.ui.serve import app_for, auth_from, check_binding


def test_auth_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    none: dict[str, str] = {}
    assert auth_from(token_file=None, basic_auth_file=None, environ=none) is None
    token = auth_from(token_file=None, basic_auth_file=None, environ={"AWA_FAST_UI_TOKEN": "t"})
    assert token == TokenAuth("t")
    secret = tmp_path / "basic"
    secret.write_text("ops:pa:ss\n")
    assert auth_from(token_file=None, basic_auth_file=str(secret), environ=none) == BasicAuth(
        "ops", "pa:ss"
    )
    both = {"AWA_FAST_UI_TOKEN": "t", "AWA_FAST_UI_BASIC_AUTH": "a:b"}
    with pytest.raises(ConfigError, match="not both"):
        auth_from(token_file=None, basic_auth_file=None, environ=both)
    with pytest.raises(ConfigError, match="USER:PASSWORD"):
        auth_from(token_file=None, basic_auth_file=None, environ={"AWA_FAST_UI_BASIC_AUTH": "a"})
    with pytest.raises(ConfigError, match="cannot read"):
        auth_from(token_file=str(tmp_path / "absent"), basic_auth_file=None, environ=none)


def test_only_loopback_is_served_without_auth() -> None:
    for host in ("127.0.0.1", "::1", "localhost"):
        check_binding(host, None)
    for host in ("0.0.0.0", "::", "10.1.2.3", "dashboard.example"):
        with pytest.raises(ConfigError, match="without auth"):
            check_binding(host, None)
        check_binding(host, TokenAuth("t"))


def test_without_auth_only_requests_naming_this_machine_are_answered(dsn: str) -> None:
    app = app_for(dsn, host="127.0.0.1", auth=None, read_only=True)
    with TestClient(app, base_url="http://127.0.0.1:8080") as http:
        assert http.get("/").status_code == 200
        assert http.get("/", headers={"Host": "localhost:8080"}).status_code == 200
        assert http.get("/", headers={"Host": "rebound.example"}).status_code == 400


def test_with_auth_any_host_name_is_answered(dsn: str) -> None:
    app = app_for(dsn, host="0.0.0.0", auth=TokenAuth("t"), read_only=False)
    with TestClient(app, base_url="http://dashboard.example") as http:
        assert http.get("/", headers={"Authorization": "Bearer t"}).status_code == 200


def test_the_command_refuses_before_it_starts_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No URL given and no auth: it says so before a local Postgres would start."""
    for name in ("AWA_FAST_DATABASE_URL", "DATABASE_URL", "AWA_FAST_UI_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert main(["ui", "--host", "0.0.0.0"]) == 2
    assert "refusing to serve the dashboard on 0.0.0.0 without auth" in capsys.readouterr().err
