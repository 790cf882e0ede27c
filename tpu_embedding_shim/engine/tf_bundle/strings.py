"""String tensors on disk: lengths, a checksum of the lengths, then the bytes.

    varint64 len_0 ... varint64 len_{n-1} | masked CRC-32C of the lengths (4 bytes) | bytes_0 ... bytes_{n-1}

The length checksum covers each length as a 4-byte integer (8 bytes when
it does not fit in 32 bits) in the bundle's byte order, not the varint
bytes. The entry's CRC-32C covers those same integers, then the 4 checksum
bytes as written, then the string bytes (tensor_bundle.cc,
WriteStringTensor). An empty tensor is stored as nothing (size 0).

>>> data, crc = encode_strings([b"x", b"yz"])
>>> data
b'\\x01\\x02\\xbf\\xdf\\xdbzxyz'
>>> decode_strings(data, 2, crc, "t")
[b'x', b'yz']
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .crc32c import crc32c, mask, unmask
from .wire import WireError, decode_varint, encode_varint

__all__ = ["encode_strings", "decode_strings"]


def _length_bytes(length: int, byteorder: str) -> bytes:
    return struct.pack(f"{byteorder}I", length) if length <= 0xFFFFFFFF else struct.pack(f"{byteorder}Q", length)


def encode_strings(values: Sequence[bytes], byteorder: str = "<") -> tuple[bytes, int]:
    """(bytes to store, the entry's CRC-32C unmasked) of the string elements `values`."""
    if not values:
        return b"", 0
    lengths = b"".join(encode_varint(len(v)) for v in values)
    crc = crc32c(b"".join(_length_bytes(len(v), byteorder) for v in values))
    checksum = struct.pack(f"{byteorder}I", mask(crc))
    crc = crc32c(checksum, crc)
    payload = b"".join(values)
    return lengths + checksum + payload, crc32c(payload, crc)


def decode_strings(data: bytes, count: int, stored_crc: int | None, where: str, byteorder: str = "<") -> list[bytes]:
    """The `count` strings stored in `data`; checks both checksums (`stored_crc` None: only the lengths').

    Raises:
      ValueError: the bytes are truncated or a checksum differs (the caller
        turns it into a DataLossError naming the file); `where` names the tensor.
    """
    if count == 0:
        return []
    pos, lengths = 0, []
    try:
        for _ in range(count):
            length, pos = decode_varint(data, pos)
            lengths.append(length)
    except WireError:
        raise ValueError(f"{where}: the string lengths run past the stored bytes (truncated)") from None
    crc = crc32c(b"".join(_length_bytes(n, byteorder) for n in lengths))
    if pos + 4 > len(data):
        raise ValueError(f"{where}: the string length checksum is missing (truncated)")
    checksum = data[pos : pos + 4]
    (stored_length_crc,) = struct.unpack(f"{byteorder}I", checksum)
    if unmask(stored_length_crc) != crc:
        raise ValueError(
            f"{where}: the string length checksum does not match "
            f"(stored {unmask(stored_length_crc):#010x}, computed {crc:#010x})"
        )
    pos += 4
    if pos + sum(lengths) != len(data):
        raise ValueError(f"{where}: the string bytes take {sum(lengths)} bytes, the entry holds {len(data) - pos}")
    if stored_crc is not None:
        actual = crc32c(data[pos:], crc32c(checksum, crc))
        if actual != stored_crc:
            raise ValueError(f"{where}: checksum does not match (stored {stored_crc:#010x}, computed {actual:#010x})")
    out = []
    for length in lengths:
        out.append(bytes(data[pos : pos + length]))
        pos += length
    return out
