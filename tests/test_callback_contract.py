"""awa_fast.callback_contract signs, verifies and builds receiver URLs as the Awa SDK's
awa.callback_contract does, and a receiver built on it completes a parked job only for a
request signed with the shared secret.

Every expected value here came from running awa-pg 0.6.9's awa.callback_contract."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

import awa_fast
from awa_fast import WaitForCallback, _core, callback_contract
from awa_fast.callback_contract import (
    DEFAULT_PATH_PREFIX,
    SIGNATURE_HEADER,
    build_callback_url,
    sign,
    verify,
)
from tests.helpers import job, run, run_until

COUNTING = bytes(range(32))
ABC = "6da54495d8152f2bcba87bd7282df70901cdb66b4448ed5f4c7bd2852b8b5532"
UUID = "0190b2f0-8c1e-7a3e-9b5d-2f6c1a4e8d90"


def test_the_module_has_the_sdks_names_and_constants() -> None:
    assert "callback_contract" in awa_fast.__all__
    assert callback_contract.__all__ == [
        "DEFAULT_HEARTBEAT_TIMEOUT_SECS",
        "DEFAULT_PATH_PREFIX",
        "SIGNATURE_HEADER",
        "build_callback_url",
        "sign",
        "verify",
    ]
    assert SIGNATURE_HEADER == "X-Awa-Signature"
    assert DEFAULT_PATH_PREFIX == "/api/callbacks"
    heartbeat = callback_contract.DEFAULT_HEARTBEAT_TIMEOUT_SECS
    assert heartbeat == 3600.0 and isinstance(heartbeat, float)


# From awa-pg 0.6.9: awa.callback_contract.sign(secret, callback_id).
@pytest.mark.parametrize(
    ("secret", "callback_id", "signature"),
    [
        (COUNTING, "abc", ABC),
        (COUNTING, "", "73492b19995d71cdb1e9d74decc09809eb732f1b00bc95c27cb15f9dd4d6478f"),
        (bytes(32), "abc", "a77fc933cbb22a3738a01105ab6ec3c183b0eb0e582311f7881dd3bb8393ffa5"),
        (b"\xff" * 32, "abc", "e0e7a3a97c7dd38fb69c860d971ec88c8b8453c1542b82a4218e1496266a554f"),
        (
            bytes(31) + b"\x01",
            "abc",
            "ece1bd5459e149197c05cb59b33250f0f3040d197ceda5a1ad315b8e1274f906",
        ),
        (COUNTING, UUID, "e1b2fbaa40b68372adb4438693216e18b13cb8a8ec07f94cfb3ecfe5c54b323b"),
        (
            bytes(range(32, 64)),
            UUID,
            "2a43ec96a46173f408a883d5b3a9ca8a255d205b8cb98fdb3168ce1d2a4b19b1",
        ),
        (
            COUNTING,
            "héllo-✓-😀",
            "c53d58580287e8bb0ac28d5220a1276dac7dbece6120dc96ab97ac8c0cf7fe39",
        ),
        (COUNTING, "a\x00b", "2e8b23914b4e8d338bcd601dbfe95349d4c5d12b991d651f7b0ddbe0c35b594f"),
        (COUNTING, "x" * 5000, "7675a4b9d2354d9594c2f73aede2af36330b0c2ca3f8cf586651b739477afca3"),
    ],
)
def test_sign_gives_the_sdks_signature(secret: bytes, callback_id: str, signature: str) -> None:
    assert sign(secret, callback_id) == signature
    assert verify(secret, callback_id, signature)


def test_verify_accepts_the_signature_in_upper_or_mixed_case() -> None:
    assert verify(COUNTING, "abc", ABC.upper())
    assert verify(COUNTING, "abc", ABC[:10].upper() + ABC[10:])


# awa-pg 0.6.9 returned False (never raised) for each of these.
@pytest.mark.parametrize(
    "signature",
    [
        "",
        ABC[:-1],
        ABC[:-2],
        ABC + "00",
        "zz" + ABC[2:],
        " " + ABC,
        ABC + "\n",
        "0x" + ABC,
        "0" * 64,
        "é" * 64,
        ABC[:-1] + "\uff10",  # a fullwidth digit: a digit to str.isdigit, not hex
        ABC[:-1] + "\ud800",  # a lone surrogate, which UTF-8 cannot carry
    ],
)
def test_verify_rejects_a_malformed_or_wrong_signature(signature: str) -> None:
    assert verify(COUNTING, "abc", signature) is False


def test_verify_rejects_the_signature_of_another_id_or_secret() -> None:
    assert verify(COUNTING, "abd", ABC) is False
    assert verify(bytes(32), "abc", ABC) is False


@pytest.mark.parametrize("length", [0, 16, 31, 33, 64])
def test_a_secret_of_another_length_is_refused_by_sign_and_verify(length: int) -> None:
    for call in (lambda: sign(bytes(length), "abc"), lambda: verify(bytes(length), "abc", ABC)):
        with pytest.raises(awa_fast.ValidationError) as err:
            call()
        assert isinstance(err.value, ValueError)  # the SDK raises ValueError
        assert err.value.field == "secret"
        assert err.value.message == f"callback secret must be exactly 32 bytes (got {length})"


@pytest.mark.parametrize(
    ("function", "args", "message"),
    [
        (sign, (COUNTING.hex(), "abc"), "secret: must be bytes"),
        (sign, (bytearray(COUNTING), "abc"), "secret: must be bytes"),
        (sign, (None, "abc"), "secret: must be bytes"),
        (sign, (COUNTING, b"abc"), "callback_id: must be str, got bytes"),
        (verify, (COUNTING, 5, ABC), "callback_id: must be str, got int"),
        (verify, (COUNTING, "abc", ABC.encode()), "signature: must be str, got bytes"),
        (verify, (COUNTING, "abc", None), "signature: must be str, got NoneType"),
        (build_callback_url, (None, "/p", "abc", "complete"), "base: must be str"),
        (build_callback_url, ("https://x", b"/p", "abc", "complete"), "prefix: must be str"),
        (build_callback_url, ("https://x", "/p", 1, "complete"), "callback_id: must be str"),
        (build_callback_url, ("https://x", "/p", "abc", None), "action: must be str"),
    ],
)
def test_an_argument_of_the_wrong_type_is_refused_by_name(
    function: Callable[..., object], args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(TypeError, match=f"^{re.escape(message)}"):  # the SDK raises TypeError
        function(*args)


def test_a_secret_given_as_hex_text_is_refused_with_how_to_decode_it() -> None:
    with pytest.raises(TypeError, match=r"bytes\.fromhex"):
        sign(COUNTING.hex(), "abc")  # type: ignore[arg-type]


def test_a_type_error_comes_before_a_wrong_secret_length_as_in_the_sdk() -> None:
    with pytest.raises(TypeError, match=r"^signature: "):
        verify(bytes(5), "abc", b"zz")  # type: ignore[arg-type]


def test_an_id_that_utf8_cannot_encode_raises_unicode_encode_error_as_in_the_sdk() -> None:
    with pytest.raises(UnicodeEncodeError):
        sign(COUNTING, "a\ud800b")


def test_the_native_functions_check_the_secret_length_on_their_own() -> None:
    assert _core.callback_sign(COUNTING, "abc") == ABC
    assert _core.callback_verify(COUNTING, "abc", ABC.upper())
    with pytest.raises(ValueError, match=r"^secret: must be exactly 32 bytes, got 31$"):
        _core.callback_sign(bytes(31), "abc")
    with pytest.raises(ValueError, match=r"^secret: must be exactly 32 bytes, got 33$"):
        _core.callback_verify(bytes(33), "abc", ABC)


# From awa-pg 0.6.9: awa.callback_contract.build_callback_url(base, prefix, "abc", "complete").
@pytest.mark.parametrize(
    ("base", "prefix", "url"),
    [
        ("https://x.example", "/api/callbacks", "https://x.example/api/callbacks/abc/complete"),
        ("https://x.example/", "api/callbacks/", "https://x.example/api/callbacks/abc/complete"),
        ("https://x.example//", "/api/callbacks/", "https://x.example/api/callbacks/abc/complete"),
        ("https://x.example", "", "https://x.example/abc/complete"),
        ("https://x.example/", "/", "https://x.example/abc/complete"),
        ("https://x.example", "//", "https://x.example/abc/complete"),
        ("https://x.example", " / ", "https://x.example/abc/complete"),
        (
            "https://x.example/base/",
            "/api/callbacks",
            "https://x.example/base/api/callbacks/abc/complete",
        ),
        ("https://x.example/base", "a/b", "https://x.example/base/a/b/abc/complete"),
        ("", "api/callbacks", "/api/callbacks/abc/complete"),
        ("/", "", "/abc/complete"),
        ("x", "/api/callbacks", "x/api/callbacks/abc/complete"),
        # the prefix loses surrounding whitespace, then trailing slashes; nothing else
        ("https://x.example", " p ", "https://x.example/p/abc/complete"),
        ("https://x.example", " /p/ ", "https://x.example/p/abc/complete"),
        ("https://x.example", "\t/p\n", "https://x.example/p/abc/complete"),
        ("https://x.example", "p/ ", "https://x.example/p/abc/complete"),
        ("https://x.example", "p / ", "https://x.example/p /abc/complete"),
        ("https://x.example", " / / ", "https://x.example/ /abc/complete"),
        ("https://x.example", "/ p /", "https://x.example/ p /abc/complete"),
        (
            "https://x.example",
            "//api//callbacks//",
            "https://x.example//api//callbacks/abc/complete",
        ),
        ("https://x.example", "///p///", "https://x.example///p/abc/complete"),
        ("https://x.example", "\xa0p\xa0", "https://x.example/p/abc/complete"),
        ("https://x.example", "\u3000p", "https://x.example/p/abc/complete"),
        ("https://x.example", "\x85p", "https://x.example/p/abc/complete"),
        ("https://x.example", "\x1cp\x1c", "https://x.example/\x1cp\x1c/abc/complete"),
        ("https://x.example", "\u200bp", "https://x.example/\u200bp/abc/complete"),
        # the base loses trailing slashes only
        (
            "  https://x.example  ",
            "/api/callbacks",
            "  https://x.example  /api/callbacks/abc/complete",
        ),
        ("https://x.example/ ", "/p", "https://x.example/ /p/abc/complete"),
        ("https://x.example/?q=1", "", "https://x.example/?q=1/abc/complete"),
    ],
)
def test_build_callback_url_normalises_slashes_as_the_sdk_does(
    base: str, prefix: str, url: str
) -> None:
    assert build_callback_url(base, prefix, "abc", "complete") == url


# From awa-pg 0.6.9: what its prefix trim strips (Rust's char::is_whitespace), below U+3001.
SDK_STRIPPED = [0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)]
SDK_STRIPPED += [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]


def test_the_prefix_loses_exactly_the_whitespace_the_sdk_strips() -> None:
    stripped = [
        cp
        for cp in range(0x3001)
        if cp != ord("/") and build_callback_url("B", f"{chr(cp)}p{chr(cp)}", "c", "a") == "B/p/c/a"
    ]
    assert stripped == SDK_STRIPPED


@pytest.mark.parametrize(
    ("callback_id", "action", "url"),
    [
        ("abc", "fail", "https://x.example/api/callbacks/abc/fail"),
        ("abc", "heartbeat", "https://x.example/api/callbacks/abc/heartbeat"),
        ("abc", "bogus", "https://x.example/api/callbacks/abc/bogus"),
        ("abc", "", "https://x.example/api/callbacks/abc/"),
        ("abc", "/complete", "https://x.example/api/callbacks/abc//complete"),
        ("", "complete", "https://x.example/api/callbacks//complete"),
        ("a b/c", "complete", "https://x.example/api/callbacks/a b/c/complete"),
        ("a?b#c", "complete", "https://x.example/api/callbacks/a?b#c/complete"),
        ("é", "complete", "https://x.example/api/callbacks/é/complete"),
    ],
)
def test_build_callback_url_takes_id_and_action_as_given_as_the_sdk_does(
    callback_id: str, action: str, url: str
) -> None:
    assert build_callback_url("https://x.example", DEFAULT_PATH_PREFIX, callback_id, action) == url


# ------------------------------------------------------------------------- end to end

SECRET = bytes.fromhex("5f" * 32)


@dataclass
class Shipment:
    order: int


async def receive(
    client: awa_fast.AsyncClient, url: str, headers: Mapping[str, str], body: Any
) -> int:
    """A callback route as a web framework would host it: the HTTP status it answers."""
    prefix, callback_id, action = urlsplit(url).path.rsplit("/", 2)
    if prefix != DEFAULT_PATH_PREFIX or action != "complete":
        return 404
    if not verify(SECRET, callback_id, headers.get(SIGNATURE_HEADER, "")):
        return 401
    await client.complete_external(callback_id, body)
    return 200


def test_a_receiver_completes_a_parked_job_only_for_a_signed_request(dsn: str) -> None:
    client = awa_fast.AsyncClient(dsn)

    @client.task(Shipment)
    async def ship(job: awa_fast.Job[Shipment]) -> Any:
        return WaitForCallback(await job.register_callback(timeout_seconds=600))

    async def main() -> int:
        async with client:
            job_id = (await client.insert(Shipment(7))).id
            await run_until(
                client, {"default": 1}, lambda: job(dsn, job_id)["state"] == "waiting_external"
            )
            callback_id = str(job(dsn, job_id)["callback_id"])
            url = build_callback_url(
                "https://hooks.example/", DEFAULT_PATH_PREFIX, callback_id, "complete"
            )
            forgeries = [
                {},  # no signature
                {SIGNATURE_HEADER: "0" * 64},
                {SIGNATURE_HEADER: sign(SECRET, UUID)},  # another callback's, replayed
                {SIGNATURE_HEADER: sign(bytes(32), callback_id)},  # under another secret
            ]
            for headers in forgeries:
                assert await receive(client, url, headers, {"forged": True}) == 401
            assert job(dsn, job_id)["state"] == "waiting_external"
            signature = sign(SECRET, callback_id).upper()  # either case is accepted
            assert (
                await receive(client, url, {SIGNATURE_HEADER: signature}, {"tracking": "T-7"})
                == 200
            )
            return job_id

    job_id = run(main())
    row = job(dsn, job_id)
    assert row["state"] == "completed"
    assert row["callback_result"] == {"tracking": "T-7"}
