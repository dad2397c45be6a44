"""The README's Python examples run, in order, against a real database."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture
def readme_module() -> Iterator[types.ModuleType]:
    """A real module to run the examples in (dataclasses look their module up)."""
    module = types.ModuleType("readme_examples")
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_readme_examples_run(dsn: str, readme_module: types.ModuleType) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert len(blocks) >= 4
    readme_module.DATABASE_URL = dsn  # type: ignore[attr-defined]
    for block in blocks:
        exec(compile(block, str(README), "exec"), readme_module.__dict__)
    # The quick start's job, then the port's: its queue also runs the job the admin
    # example left available.
    sent = readme_module.sent  # type: ignore[attr-defined]
    assert sent[0] == "ada@example.com"
    assert sorted(sent[1:]) == ["bob@example.com", "dee@example.com"]
