"""insert_many's two ways to send a batch: item by item (a PreparedJob each, over COPY),
and in one statement for a batch of one args type under one set of options. The second
must take only batches the first would accept as they are (tests/db/test_producer.py
shows both store them the same)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pydantic
import pytest

from awa_fast import InsertRequest, UniqueOpts
from awa_fast.producer import _uniform_params


@dataclass
class SendEmail:
    to: str
    retries: int = 0


class Resize(msgspec.Struct):
    path: str


class Pair(msgspec.Struct, array_like=True):
    a: int


class Charge(pydantic.BaseModel):
    cents: int


UNIFORM: dict[str, tuple[list[Any], dict[str, Any]]] = {
    "dataclasses": ([SendEmail(f"{i}@example.com", i) for i in range(5)], {}),
    "structs, every option": (
        [Resize(f"/img/{i}.png") for i in range(3)],
        {
            "queue": "images",
            "priority": 1,
            "max_attempts": 3,
            "tags": ["a", "b c"],
            "metadata": {"team": "ops", "n": 1},
            "deadline": 2.5,
        },
    ),
    "dicts with a kind, options at their defaults": (
        [{"n": i, "word": 'é 🚀 "quoted" {braced}'} for i in range(4)],
        {"kind": "untyped", "priority": 2, "max_attempts": 25, "tags": [], "metadata": {}},
    ),
    "beyond 64 bits": ([{"n": 2**70 + 1}], {"kind": "big"}),
    "escapes everywhere": (
        [SendEmail("plain"), SendEmail("back\\slash"), SendEmail("line\nbreak\ttab")],
        {
            "kind": "tab\tkind",
            "queue": "new\nline",
            "metadata": {"path": "C:\\x"},
            "tags": ['say "hi"', "back\\slash"],
        },
    ),
}


@pytest.mark.parametrize("case", UNIFORM)
def test_a_batch_of_one_args_type_and_options_is_uniform(case: str) -> None:
    items, options = UNIFORM[case]
    params = _uniform_params(list(items), options)  # type: ignore[arg-type]
    assert params is not None
    assert params["args"].count("\x1e") == len(items) - 1


TAKEN_ITEM_BY_ITEM: dict[str, tuple[list[Any], dict[str, Any]]] = {
    "nothing": ([], {}),
    "more than one statement should carry": ([SendEmail("a")] * 100_001, {}),
    "two args types": ([SendEmail("a"), Resize("b")], {"kind": "k"}),
    "a request among args": ([SendEmail("a"), InsertRequest(SendEmail("b"))], {}),
    "requests only": ([InsertRequest(SendEmail("a"))], {}),
    "a struct encoded as an array": ([Pair(1)], {}),
    "a pydantic model": ([Charge(cents=1)], {}),
    "a NUL in args": ([SendEmail("a"), SendEmail("nul\x00")], {}),
    "unique": ([SendEmail("a")], {"unique": UniqueOpts()}),
    "scheduled": ([SendEmail("a")], {"run_at": datetime.now(UTC) + timedelta(hours=1)}),
    "a dict without a kind": ([{"x": 1}], {}),
    "bad options": ([SendEmail("a")], {"priority": 9}),
    "an item that cannot be encoded": ([{"x": 1}, {"x": object()}], {"kind": "k"}),
}


@pytest.mark.parametrize("case", TAKEN_ITEM_BY_ITEM)
def test_anything_else_is_left_to_item_by_item(case: str) -> None:
    items, options = TAKEN_ITEM_BY_ITEM[case]
    assert _uniform_params(list(items), options) is None  # type: ignore[arg-type]
