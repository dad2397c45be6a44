from __future__ import annotations

from dataclasses import dataclass

import msgspec
import orjson
import psycopg
import pydantic
import pytest

from awa_fast.codec import check_storable, decoder_for, encode_args, kind_of
from awa_fast.errors import ValidationError


@dataclass
class SendEmail:
    to: str
    retries: int = 0


class HTTPPing(msgspec.Struct):
    url: str


class ResizeImage(pydantic.BaseModel):
    path: str
    width: int


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (SendEmail, "send_email"),
        (HTTPPing, "http_ping"),
        (ResizeImage, "resize_image"),
    ],
)
def test_kind_defaults_to_snake_case_of_the_type_name(cls: type, kind: str) -> None:
    assert kind_of(cls) == kind


@pytest.mark.parametrize(
    "args",
    [
        SendEmail("a@example.com", 2),
        HTTPPing("https://x"),
        ResizeImage(path="p", width=3),
        {"to": "a@example.com"},
    ],
)
def test_args_round_trip_through_their_own_type(args: object) -> None:
    encoded = encode_args(args)
    decoded = decoder_for(dict if isinstance(args, dict) else type(args))(encoded)
    assert decoded == args


def test_unserialisable_args_name_the_field() -> None:
    with pytest.raises(ValidationError) as err:
        encode_args({"when": object()})
    assert err.value.field == "args"
    assert "JSON" in str(err.value)


def test_args_that_contain_themselves_are_refused_as_args() -> None:
    looped: dict[str, object] = {}
    looped["self"] = looped
    with pytest.raises(ValidationError, match="not JSON-serialisable") as err:
        encode_args(looped)
    assert err.value.field == "args"


@pytest.mark.parametrize("args", [{"n": 2**70 + 1, "m": -(2**64) - 1}, SendEmail("a", 2**80 + 1)])
def test_integers_beyond_64_bits_come_back_exact(args: object) -> None:
    """jsonb stores any integer; args read back untyped or typed keep it (as a float, an
    odd number this large would come back even)."""
    assert decoder_for(dict if isinstance(args, dict) else type(args))(encode_args(args)) == args


def test_dataclass_and_dict_args_encode_compactly_in_field_order() -> None:
    assert encode_args(SendEmail("a@example.com", 2)) == b'{"to":"a@example.com","retries":2}'
    assert encode_args({"b": 1, "a": [1.5, None]}) == b'{"b":1,"a":[1.5,null]}'


def test_nul_in_args_is_rejected() -> None:
    with pytest.raises(ValidationError, match="args: must not contain null bytes"):
        encode_args({"s": "a\x00b"})


def test_args_must_be_an_object() -> None:
    with pytest.raises(ValidationError, match="dataclass, msgspec Struct, pydantic model or dict"):
        encode_args([1, 2])  # type: ignore[arg-type]


def test_claimed_jsonb_is_decoded_from_its_payload_and_a_new_format_is_refused() -> None:
    """Claims load jsonb as its binary payload, a version byte and then the JSON text; a
    server whose payload has another version is refused before anything is claimed."""
    from awa_fast.runtime.claimed import check_jsonb_payload, json_text

    assert json_text(b'\x01{"to": "a"}') == b'{"to": "a"}'
    check_jsonb_payload(b"\x01{}")
    with pytest.raises(psycopg.NotSupportedError, match="version 2"):
        check_jsonb_payload(b"\x02{}")


@pytest.mark.parametrize(
    ("text", "nul"),
    [
        ("\\u0000", False),  # the six characters
        ("\\\\u0000", False),
        ("x\\\\\\u0000", False),
        ("\x00", True),
        ("\\\x00", True),  # a backslash, then a NUL
        ("\\\\\x00", True),
        ("\\u0000\x00", True),
    ],
)
def test_only_a_real_nul_counts_as_one_whatever_backslashes_precede_it(
    text: str, nul: bool
) -> None:
    for encoded in (msgspec.json.encode({"s": text}), orjson.dumps([text])):
        if nul:
            with pytest.raises(ValidationError, match="null bytes"):
                check_storable("args", encoded, text)
        else:
            check_storable("args", encoded, text)
