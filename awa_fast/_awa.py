"""The Awa SDK's compiled module by its name (its ``awa._awa``), for code ported from the
SDK that reaches into it: its raw client, as ``Client`` (the SDK's name there) and as
``RawClient`` (the package's), ``derive_kind``, and the callback contract's constants and
functions by the names they have there. Each is awa-fast's own; every other
name of the SDK's module is its package's too, and here :mod:`awa_fast`'s."""

from __future__ import annotations

from awa_fast.callback_contract import (
    DEFAULT_HEARTBEAT_TIMEOUT_SECS as CALLBACK_DEFAULT_HEARTBEAT_TIMEOUT_SECS,
)
from awa_fast.callback_contract import DEFAULT_PATH_PREFIX as CALLBACK_DEFAULT_PATH_PREFIX
from awa_fast.callback_contract import SIGNATURE_HEADER as CALLBACK_SIGNATURE_HEADER
from awa_fast.callback_contract import build_callback_url
from awa_fast.callback_contract import sign as sign_callback
from awa_fast.callback_contract import verify as verify_callback
from awa_fast.codec import kind_of as derive_kind
from awa_fast.raw_client import RawClient
from awa_fast.raw_client import RawClient as Client

__all__ = [
    "CALLBACK_DEFAULT_HEARTBEAT_TIMEOUT_SECS",
    "CALLBACK_DEFAULT_PATH_PREFIX",
    "CALLBACK_SIGNATURE_HEADER",
    "Client",
    "RawClient",
    "build_callback_url",
    "derive_kind",
    "sign_callback",
    "verify_callback",
]
