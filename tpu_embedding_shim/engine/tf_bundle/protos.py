"""The index's messages: BundleHeaderProto, BundleEntryProto, TensorShapeProto, TensorSliceProto.

Field numbers are TensorFlow's (tensorflow/core/protobuf/tensor_bundle.proto,
framework/tensor_shape.proto, tensor_slice.proto, versions.proto):

- header: num_shards 1, endianness 2 (LITTLE 0, BIG 1), version 3
  (VersionDef: producer 1, min_consumer 2, bad_consumers 3);
- entry: dtype 1, shape 2, shard_id 3, offset 4, size 5, crc32c 6
  (fixed32, masked), slices 7;
- shape: dim 2, each {size 1, name 2}; unknown_rank 3;
- slice: extent 1, each {start 1, length 2}; an extent without a length
  is the whole dimension (written here as length -1, TF's kFullExtent).

Fields left at their default are not written, as protobuf does.

>>> entry = BundleEntry(dtype=1, shape=(2, 3), offset=8, size=24, crc32c=5)
>>> BundleEntry.decode(entry.encode()) == entry
True
"""

from __future__ import annotations

import dataclasses
import math

from .wire import (
    WireError,
    as_int32,
    as_int64,
    decode_varint,
    field_bytes,
    field_fixed32,
    field_varint,
    iter_fields,
)

__all__ = ["FULL", "Extent", "Slice", "overlap", "BundleHeader", "BundleEntry", "LITTLE", "BIG"]

FULL = -1
"""The length of an extent that is the whole dimension (TF's kFullExtent)."""

Extent = tuple[int, int]
"""(start, length) along one dimension; length FULL means start 0 and the whole dimension."""

Slice = tuple[Extent, ...]


def overlap(box: Slice, other: Slice) -> bool:
    """Whether two boxes of (start, length) extents (FULL resolved) share an element; an empty one shares none."""
    return (
        all(a < c + m and c < a + n for (a, n), (c, m) in zip(box, other))
        and math.prod(n for _, n in box) > 0
        and math.prod(m for _, m in other) > 0
    )


"""One extent per dimension of the full tensor."""

LITTLE, BIG = 0, 1


def _message(value) -> bytes:
    if not isinstance(value, bytes):
        raise WireError("expected a message, found a varint")
    return value


def _int_list(value) -> tuple[int, ...]:
    """A repeated int32 field value, packed (bytes) or not (int)."""
    if isinstance(value, int):
        return (as_int32(value),)
    out, pos = [], 0
    while pos < len(value):
        item, pos = decode_varint(value, pos)
        out.append(as_int32(item))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class BundleHeader:
    """The entry under the empty key: how many data files, their byte order, the format version."""

    num_shards: int = 1
    endianness: int = LITTLE
    producer: int = 1
    min_consumer: int = 0
    bad_consumers: tuple[int, ...] = ()

    def encode(self) -> bytes:
        version = b""
        if self.producer:
            version += field_varint(1, self.producer)
        if self.min_consumer:
            version += field_varint(2, self.min_consumer)
        for bad in self.bad_consumers:
            version += field_varint(3, bad)
        out = b""
        if self.num_shards:
            out += field_varint(1, self.num_shards)
        if self.endianness:
            out += field_varint(2, self.endianness)
        return out + field_bytes(3, version)

    @classmethod
    def decode(cls, data: bytes) -> BundleHeader:
        num_shards, endianness, producer, min_consumer = 0, LITTLE, 0, 0
        bad_consumers: tuple[int, ...] = ()
        for number, value in iter_fields(data):
            if number == 1:
                num_shards = as_int32(value)
            elif number == 2:
                endianness = as_int32(value)
            elif number == 3:
                for sub, item in iter_fields(_message(value)):
                    if sub == 1:
                        producer = as_int32(item)
                    elif sub == 2:
                        min_consumer = as_int32(item)
                    elif sub == 3:
                        bad_consumers += _int_list(item)
        return cls(num_shards, endianness, producer, min_consumer, bad_consumers)


def encode_shape(shape: tuple[int, ...]) -> bytes:
    return b"".join(field_bytes(2, field_varint(1, size) if size else b"") for size in shape)


def decode_shape(data: bytes) -> tuple[int, ...]:
    """The dims of a TensorShapeProto; an unknown rank or a negative size is refused (no stored tensor has one)."""
    dims: list[int] = []
    for number, value in iter_fields(data):
        if number == 2:
            size = 0
            for sub, item in iter_fields(_message(value)):
                if sub == 1:
                    size = as_int64(item)
            if size < 0:
                raise WireError(f"dimension {len(dims)} has size {size}")
            dims.append(size)
        elif number == 3 and value:
            raise WireError("the shape has an unknown rank")
    return tuple(dims)


def encode_slice(extents: Slice) -> bytes:
    out = b""
    for start, length in extents:
        extent = b""
        if length != FULL or start != 0:
            if start:
                extent += field_varint(1, start)
            extent += field_varint(2, length)
        out += field_bytes(1, extent)
    return out


def decode_slice(data: bytes) -> Slice:
    extents = []
    for number, value in iter_fields(data):
        if number == 1:
            start, length = 0, FULL
            for sub, item in iter_fields(_message(value)):
                if sub == 1:
                    start = as_int64(item)
                elif sub == 2:
                    length = as_int64(item)
            extents.append((start, length))
    return tuple(extents)


@dataclasses.dataclass(frozen=True)
class BundleEntry:
    """Where one tensor (or one slice of a partitioned tensor) is, and its CRC.

    A partitioned tensor's own entry has `slices` and no data: each slice
    is stored under its own key (`ordered_code.slice_key`).
    """

    dtype: int
    shape: tuple[int, ...] = ()
    shard_id: int = 0
    offset: int = 0
    size: int = 0
    crc32c: int = 0  # masked, as stored
    slices: tuple[Slice, ...] = ()

    def encode(self) -> bytes:
        out = field_varint(1, self.dtype) + field_bytes(2, encode_shape(self.shape))
        if self.shard_id:
            out += field_varint(3, self.shard_id)
        if self.offset:
            out += field_varint(4, self.offset)
        if self.size:
            out += field_varint(5, self.size)
        if self.crc32c:
            out += field_fixed32(6, self.crc32c)
        for extents in self.slices:
            out += field_bytes(7, encode_slice(extents))
        return out

    @classmethod
    def decode(cls, data: bytes) -> BundleEntry:
        dtype = shard_id = offset = size = crc32c = 0
        shape: tuple[int, ...] = ()
        slices = []
        for number, value in iter_fields(data):
            if number == 1:
                dtype = as_int32(value)
            elif number == 2:
                shape = decode_shape(_message(value))
            elif number == 3:
                shard_id = as_int32(value)
            elif number == 4:
                offset = as_int64(value)
            elif number == 5:
                size = as_int64(value)
            elif number == 6:
                if isinstance(value, bytes):
                    raise WireError("crc32c is not a fixed32")
                crc32c = value & 0xFFFFFFFF
            elif number == 7:
                slices.append(decode_slice(_message(value)))
        return cls(dtype, shape, shard_id, offset, size, crc32c, tuple(slices))
