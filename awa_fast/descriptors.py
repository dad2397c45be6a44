"""Queue and job-kind descriptors: metadata declared in code (``client.queue_descriptor``,
``client.job_kind_descriptor``) so that whoever reads the catalog learns what a queue or
kind is for, who owns it and where its runbook is, without reading the worker source.

A descriptor is validated when it is declared, so bad input fails at the call that gave it.
Each host that runs handlers upserts its descriptors when it starts, on the connection that
registers the host (:meth:`awa_fast.runtime.runner.Runner._register`). As in the
Awa SDK, a queue descriptor must name a queue the host runs (:func:`check_queues`); a kind
descriptor may name any kind, since producers and other deployments use kinds this host
does not handle.

As in the SDK, descriptors of code no longer deployed do not stay forever: while a host
runs it refreshes its descriptors' last_seen_at (:func:`refresh`, on its heartbeat
connection), and the maintenance leader deletes those nobody refreshed within
``RunnerConfig.descriptor_retention`` (:func:`delete_stale`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit

import psycopg

from awa_fast import validation
from awa_fast.codec import encode_json
from awa_fast.db.queries import Q
from awa_fast.errors import ConfigError, ValidationError

# The Awa SDK's catalog bounds (its CHECK constraints), so that what one accepts the other
# stores too: operator-facing strings are bounded to keep admin views predictable.
MAX_LABEL_LENGTH = 200  # display_name, owner
MAX_DESCRIPTION_LENGTH = 2000
MAX_DOCS_URL_LENGTH = 2048
MAX_TAGS = 20


class DescriptorOptions(TypedDict, total=False):
    """Keyword options of ``client.queue_descriptor`` / ``client.job_kind_descriptor``
    (the Awa SDK's)."""

    display_name: str | None
    description: str | None
    owner: str | None
    docs_url: str | None
    tags: list[str] | None
    extra: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Descriptor:
    """A validated descriptor of the queue or kind ``name`` (``scope``: "queue" or
    "kind"): the row descriptor_register writes."""

    scope: str
    name: str
    display_name: str | None
    description: str | None
    owner: str | None
    docs_url: str | None
    tags: tuple[str, ...]
    extra: str  # JSON text of an object

    def params(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "name": self.name,
            "display_name": self.display_name,
            "description": self.description,
            "owner": self.owner,
            "docs_url": self.docs_url,
            "tags": list(self.tags),
            "extra": self.extra,
        }


def descriptor(field: str, name: str, **options: Unpack[DescriptorOptions]) -> Descriptor:
    """Validate a descriptor of the queue or kind ``name`` (``field``, "queue" or "kind",
    says which, and names it in errors); raises :class:`ValidationError` naming the field
    at fault."""
    unknown = options.keys() - DescriptorOptions.__annotations__.keys()
    if unknown:
        raise ValidationError("options", f"unknown option(s) {', '.join(sorted(unknown))}")
    return Descriptor(
        scope=field,
        name=validation.name(field, name),
        display_name=_text("display_name", options.get("display_name"), MAX_LABEL_LENGTH),
        description=_text("description", options.get("description"), MAX_DESCRIPTION_LENGTH),
        owner=_text("owner", options.get("owner"), MAX_LABEL_LENGTH),
        docs_url=_docs_url(options.get("docs_url")),
        tags=_tags(options.get("tags")),
        extra=_extra(options.get("extra")),
    )


def _text(field: str, value: object, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise ValidationError(field, f"must be at most {limit} characters, got {len(value)}")
    return validation.storable_text(field, value)


def _docs_url(value: object) -> str | None:
    """An absolute URL (a scheme and a host), which admin views can link to."""
    url = _text("docs_url", value, MAX_DOCS_URL_LENGTH)
    if url is None:
        return None
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc or any(c.isspace() for c in url):
        raise ValidationError(
            "docs_url", f"must be an absolute URL like https://host/path, got {url!r}"
        )
    return url


def _tags(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValidationError("tags", f"must be a list of strings, got {type(value).__name__}")
    if len(value) > MAX_TAGS:
        raise ValidationError("tags", f"must hold at most {MAX_TAGS} tags, got {len(value)}")
    return tuple(validation.name("tags", tag) for tag in value)


def _extra(value: object) -> str:
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise ValidationError(
            "extra", f"must be a JSON object (a dict), got {type(value).__name__}"
        )
    return encode_json("extra", value).decode()


def check_queues(descriptors: Mapping[str, Descriptor], queues: Collection[str]) -> None:
    """Refuse descriptors of queues this host does not run (the Awa SDK's rule: a host
    describes what it serves, so two deployments cannot fight over a queue neither owns)."""
    stray = sorted(set(descriptors) - set(queues))
    if stray:
        raise ConfigError(
            f"queue descriptor declared for queue(s) this client does not run: "
            f"{', '.join(stray)} (it runs {', '.join(sorted(queues))})"
        )


async def register(
    conn: psycopg.AsyncConnection[Any],
    *,
    queues: Collection[Descriptor],
    kinds: Collection[Descriptor],
) -> None:
    """Upsert the descriptors (a changed one takes its new definition)."""
    async with conn.cursor() as cur:
        await cur.executemany(Q.descriptor_register, [d.params() for d in [*queues, *kinds]])


async def refresh(conn: psycopg.AsyncConnection[Any], mine: Collection[Descriptor]) -> int:
    """Mark this host's descriptors ``mine`` seen now, in one statement; returns how many
    rows it moved (a row another connection holds is being seen or deleted by it, and is
    skipped; one deleted meanwhile comes back when its host next starts)."""
    if not mine:
        return 0
    cur = await conn.execute(
        Q.descriptor_refresh_many,
        {"scopes": [d.scope for d in mine], "names": [d.name for d in mine]},
    )
    return cur.rowcount


async def delete_stale(conn: psycopg.AsyncConnection[Any], *, retention: float) -> int:
    """Delete the descriptors no host registered or refreshed in the last ``retention``
    seconds; returns how many."""
    cur = await conn.execute(Q.descriptor_delete_stale, {"retention_s": retention})
    return cur.rowcount
