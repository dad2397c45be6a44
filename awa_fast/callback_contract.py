"""The HTTP callback contract: signing callback ids, verifying them, building receiver URLs.

A job parked on a callback is answered by an external system. When that system answers over
HTTP, through routes you host in your own web framework (FastAPI, Starlette, Flask, Django),
it proves it may do so by sending the callback id's signature in the ``X-Awa-Signature``
header; the route checks it with :func:`verify` before calling ``client.complete_external``
(or ``fail_external``, ``heartbeat_callback``). The signature is BLAKE3's keyed hash of the id
under a 32-byte shared secret, computed in the Rust core, bit-for-bit the Awa SDK's
(``awa.callback_contract``, awa-pg 0.6.9), so either side may be Awa's.

Example::

    from awa_fast import callback_contract

    secret = bytes.fromhex(os.environ["AWA_CALLBACK_HMAC_SECRET"])

    def verify(callback_id: str, signature: str) -> bool:
        return callback_contract.verify(secret, callback_id, signature)
"""

from __future__ import annotations

from awa_fast import _core
from awa_fast.errors import ValidationError
from awa_fast.types import DEFAULT_CALLBACK_TIMEOUT

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT_SECS",
    "DEFAULT_PATH_PREFIX",
    "SIGNATURE_HEADER",
    "build_callback_url",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "X-Awa-Signature"
"""The request header that carries a callback id's signature."""

DEFAULT_PATH_PREFIX = "/api/callbacks"
"""Where receiver routes live by default: ``{prefix}/{callback_id}/{action}``."""

DEFAULT_HEARTBEAT_TIMEOUT_SECS = DEFAULT_CALLBACK_TIMEOUT
"""The callback timeout a heartbeat sets when the request names none (as
``Client.heartbeat_callback``'s default)."""

_SECRET_BYTES = 32

# What Rust's str::trim strips (Unicode White_Space). Python's str.strip() would also strip
# U+001C..U+001F, and the SDK keeps those in a prefix.
_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def sign(secret: bytes, callback_id: str) -> str:
    """The signature of ``callback_id`` (64 lowercase hex digits): what a caller puts in the
    ``X-Awa-Signature`` header so a receiver holding the same ``secret`` accepts it."""
    callback_id = _text("callback_id", callback_id)
    return _core.callback_sign(_secret(secret), callback_id)


def verify(secret: bytes, callback_id: str, signature: str) -> bool:
    """Whether ``signature`` (from the ``X-Awa-Signature`` header) is ``callback_id``'s, so
    a receiver can refuse a request from anyone not holding ``secret``.

    True only for the 64 hex digits of the right signature, in either case; any other string
    is False, not an error. The comparison is constant-time, so a rejection's timing tells a
    forger nothing. A secret that is not 32 bytes is an error, never False: that is the
    receiver's bug, not a forgery.
    """
    callback_id = _text("callback_id", callback_id)
    signature = _text("signature", signature)
    secret = _secret(secret)
    if not signature.isascii():  # a lone surrogate would make the core raise, not refuse
        return False
    return _core.callback_verify(secret, callback_id, signature)


def build_callback_url(base: str, prefix: str, callback_id: str, action: str) -> str:
    """The URL an external system calls to act on a callback:
    ``{base}{prefix}/{callback_id}/{action}``, ``action`` being ``"complete"``, ``"fail"`` or
    ``"heartbeat"``.

    Slashes are normalised so a base with or without a trailing slash and a prefix with or
    without either slash all give one URL: ``base`` loses its trailing slashes, ``prefix``
    its surrounding whitespace and trailing slashes and gains a leading one (an empty or
    all-slash prefix adds nothing). ``callback_id`` and ``action`` go in as given, neither
    checked nor escaped, as the Awa SDK does.
    """
    root = _text("base", base).rstrip("/")
    path = _text("prefix", prefix).strip(_WHITESPACE).rstrip("/")
    if path and not path.startswith("/"):
        path = "/" + path
    return f"{root}{path}/{_text('callback_id', callback_id)}/{_text('action', action)}"


def _secret(secret: bytes) -> bytes:
    """``secret``, if it is the 32 bytes a signature is keyed with."""
    if not isinstance(secret, bytes):
        raise TypeError(
            f"secret: must be bytes (a hex secret decodes with bytes.fromhex), "
            f"got {type(secret).__name__}"
        )
    if len(secret) != _SECRET_BYTES:
        raise ValidationError(
            "secret", f"callback secret must be exactly {_SECRET_BYTES} bytes (got {len(secret)})"
        )
    return secret


def _text(field: str, value: str) -> str:
    """``value``, if it is a str (the SDK refuses anything else too)."""
    if not isinstance(value, str):
        raise TypeError(f"{field}: must be str, got {type(value).__name__}")
    return value
