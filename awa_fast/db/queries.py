"""The one binding between Python and the named SQL in ``awa_fast/db/sql``.

Each ``.sql`` file holds statements headed by ``-- name: noun_verb``. They are loaded once at
import and exposed as attributes of :data:`Q`, so a typo in a query name fails at import time
in tests rather than at run time in production.
"""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType
from typing import Final

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    queries: dict[str, str] = {}
    for entry in sorted(resources.files("awa_fast.db").joinpath("sql").iterdir(), key=str):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        parts = _NAME.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"duplicate query name {name!r} in {entry.name}")
            queries[name] = _strip_comments(body)
    return queries


def _strip_comments(body: str) -> str:
    lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).rstrip().rstrip(";")


class _Queries:
    """Attribute access to named queries: ``Q.job_claim_batch``."""

    def __init__(self, queries: dict[str, str]) -> None:
        self._queries = MappingProxyType(queries)

    def __getattr__(self, name: str) -> str:
        try:
            return self._queries[name]
        except KeyError:
            raise AttributeError(f"no named query {name!r}") from None

    def names(self) -> list[str]:
        return sorted(self._queries)


Q: Final = _Queries(_load())
