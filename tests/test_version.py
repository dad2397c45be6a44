"""One version: Cargo.toml's, which maturin gives the package and the CLI shows."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import awa_fast
from awa_fast.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_cargos_and_pyproject_has_none_of_its_own() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    assert awa_fast.__version__ == cargo


def test_the_cli_shows_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"awa-fast {awa_fast.__version__}\n"
