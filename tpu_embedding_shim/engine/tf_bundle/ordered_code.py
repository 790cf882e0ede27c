"""The index key of one slice of a partitioned tensor (TensorFlow's OrderedCode).

A partitioned tensor `name` stores each slice under

    WriteNumIncreasing(0) + WriteString(name) + WriteNumIncreasing(rank)
    + for each dim: WriteSignedNumIncreasing(start) + WriteSignedNumIncreasing(length)

(tensorflow/core/util/saved_tensor_slice_util.cc). The encodings sort like
the values they encode, and every slice key starts with `\\x00`, so slice
keys sort before all tensor names.

- `NumIncreasing(v)`: one byte holding the length n of v's big-endian bytes
  (0 for v = 0), then those n bytes.
- `String(s)`: s with `\\x00` -> `\\x00\\xff` and `\\xff` -> `\\xff\\x00`, then `\\x00\\x01`.
- `SignedNumIncreasing(v)`: L bytes (the smallest L with
  -2^(7L-1) <= v < 2^(7L-1), L <= 10) holding v in two's complement,
  with the top L bits flipped: for v >= 0 they read 1...1 then a 0, for
  v < 0 0...0 then a 1. A one-byte value covers [-64, 64): 0 -> 0x80,
  4 -> 0x84, -1 (a whole dimension) -> 0x7f.

>>> slice_key("t", ((0, 4), (0, -1)))
b'\\x00t\\x00\\x01\\x01\\x02\\x80\\x84\\x80\\x7f'
>>> decode_slice_key(slice_key("a\\x00b", ((7, 3),)))
('a\\x00b', ((7, 3),))
"""

from __future__ import annotations

from .protos import Slice

__all__ = ["slice_key", "decode_slice_key", "encode_signed", "decode_signed"]


def _num_increasing(value: int) -> bytes:
    payload = value.to_bytes((value.bit_length() + 7) // 8, "big") if value else b""
    return bytes([len(payload)]) + payload


def _escape(text: bytes) -> bytes:
    out = bytearray()
    for byte in text:
        if byte == 0x00:
            out += b"\x00\xff"
        elif byte == 0xFF:
            out += b"\xff\x00"
        else:
            out.append(byte)
    return bytes(out)


def _signed_length(value: int) -> int:
    bits = (~value if value < 0 else value).bit_length()
    return min(10, bits // 7 + 1)


def encode_signed(value: int) -> bytes:
    """WriteSignedNumIncreasing for an int64."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{value} is not an int64")
    length = _signed_length(value)
    flipped = (value % (1 << (8 * length))) ^ (((1 << length) - 1) << (8 * length - length))
    return flipped.to_bytes(length, "big")


def decode_signed(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the SignedNumIncreasing at `pos`."""
    if pos >= len(data):
        raise ValueError("a signed number runs past the end of the key")
    head = int.from_bytes(data[pos : pos + 2].ljust(2, b"\xff" if data[pos] & 0x80 == 0 else b"\x00"), "big")
    negative = not head & 0x8000
    length = 0
    while length < 10 and bool(head & (0x8000 >> length)) != negative:
        length += 1
    if length == 0 or pos + length > len(data):
        raise ValueError("a malformed signed number in a slice key")
    raw = int.from_bytes(data[pos : pos + length], "big") ^ (((1 << length) - 1) << (8 * length - length))
    if negative:
        raw -= 1 << (8 * length)
    return raw, pos + length


def slice_key(name: str, extents: Slice) -> bytes:
    """The index key of the slice `extents` of tensor `name`."""
    out = _num_increasing(0) + _escape(name.encode("utf-8", "surrogateescape")) + b"\x00\x01"
    out += _num_increasing(len(extents))
    for start, length in extents:
        out += encode_signed(start) + encode_signed(length)
    return out


def decode_slice_key(key: bytes) -> tuple[str, Slice]:
    """(tensor name, extents) of a slice key (ValueError if `key` is not one)."""
    if not key.startswith(b"\x00"):
        raise ValueError("a slice key starts with \\x00")
    name, pos = bytearray(), 1
    while True:
        if pos + 1 >= len(key):
            raise ValueError("the tensor name in a slice key is not terminated")
        byte = key[pos]
        if byte == 0x00 or byte == 0xFF:
            pair = key[pos : pos + 2]
            pos += 2
            if pair == b"\x00\x01":
                break
            if pair == b"\x00\xff":
                name.append(0x00)
            elif pair == b"\xff\x00":
                name.append(0xFF)
            else:
                raise ValueError("a malformed escape in a slice key")
        else:
            name.append(byte)
            pos += 1
    rank_length = key[pos] if pos < len(key) else 9
    if rank_length > 8 or pos + 1 + rank_length > len(key):
        raise ValueError("a malformed rank in a slice key")
    rank = int.from_bytes(key[pos + 1 : pos + 1 + rank_length], "big")
    pos += 1 + rank_length
    extents = []
    for _ in range(rank):
        start, pos = decode_signed(key, pos)
        length, pos = decode_signed(key, pos)
        extents.append((start, length))
    if pos != len(key):
        raise ValueError("trailing bytes after a slice key")
    return name.decode("utf-8"), tuple(extents)
