"""The `.index` file: a LevelDB-style sorted table of (key, value) pairs.

Layout (tensorflow/core/lib/io/table_builder.cc, block_builder.cc, format.cc)::

    data block 0 | trailer ... data block k | trailer | metaindex block | trailer | index block | trailer | footer

- A block holds entries `varint shared, varint unshared, varint value
  length, key[shared:], value`: each key shares a prefix with the one
  before, except at restart points (every 16th entry) where it is whole.
  The block ends with the restart offsets (uint32 each) and their count.
- Every block is followed by a 5-byte trailer: the compression type (0,
  none: TensorFlow never compresses an index) and the masked CRC-32C of
  the block plus that byte.
- The index block maps a key >= the last key of each data block to that
  block's handle (varint offset, varint size). The metaindex block is empty.
- The 48-byte footer: the metaindex and index handles, zero padding to
  40 bytes, then the magic number 0xdb4775248b80fb57 (little-endian).

An index is small (one entry per tensor or slice), so `read_table` reads
every entry at once and checks every block's CRC.

>>> pairs = [(b"", b"header"), (b"a", b"1"), (b"ab", b"2")]
>>> read_table(build_table(pairs), "x.index") == pairs
True
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable

from .crc32c import crc32c, mask, unmask
from .errors import DataLossError, UnimplementedError
from .wire import WireError, decode_varint, encode_varint

__all__ = ["read_table", "build_table", "MAGIC", "FOOTER_SIZE"]

MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_SIZE = 4096  # a data block is closed once it reaches this many bytes
RESTART_INTERVAL = 16
NO_COMPRESSION = 0

Pair = tuple[bytes, bytes]


# Reading ----------------------------------------------------------------------------------------


def _block_entries(block: bytes) -> list[Pair]:
    """The (key, value) pairs of one block's contents (trailer removed)."""
    if len(block) < 4:
        raise WireError("a block is shorter than its restart count")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    if num_restarts == 0 or limit < 0:
        raise WireError(f"a block has a bad restart count {num_restarts}")
    entries, pos, key = [], 0, b""
    while pos < limit:
        shared, pos = decode_varint(block, pos)
        unshared, pos = decode_varint(block, pos)
        value_length, pos = decode_varint(block, pos)
        if shared > len(key) or pos + unshared + value_length > limit:
            raise WireError("a block entry runs past its block")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        entries.append((key, block[pos : pos + value_length]))
        pos += value_length
    return entries


def _read_block(data: bytes, handle: tuple[int, int], filename: str, what: str) -> bytes:
    offset, size = handle
    if offset < 0 or offset + size + 5 > len(data):
        raise DataLossError(
            f"{filename}: the {what} block [{offset}, {offset + size + 5}) runs past the end of the "
            f"file ({len(data)} bytes): the file is truncated or corrupt."
        )
    block = data[offset : offset + size]
    kind = data[offset + size]
    (stored,) = struct.unpack_from("<I", data, offset + size + 1)
    actual = crc32c(data[offset : offset + size + 1])
    if unmask(stored) != actual:
        raise DataLossError(
            f"{filename}: block checksum mismatch in the {what} block at offset {offset} "
            f"(stored {unmask(stored):#010x}, computed {actual:#010x}): the file is corrupt."
        )
    if kind != NO_COMPRESSION:
        raise UnimplementedError(
            f"{filename}: the {what} block at offset {offset} is compressed (type {kind}); "
            "only uncompressed tables are supported (TensorFlow writes no other kind)."
        )
    return block


def _decode_handle(data: bytes, pos: int) -> tuple[tuple[int, int], int]:
    offset, pos = decode_varint(data, pos)
    size, pos = decode_varint(data, pos)
    return (offset, size), pos


