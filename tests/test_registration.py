"""A handler that could never run is refused when it is registered, with an error naming
what is wrong. Before, each was taken and failed later: a kind no job can have, a queue
name Postgres cannot store, a handler that was not callable or took other arguments than
the job (which failed every attempt of its kind), or an args type that was no class (an
AttributeError)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import pytest

import awa_fast


@dataclass
class Resize:
    width: int


async def handle(job: awa_fast.Job[Resize]) -> None:
    return None


async def handle_with(job: awa_fast.Job[Resize], size: int) -> None:
    return None


@pytest.mark.parametrize(
    ("register", "error", "message"),
    [
        (
            lambda c: c.task(5)(handle),
            awa_fast.ConfigError,
            "args_type must be a class, got 5",
        ),
        (
            lambda c: c.task(set, kind="sets")(handle),
            awa_fast.ConfigError,
            "must be a dataclass, msgspec Struct, pydantic model or dict",
        ),
        (lambda c: c.task(Resize, kind="")(handle), awa_fast.ValidationError, "kind: must be"),
        (
            lambda c: c.task(Resize, queue="a\x00b")(handle),
            awa_fast.ValidationError,
            "queue: must not contain null bytes",
        ),
        (
            lambda c: c.task(Resize)(5),
            awa_fast.ConfigError,
            "the handler of kind 'resize' must be callable, got 5",
        ),
        (
            lambda c: c.task(Resize)(lambda: None),
            awa_fast.ConfigError,
            "the handler of kind 'resize' must take the job as its one argument",
        ),
        (
            lambda c: c.task(Resize)(handle_with),
            awa_fast.ConfigError,
            "must take the job as its one argument: missing a required argument: 'size'",
        ),
    ],
)
def test_a_handler_that_could_never_run_is_refused(
    dsn: str, register: Any, error: type[Exception], message: str
) -> None:
    client = awa_fast.Client(dsn)
    try:
        with pytest.raises(error, match=message):
            register(client)
        assert client.handlers.registry.handlers == {}
    finally:
        client.close()


@pytest.mark.parametrize(
    ("register", "message"),
    [
        (lambda c: c.on_event(Resize, 5), "the hook for kind 'resize' must be callable, got 5"),
        (
            lambda c: c.on_event(5, print),
            "a trigger must be a kind's name or an args class, got 5",
        ),
        (
            lambda c: c.on_completed_enqueue(set, lambda job, ctx: None),
            "must be a dataclass, msgspec Struct, pydantic model or dict",
        ),
        (lambda c: c.on_retried_enqueue("", lambda job, ctx: None), "kind: must be"),
    ],
)
def test_a_hook_or_follow_up_that_could_never_run_is_refused(
    dsn: str, register: Any, message: str
) -> None:
    """Before, a hook that was not callable failed on the hook thread at every event, and
    a trigger that was neither a kind nor an args class raised an AttributeError."""
    client = awa_fast.Client(dsn)
    try:
        with pytest.raises(awa_fast.AwaError, match=message):
            register(client)
        assert not client.handlers.hooks.hooks and not client.handlers.followups
    finally:
        client.close()


def test_handlers_of_every_runnable_shape_are_taken(dsn: str) -> None:
    """Optional arguments after the job, a partial and a callable object all run."""

    class Thumbnail:
        def __call__(self, job: awa_fast.Job[Any]) -> None:
            return None

    async def with_options(job: awa_fast.Job[Resize], *, quality: int = 80) -> None:
        return None

    client = awa_fast.Client(dsn)
    try:
        client.task(Resize)(with_options)
        client.task(kind="sized")(functools.partial(handle_with, size=3))
        client.task(kind="thumbnail")(Thumbnail())
        assert sorted(client.handlers.registry.handlers) == ["resize", "sized", "thumbnail"]
    finally:
        client.close()
