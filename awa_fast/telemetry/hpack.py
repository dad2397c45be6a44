"""HPACK (RFC 7541), as much as one HTTP/2 request needs: encoding its headers and
decoding whatever the server answers.

Requests are encoded as literals without indexing or Huffman coding (every server must
accept them, and they leave nothing in its table to keep in step). Responses are decoded
in full: indexed fields, the dynamic table and Huffman-coded strings, since a server uses
them as it likes (grpc-go and nghttp2 Huffman-code ``grpc-status``).
"""

from __future__ import annotations

from collections import deque

Header = tuple[str, str]

# Appendix A: the static table, from index 1.
STATIC: tuple[Header, ...] = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)

# Appendix B: the length in bits of each symbol's code (0-255, then EOS). The code is
# canonical: codes are handed out in order of (length, symbol), so lengths define it.
CODE_LENGTHS = (
    *(13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28),
    *(28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11),
    *(10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8),
    *(15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7),
    *(7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5),
    *(6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7),
    *(7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23),
    *(23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24),
    *(22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21),
    *(23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25),
    *(26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26),
    *(28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23),
    *(26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30),
)
EOS = 256
ENTRY_OVERHEAD = 32  # octets an entry costs in the dynamic table beyond its name and value


class HpackError(Exception):
    """A header block that does not decode."""


def _canonical_codes(lengths: tuple[int, ...]) -> dict[tuple[int, int], int]:
    """``{(length, code): symbol}`` of the canonical Huffman code with these lengths."""
    codes: dict[tuple[int, int], int] = {}
    code, previous = -1, 0
    for symbol in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
        code = (code + 1) << (lengths[symbol] - previous)
        previous = lengths[symbol]
        codes[previous, code] = symbol
    return codes


_SYMBOLS = _canonical_codes(CODE_LENGTHS)


def huffman_decode(data: bytes) -> bytes:
    """Decode a Huffman-coded string (5.2: at most 7 bits of padding, all ones)."""
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code, length = (code << 1) | (byte >> shift) & 1, length + 1
            symbol = _SYMBOLS.get((length, code))
            if symbol == EOS:
                raise HpackError("EOS inside a Huffman-coded string")
            if symbol is not None:
                out.append(symbol)
                code = length = 0
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("a Huffman-coded string ends in bad padding")
    return bytes(out)


def encode(headers: list[Header]) -> bytes:
    """A header block of literals without indexing, new names, no Huffman coding (6.2.2)."""
    block = bytearray()
    for name, value in headers:
        block.append(0)
        for text in (name.encode("latin-1"), value.encode("latin-1")):
            block += _integer(len(text), 7, 0) + text
    return bytes(block)


def _integer(value: int, prefix: int, flags: int) -> bytes:
    """``value`` in an integer representation with a ``prefix``-bit prefix (5.1)."""
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([flags | value])
    out, value = bytearray([flags | limit]), value - limit
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Decoder:
    """Decodes the header blocks of one connection, keeping its dynamic table."""

    def __init__(self, max_table_size: int = 4096) -> None:
        self._limit = max_table_size  # what we announced (SETTINGS_HEADER_TABLE_SIZE)
        self._max = max_table_size  # what the encoder last chose, up to the limit
        self._table: deque[Header] = deque()  # newest first: index len(STATIC) + 1 on
        self._size = 0

    def decode(self, block: bytes) -> list[Header]:
        headers: list[Header] = []
        pos = 0
        try:
            while pos < len(block):
                pos = self._field(block, pos, headers)
        except IndexError:
            raise HpackError("a header block ends inside a field") from None
        return headers

    def _field(self, block: bytes, pos: int, headers: list[Header]) -> int:
        """Decode the field representation at ``pos`` (6.1-6.3); the position after it."""
        first = block[pos]
        if first & 0x80:  # indexed
            index, pos = _read_integer(block, pos, 7)
            headers.append(self._entry(index))
        elif first & 0xE0 == 0x20:  # dynamic table size update
            size, pos = _read_integer(block, pos, 5)
            if size > self._limit:
                raise HpackError(f"table size {size} exceeds the {self._limit} announced")
            self._max = size
            self._evict(0)
        else:  # a literal: with incremental indexing (01), without or never indexed (000)
            indexing = bool(first & 0x40)
            index, pos = _read_integer(block, pos, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, pos = _read_string(block, pos)
            value, pos = _read_string(block, pos)
            headers.append((name, value))
            if indexing:
                self._add((name, value))
        return pos

    def _entry(self, index: int) -> Header:
        if 0 < index <= len(STATIC):
            return STATIC[index - 1]
        if 0 < index - len(STATIC) <= len(self._table):
            return self._table[index - len(STATIC) - 1]
        raise HpackError(f"header table index {index} is out of range")

    def _add(self, entry: Header) -> None:
        size = len(entry[0]) + len(entry[1]) + ENTRY_OVERHEAD
        self._evict(size)
        if size <= self._max:  # else the table is left empty (4.4)
            self._table.appendleft(entry)
            self._size += size

    def _evict(self, room: int) -> None:
        """Drop the oldest entries until ``room`` more octets fit."""
        while self._table and self._size + room > self._max:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + ENTRY_OVERHEAD


def _read_integer(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    limit = (1 << prefix) - 1
    value, pos = block[pos] & limit, pos + 1
    if value < limit:
        return value, pos
    for shift in range(0, 35, 7):  # five continuation bytes at most: 2**35 is plenty
        byte, pos = block[pos], pos + 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise HpackError("an integer too large for a header block")


def _read_string(block: bytes, pos: int) -> tuple[str, int]:
    huffman = bool(block[pos] & 0x80)
    length, pos = _read_integer(block, pos, 7)
    raw = block[pos : pos + length]
    if len(raw) < length:
        raise HpackError("a header block ends inside a string")
    text = huffman_decode(raw) if huffman else raw
    return text.decode("latin-1"), pos + length