def read_table(data: bytes, filename: str) -> list[Pair]:
    """Every (key, value) of the table in `data`, in key order.

    Raises:
      DataLossError: the file is too short, has no table magic number, a
        block's checksum differs, or a block cannot be parsed.
    """
    if len(data) < FOOTER_SIZE:
        raise DataLossError(
            f"{filename}: the file is too short to be an index ({len(data)} bytes, a table ends with "
            f"a {FOOTER_SIZE}-byte footer): it is truncated or not a checkpoint index."
        )
    footer = data[-FOOTER_SIZE:]
    (magic,) = struct.unpack_from("<Q", footer, 40)
    if magic != MAGIC:
        raise DataLossError(
            f"{filename}: not a checkpoint index (bad magic number {magic:#018x}); the file is "
            "truncated, corrupt, or another kind of file."
        )
    try:
        _metaindex, pos = _decode_handle(footer, 0)
        index_handle, _ = _decode_handle(footer, pos)
        index = _block_entries(_read_block(data, index_handle, filename, "index"))
        pairs: list[Pair] = []
        for _separator, handle_bytes in index:
            handle, _ = _decode_handle(handle_bytes, 0)
            pairs.extend(_block_entries(_read_block(data, handle, filename, "data")))
    except WireError as error:
        raise DataLossError(f"{filename}: the index is corrupt ({error}).") from None
    for (before, _), (after, _) in itertools.pairwise(pairs):
        if not before < after:
            raise DataLossError(
                f"{filename}: index keys are not in increasing order ({before!r}, {after!r}): the file is corrupt."
            )
    return pairs


# Writing ----------------------------------------------------------------------------------------


class _BlockBuilder:
    def __init__(self, restart_interval: int):
        self.restart_interval = restart_interval
        self.buffer = bytearray()
        self.restarts = [0]
        self.count = 0  # entries since the last restart
        self.last_key = b""
        self.empty = True

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count < self.restart_interval:
            limit = min(len(key), len(self.last_key))
            while shared < limit and key[shared] == self.last_key[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.count = 0
        self.buffer += encode_varint(shared) + encode_varint(len(key) - shared) + encode_varint(len(value))
        self.buffer += key[shared:] + value
        self.last_key = key
        self.count += 1
        self.empty = False

    def size(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return (
            bytes(self.buffer)
            + b"".join(struct.pack("<I", r) for r in self.restarts)
            + struct.pack("<I", len(self.restarts))
        )


def build_table(pairs: Iterable[Pair]) -> bytes:
    """The bytes of a table holding `pairs`, which must be in strictly increasing key order.

    Each data block is indexed under its own last key (a valid separator:
    >= every key in the block, < the first key of the next).
    """
    out = bytearray()
    index = _BlockBuilder(restart_interval=1)

    def emit(contents: bytes) -> tuple[int, int]:
        handle = (len(out), len(contents))
        out.extend(contents)
        out.append(NO_COMPRESSION)
        out.extend(struct.pack("<I", mask(crc32c(contents + bytes([NO_COMPRESSION])))))
        return handle

    def encode_handle(handle: tuple[int, int]) -> bytes:
        return encode_varint(handle[0]) + encode_varint(handle[1])

    block = _BlockBuilder(RESTART_INTERVAL)
    previous = None
    for key, value in pairs:
        if previous is not None and not previous < key:
            raise ValueError(f"table keys must be strictly increasing: {previous!r} then {key!r}")
        previous = key
        block.add(key, value)
        if block.size() >= BLOCK_SIZE:
            index.add(block.last_key, encode_handle(emit(block.finish())))
            block = _BlockBuilder(RESTART_INTERVAL)
    if not block.empty:
        index.add(block.last_key, encode_handle(emit(block.finish())))
    metaindex_handle = emit(_BlockBuilder(RESTART_INTERVAL).finish())
    index_handle = emit(index.finish())
    footer = (encode_handle(metaindex_handle) + encode_handle(index_handle)).ljust(40, b"\x00")
    out.extend(footer + struct.pack("<Q", MAGIC))
    return bytes(out)
