"""HPACK against RFC 7541's own examples (Appendix C.4: Huffman-coded strings filling the
dynamic table across three requests), and the failures a block can hold."""

from __future__ import annotations

import pytest

from awa_fast.telemetry import hpack
from awa_fast.telemetry.hpack import Decoder, HpackError

# C.4.1-C.4.3: three requests on one connection, as hex.
GET_ROOT = [(":method", "GET"), (":scheme", "http"), (":path", "/")]
GET_INDEX = [(":method", "GET"), (":scheme", "https"), (":path", "/index.html")]
AUTHORITY = (":authority", "www.example.com")
RFC_REQUESTS = [
    ("828684418cf1e3c2e5f23a6ba0ab90f4ff", [*GET_ROOT, AUTHORITY]),
    ("828684be5886a8eb10649cbf", [*GET_ROOT, AUTHORITY, ("cache-control", "no-cache")]),
    (
        "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
        [*GET_INDEX, AUTHORITY, ("custom-key", "custom-value")],
    ),
]


def test_the_rfc_examples_decode_with_their_dynamic_table() -> None:
    decoder = Decoder()
    for block, headers in RFC_REQUESTS:
        assert decoder.decode(bytes.fromhex(block)) == headers
    # The RFC's table after C.4.3: three entries, 164 octets.
    assert decoder.decode(bytes([0x80 | 62, 0x80 | 63, 0x80 | 64])) == [
        ("custom-key", "custom-value"),
        ("cache-control", "no-cache"),
        (":authority", "www.example.com"),
    ]
    with pytest.raises(HpackError, match="index 65"):
        decoder.decode(bytes([0x80 | 65]))


def test_a_smaller_table_evicts_the_oldest_entries() -> None:
    decoder = Decoder()
    for block, _ in RFC_REQUESTS:
        decoder.decode(bytes.fromhex(block))
    # A size update to 100 octets keeps the newest entry (54 octets) only.
    assert decoder.decode(bytes([0x3F, 100 - 31, 0x80 | 62])) == [("custom-key", "custom-value")]
    with pytest.raises(HpackError, match="index 63"):
        decoder.decode(bytes([0x80 | 63]))
    with pytest.raises(HpackError, match="table size 4097 exceeds the 4096 announced"):
        decoder.decode(bytes([0x3F, 0xE2, 0x1F]))  # 31 + 98 + (31 << 7)


def test_what_encode_writes_decodes_back() -> None:
    headers = [(":path", "/a" * 200), ("grpc-message", "caf\xe9"), ("x", "")]
    assert Decoder().decode(hpack.encode(headers)) == headers


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("0087a8eb10649cbfff00", "bad padding"),  # "no-cache", then 8 bits of padding
        ("0081ff", "bad padding"),
        ("0084ffffffff", "EOS"),  # 30 one-bits: the EOS symbol
        ("0085", "ends inside a string"),
        ("3f", "ends inside a field"),
        ("1fffffffffffff01", "too large"),
    ],
)
def test_a_broken_block_raises(block: str, error: str) -> None:
    with pytest.raises(HpackError, match=error):
        Decoder().decode(bytes.fromhex(block))
