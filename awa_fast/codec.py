"""Job arguments: their kind, their JSON encoding, and decoding back into the handler's type.

Args may be a dataclass, a msgspec Struct, a pydantic model or a plain dict. Encoding happens
once in the producer; decoding happens in the process that runs the handler, from the raw
JSON bytes Postgres returned.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import orjson

from awa_fast import validation
from awa_fast.errors import ConfigTypeError, SerializationError, ValidationError

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

Decoder = Callable[[bytes], Any]


def kind_of(args_type: type | str) -> str:
    """Default kind from a type or its name: ``SendEmail`` → ``send_email``,
    ``HTTPPing`` → ``http_ping`` (``awa_fast.derive_kind``; the Awa SDK's takes the name)."""
    name = args_type if isinstance(args_type, str) else args_type.__name__
    return _CAMEL.sub("_", name).lower()


Encoder = Callable[[Any], bytes]


def _encode_pydantic(args: Any) -> bytes:
    return args.model_dump_json().encode()  # type: ignore[no-any-return]


def _encode_mapping(args: Any) -> bytes:
    return msgspec.json.encode(dict(args))


@functools.cache
def _encoder_for(args_type: type) -> Encoder | None:
    """How values of ``args_type`` become JSON, or None when they cannot be args; looked
    up once per type, as producers encode every job of a batch.

    Dataclasses and dicts go through msgspec, as Structs do: it writes integers of any
    size, as jsonb stores them (orjson refuses one beyond 64 bits), and what reads args
    back untyped uses :func:`decode_json`, which keeps them exact."""
    if (
        issubclass(args_type, msgspec.Struct)
        or dataclasses.is_dataclass(args_type)
        or args_type is dict
    ):
        return msgspec.json.encode
    if hasattr(args_type, "model_dump_json") and hasattr(args_type, "model_validate_json"):
        return _encode_pydantic
    if issubclass(args_type, Mapping):
        return _encode_mapping
    return None


def object_encoder(args_type: type) -> Encoder | None:
    """The encoder of ``args_type`` when every value of it encodes to a JSON object (a
    dataclass, a dict, a msgspec Struct not encoded as an array), else None: a batch of
    such args needs no per-job check that it did."""
    if issubclass(args_type, msgspec.Struct) and args_type.__struct_config__.array_like:
        return None
    encoder = _encoder_for(args_type)
    return encoder if encoder is msgspec.json.encode else None


# A NUL escape is ``\\u0000`` after an even run of backslashes: after an odd one, its
# backslash is an escaped backslash and the text holds the six characters ``\\u0000``.
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


def _plain(value: object) -> object:
    """``value`` as the dicts, lists and numbers its JSON is written from."""
    if isinstance(value, msgspec.Struct) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return msgspec.to_builtins(value)
    if hasattr(value, "model_dump"):  # a pydantic model
        return value.model_dump(mode="json")
    return value


def non_finite_at(value: object, path: str) -> str | None:
    """Where in ``value`` a NaN or an infinity is (``path``, then the keys and indexes to
    it), or None."""
    pending = [(path, value)]
    while pending:
        path, value = pending.pop()
        value = _plain(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                return path
        elif isinstance(value, Mapping):
            pending.extend((f"{path}.{key}", item) for key, item in value.items())
        elif isinstance(value, list | tuple):
            pending.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
    return None


def check_storable(field: str, encoded: bytes, value: object) -> None:
    """Refuse ``value``, encoded as ``encoded``, if Postgres cannot store it (a NUL, which
    every encoder here escapes) or would store other than it: the encoders write a NaN or
    an infinity, which JSON has not, as null. Each search runs only where a plain substring
    test finds what it looks for, as this runs for every job."""
    if b"\\u0000" in encoded and _NUL_ESCAPE.search(encoded):
        raise ValidationError(field, validation.NULL_BYTES)
    if b"null" in encoded and (path := non_finite_at(value, field)) is not None:
        raise ValidationError(path, "is NaN or infinite, which JSON cannot hold")


# What an encoder raises for a value it cannot write: not JSON-serialisable, too deep, or
# text UTF-8 cannot carry (a lone surrogate).
ENCODE_ERRORS = (TypeError, ValueError, msgspec.EncodeError, RecursionError)


def encode_args(args: object) -> bytes:
    """JSON bytes for ``args``; raises :class:`ValidationError` naming ``args`` when impossible."""
    args_type: type = type(args)
    encoder = _encoder_for(args_type)
    if encoder is None:
        raise SerializationError(
            f"must be a dataclass, msgspec Struct, pydantic model or dict, got {args_type.__name__}"
        )
    try:
        encoded = encoder(args)
    except ENCODE_ERRORS as exc:
        raise SerializationError(f"not JSON-serialisable: {exc}") from exc
    if not encoded.startswith(b"{"):
        raise SerializationError("must encode to a JSON object")
    check_storable("args", encoded, args)
    return encoded


def encode_json(field: str, value: object) -> bytes:
    """JSON bytes for a free-form field (metadata, progress); errors name ``field``."""
    try:
        encoded = orjson.dumps(value)
    except TypeError as exc:  # orjson's error for a lone surrogate too
        raise ValidationError(field, f"not JSON-serialisable: {exc}") from exc
    check_storable(field, encoded, value)
    return encoded


decode_json: Decoder = msgspec.json.Decoder().decode
"""Untyped JSON (args without a type, errors, progress) into Python values, integers of
any size kept exact (orjson would turn one beyond 64 bits into a float)."""


def trigger_of(trigger: object) -> tuple[str, Decoder]:
    """The kind a hook or follow-up is for, and how its jobs' args decode: a kind's name
    (args as plain JSON), or an args class (its kind, args decoded into it)."""
    if isinstance(trigger, str):
        return validation.name("kind", trigger), decode_json
    if not isinstance(trigger, type):
        raise ConfigTypeError(f"a trigger must be a kind's name or an args class, got {trigger!r}")
    return kind_of(trigger), decoder_for(trigger)


def decoder_for(args_type: type | None) -> Decoder:
    """A function that turns raw JSON bytes into an instance of ``args_type``; a
    :class:`ConfigTypeError` for a type it cannot decode into, as a handler, hook or
    follow-up registered for one could never run."""
    if args_type is None or args_type is dict:
        return decode_json
    if hasattr(args_type, "model_validate_json"):
        return args_type.model_validate_json  # type: ignore[no-any-return]
    if issubclass(args_type, msgspec.Struct) or dataclasses.is_dataclass(args_type):
        return msgspec.json.Decoder(args_type).decode
    raise ConfigTypeError(
        f"args type {args_type!r} must be a dataclass, msgspec Struct, pydantic model or dict"
    )
