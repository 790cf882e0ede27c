"""The protobuf wire format, by hand: varints and tagged fields (no protobuf package).

A message is a sequence of fields, each a varint key `number << 3 | wire type`
followed by a varint (type 0), 8 bytes (1), a varint length and that many
bytes (2), or 4 bytes (5). Decoding yields `(number, value)` pairs and
leaves unknown fields to the caller to skip, as protobuf does.

>>> encode_varint(300)
b'\\xac\\x02'
>>> decode_varint(b'\\xac\\x02', 0)
(300, 2)
>>> list(iter_fields(field_varint(1, 7) + field_bytes(2, b"ab")))
[(1, 7), (2, b'ab')]
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

__all__ = [
    "WireError",
    "encode_varint",
    "decode_varint",
    "iter_fields",
    "field_varint",
    "field_bytes",
    "field_fixed32",
    "as_int64",
    "as_int32",
]

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not a well-formed message (the caller says which file and entry)."""


def encode_varint(value: int) -> bytes:
    """Little-endian base-128; a negative int is sent as its 64-bit two's complement (10 bytes)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("a varint runs past the end of its buffer")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("a varint is longer than 10 bytes")


def iter_fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) for each field: an int for varint / fixed fields, bytes for length-delimited."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = decode_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        value: int | bytes
        if wire_type == VARINT:
            value, pos = decode_varint(data, pos)
        elif wire_type == FIXED64:
            if pos + 8 > end:
                raise WireError("a fixed64 field runs past the end")
            value, pos = struct.unpack_from("<Q", data, pos)[0], pos + 8
        elif wire_type == LENGTH:
            length, pos = decode_varint(data, pos)
            if pos + length > end:
                raise WireError("a length-delimited field runs past the end")
            value, pos = bytes(data[pos : pos + length]), pos + length
        elif wire_type == FIXED32:
            if pos + 4 > end:
                raise WireError("a fixed32 field runs past the end")
            value, pos = struct.unpack_from("<I", data, pos)[0], pos + 4
        else:
            raise WireError(f"unsupported wire type {wire_type} (field {number})")
        yield number, value


def as_int64(value: int | bytes) -> int:
    """A varint field read as a signed int64."""
    if not isinstance(value, int):
        raise WireError("expected a varint, found a length-delimited field")
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


def as_int32(value: int | bytes) -> int:
    """A varint field read as a signed int32 (protobuf sign-extends negative int32s to 64 bits)."""
    value = as_int64(value)
    value &= (1 << 32) - 1
    return value - (1 << 32) if value >> 31 else value


def field_varint(number: int, value: int) -> bytes:
    return encode_varint(number << 3 | VARINT) + encode_varint(value)


def field_bytes(number: int, value: bytes) -> bytes:
    return encode_varint(number << 3 | LENGTH) + encode_varint(len(value)) + value


def field_fixed32(number: int, value: int) -> bytes:
    return encode_varint(number << 3 | FIXED32) + struct.pack("<I", value)
