"""The one binding between Python and the named SQL in ``awa_fast/db/sql``.

Each ``.sql`` file holds statements headed by ``-- name: noun_verb``. They are loaded once at
import and exposed as attributes of :data:`Q`, so a typo in a query name fails at import time
in tests rather than at run time in production.

A clause two statements share is written once, headed by ``-- fragment: name``, and stands
in each of them as a line ``-- include: name``; a fragment may include another.
"""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType
from typing import Final

_HEADING = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^\s*-- include: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for entry in sorted(resources.files("awa_fast.db").joinpath("sql").iterdir(), key=str):
        if not entry.name.endswith(".sql"):
            continue
        parts = _HEADING.split(entry.read_text(encoding="utf-8"))
        for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            found = queries if kind == "name" else fragments
            if name in found:
                raise RuntimeError(f"duplicate {kind} {name!r} in {entry.name}")
            found[name] = body
    return {name: _strip_comments(_included(body, fragments)) for name, body in queries.items()}


def _included(body: str, fragments: dict[str, str]) -> str:
    def fragment(match: re.Match[str]) -> str:
        try:
            return _strip_comments(_included(fragments[match[1]], fragments))
        except KeyError:
            raise RuntimeError(f"no SQL fragment {match[1]!r} to include") from None

    return _INCLUDE.sub(fragment, body)


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
