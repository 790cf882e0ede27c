"""Reading a TensorFlow checkpoint (tensor bundle): names, dtypes, shapes and values.

`BundleReader(prefix)` reads and checks the whole `.index` at once (every
block's CRC), then reads tensors on demand:

- a plain tensor from its data file (`shard_id`, `offset`, `size`), its
  CRC-32C checked. A large numeric tensor (>= `mmap_threshold` bytes,
  little-endian, not bfloat16) is a copy-on-write memory map of the data
  file: no second copy is made in memory, writing to it changes only the
  array, and the CRC is computed once, streaming over the mapping;
- a partitioned tensor (an entry with `slices`) by reading each slice
  under its own key and copying it into place. The slices must not
  overlap and must cover the tensor;
- bfloat16 as float32, strings as an object array of `bytes`.

`read_rows(name, rows)` reads only some rows (first-axis entries) of a
numeric tensor, plain or partitioned: a range or an index array. It holds
the rows asked for and one buffer of `ROW_BUFFER` bytes (or one row, if
larger), never the whole tensor: each touched entry is streamed in chunks
(`os.pread`), its CRC-32C checked over every chunk when `verify` is on,
and the rows asked for are copied out of the chunks as they pass. A
replica restoring its share of a table reads it this way.

Errors name the checkpoint, the file and the tensor: `NotFoundError` (no
index, no data file, no such tensor), `DataLossError` (truncated or corrupt
file, CRC mismatch, a bad entry), `UnimplementedError` (a dtype this
reader does not read, a bundle of a newer format).

Nothing the index claims is trusted before it is checked against the
files: every shape, offset and size must fit in the data file before an
array is allocated or a byte is read, so a small index that claims a huge
tensor is a `DataLossError`, not a `MemoryError`. Only regular files are
read (a FIFO, a directory or a link to a device is a `DataLossError` at
once rather than a read that never returns).

>>> import os, tempfile, numpy as np
>>> from tpu_embedding_shim.engine.tf_bundle import write_bundle
>>> prefix = os.path.join(tempfile.mkdtemp(), "model.ckpt-1")
>>> _ = write_bundle(prefix, {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.int64(1)})
>>> reader = BundleReader(prefix)
>>> reader.names(), reader.dtype_name("w"), reader.shape("w")
(['step', 'w'], 'float32', (2, 3))
>>> reader.read("w")[1].tolist()
[3.0, 4.0, 5.0]
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ..files import not_a_regular_file
from .crc32c import crc32c, unmask
from .dtypes import BFLOAT16, STRING, ByteOrder, from_bfloat16, is_supported, name_of, numpy_dtype, stored_dtype
from .errors import DataLossError, NotFoundError, UnimplementedError
from .naming import data_file, index_file
from .ordered_code import slice_key
from .protos import BIG, FULL, BundleEntry, BundleHeader, Slice, overlap
from .strings import decode_strings
from .table import read_table
from .wire import WireError

__all__ = ["BundleReader", "read_bundle", "list_bundle", "MMAP_THRESHOLD", "ROW_BUFFER", "CONSUMER_VERSION"]

MMAP_THRESHOLD = 1 << 20
"""Numeric tensors of at least this many bytes are memory-mapped (1 MiB)."""

CONSUMER_VERSION = 1
"""The bundle format version this reader is (TensorFlow's kTensorBundleVersion)."""

ROW_BUFFER = 1 << 22
"""`read_rows` streams an entry in chunks of about this many bytes (4 MiB; at least one row)."""

_CRC_CHUNK = 1 << 26  # bytes checksummed per call when streaming over a mapping
_MAX_ELEMENTS = 1 << 59  # more elements than this fit no array (numpy's limit is 2**63 bytes)


def _decode_key(key: bytes) -> str:
    return key.decode("utf-8", "surrogateescape")


def _encode_name(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def _describe(extents: Slice) -> str:
    return "[" + ", ".join(":" if n == FULL else f"{s}:{s + n}" for s, n in extents) + "]"


class BundleReader:
    """One checkpoint, opened by its prefix (`<prefix>.index` + `<prefix>.data-*`).

    Args:
      prefix: the checkpoint's path without `.index` (`run/model.ckpt-100`).
      verify: check each tensor's CRC-32C when it is read (default True).
      mmap_threshold: numeric tensors of at least this many bytes are read
        as copy-on-write memory maps of the data file.

    Raises:
      NotFoundError: `<prefix>.index` does not exist.
      DataLossError: the index is truncated or corrupt.
      UnimplementedError: the index was written by a newer format version.
    """

    def __init__(self, prefix: str | os.PathLike[str], *, verify: bool = True, mmap_threshold: int = MMAP_THRESHOLD):
        self.prefix = os.fspath(prefix)
        self.verify = verify
        self.mmap_threshold = mmap_threshold
        self.index_path = index_file(self.prefix)
        kind = not_a_regular_file(self.index_path)
        if kind is not None:
            raise DataLossError(
                f"Checkpoint {self.prefix!r}: {self.index_path} is {kind}, not a checkpoint index file "
                "(the .index of a checkpoint is a regular file)."
            )
        try:
            with open(self.index_path, "rb") as file:
                data = file.read()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(
                f"No checkpoint at {self.prefix!r}: {self.index_path} does not exist (a checkpoint is "
                "<prefix>.index plus <prefix>.data-* files)."
            ) from None
        pairs = read_table(data, self.index_path)
        if not pairs or pairs[0][0] != b"":
            raise DataLossError(
                f"{self.index_path}: the index has no header entry (the empty key): the file is "
                "corrupt or not a checkpoint index."
            )
        try:
            self.header = BundleHeader.decode(pairs[0][1])
        except WireError as error:
            raise DataLossError(f"{self.index_path}: the header entry is not parseable ({error}).") from None
        self._check_header()
        self.byteorder: ByteOrder = ">" if self.header.endianness == BIG else "<"
        self._entries: dict[bytes, BundleEntry] = {}
        for key, value in pairs[1:]:
            try:
                self._entries[key] = BundleEntry.decode(value)
            except WireError as error:
                raise DataLossError(
                    f"{self.index_path}: the entry for key {_decode_key(key)!r} is not parseable ({error})."
                ) from None
        slice_keys = set()
        for key, entry in self._entries.items():
            for extents in entry.slices:
                slice_keys.add(slice_key(_decode_key(key), extents))
        self._names = [_decode_key(k) for k in self._entries if k not in slice_keys]
        self._name_set = frozenset(self._names)

    def _check_header(self) -> None:
        header = self.header
        if header.num_shards < 1:
            raise DataLossError(f"{self.index_path}: the header names {header.num_shards} data shards.")
        if header.endianness not in (0, 1):
            raise DataLossError(f"{self.index_path}: the header has an unknown byte order {header.endianness}.")
        if header.min_consumer > CONSUMER_VERSION or CONSUMER_VERSION in header.bad_consumers:
            raise UnimplementedError(
                f"{self.index_path}: the checkpoint needs bundle format consumer version >= {header.min_consumer} "
                f"(and not {list(header.bad_consumers)}); this reader is version {CONSUMER_VERSION}: it was written by "
                "a newer TensorFlow."
            )

    # What is in the checkpoint --------------------------------------------------------------

    def names(self) -> list[str]:
        """The tensor names, in key order (slices of partitioned tensors are not names)."""
        return list(self._names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._name_set

    def entry(self, name: str) -> BundleEntry:
        """The index entry of tensor `name` (NotFoundError if there is none)."""
        if name not in self:
            raise NotFoundError(f"Key {name!r} not found in checkpoint {self.prefix!r}.")
        return self._entries[_encode_name(name)]

    def slice_entry(self, name: str, extents: Slice) -> BundleEntry | None:
        """The index entry of one slice of a partitioned tensor `name` (its `shard_id` names the data
        file), or None when the index holds none for it."""
        return self._entries.get(slice_key(name, extents))

    def dtype_code(self, name: str) -> int:
        return self.entry(name).dtype

    def dtype_name(self, name: str) -> str:
        """TensorFlow's name of the stored dtype ('float32', 'bfloat16', 'string', ...)."""
        return name_of(self.entry(name).dtype)

    def dtype(self, name: str) -> np.dtype:
        """The dtype of the array `read` returns (float32 for bfloat16, object for strings)."""
        entry = self.entry(name)
        self._check_dtype(name, entry)
        return numpy_dtype(entry.dtype)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.entry(name).shape)

    # Reading values -------------------------------------------------------------------------

    def read(self, name: str, *, mmap: bool | None = None) -> np.ndarray:
        """The value of tensor `name` (a partitioned one assembled from its slices).

        Args:
          name: the tensor's name.
          mmap: None: memory-map large numeric tensors (see the class);
            False: always read into memory; True: map every tensor that can be.

        Raises:
          NotFoundError: no such tensor, or its data file is missing.
          DataLossError: truncated or corrupt data, a CRC mismatch, or
            slices that overlap or leave part of the tensor uncovered.
          UnimplementedError: a dtype this reader does not read.
        """
        entry = self.entry(name)
        self._check_dtype(name, entry)
        if entry.slices:
            return self._assemble(name, entry, mmap)
        return self._read_entry(entry, f"tensor {name!r}", mmap)

    def read_rows(
        self, name: str, rows: slice | range | np.ndarray | list[int], *, buffer: int = ROW_BUFFER
    ) -> np.ndarray:
        """Rows `rows` of tensor `name` (its first axis), equal to `read(name)[rows]`, read without the rest.

        Args:
          name: the tensor's name: numeric, of rank >= 1, stored whole or
            as slices (any boxes: row slices of a multi-host save, or
            slices that cut other dimensions too).
          rows: a `slice` / `range` with step 1 (a contiguous run), or
            int row indices in any order, repeats allowed.
          buffer: bytes per chunk read (at least one row is read at once).

        Memory: the result plus one chunk. Only the entries holding a row
        asked for are touched; with `verify`, each of them is read whole,
        chunk by chunk, to check its CRC-32C; without it, only the chunks
        holding rows asked for. A string tensor is read whole (`read`).

        Raises:
          NotFoundError, DataLossError, UnimplementedError: as `read`.
          ValueError: a rank-0 tensor, a row out of range, a
            slice with a step other than 1, rows that are not integers.
        """
        entry = self.entry(name)
        self._check_dtype(name, entry)
        shape = tuple(entry.shape)
        self._check_shape(entry, f"tensor {name!r}")
        selection = _Selection.of(rows, shape, f"Checkpoint {self.prefix!r}: tensor {name!r}")
        if entry.dtype == STRING:
            whole = self.read(name, mmap=False)
            return whole[selection.first : selection.stop] if selection.ids is None else whole[selection.ids]
        out = np.empty((selection.count, *shape[1:]), dtype=numpy_dtype(entry.dtype))
        if entry.slices:
            parts = self._check_slices(name, entry)
        else:
            parts = [(tuple((0, n) for n in shape), entry, f"tensor {name!r}")]
        for box, part, label in parts:
            start, length = box[0]
            if selection.touches(start, start + length):
                self._rows_of_entry(part, label, box, selection, out, buffer)
        return out

    def _rows_of_entry(
        self,
        entry: BundleEntry,
        where: str,
        box: tuple[tuple[int, int], ...],
        selection: _Selection,
        out: np.ndarray,
        buffer: int,
    ) -> None:
        """Copies the selected rows of one stored entry (the box `box` of the tensor) into `out`, chunk by
        chunk; with `verify`, reads the entry whole and checks its CRC-32C."""
        self._check_shape(entry, where)
        stored = stored_dtype(entry.dtype, self.byteorder)
        count = math.prod(entry.shape)
        if entry.size != count * stored.itemsize:
            raise DataLossError(
                f"{self.index_path}: {where} ({name_of(entry.dtype)} {list(entry.shape)}) has a stored size "
                f"of {entry.size} bytes, expected {count * stored.itemsize}: the index is corrupt."
            )
        start, length = box[0]
        inner = tuple(n for _, n in box[1:])
        row_bytes = math.prod(inner) * stored.itemsize
        if count == 0:
            self._check_crc(entry, 0, where, None)
            return
        path = self._check_extent(entry, where)
        per_chunk = max(1, buffer // row_bytes)
        columns = tuple(slice(a, a + n) for a, n in box[1:])
        crc = 0
        chunk_buffer = np.empty(min(per_chunk, length) * row_bytes, np.uint8)  # one buffer, read into again and again
        fd = os.open(path, os.O_RDONLY)
        try:
            for first in range(0, length, per_chunk):
                last = min(first + per_chunk, length)
                wanted = selection.within(start + first, start + last)
                if wanted is None and not self.verify:
                    continue
                # rows [lo, hi) of the chunk: all of it with `verify` (every byte goes into the CRC), else
                # from the first row asked for to the last
                lo, hi = (0, last - first) if self.verify or wanted is None else (wanted[2], wanted[3])
                offset = entry.offset + (first + lo) * row_bytes
                size = (hi - lo) * row_bytes
                data = chunk_buffer[:size]
                got = os.preadv(fd, [data.data], offset)
                if got != size:
                    raise DataLossError(
                        f"{path}: {where} needs bytes [{offset}, {offset + size}), the file has "
                        f"{offset + got}: the data file is truncated."
                    )
                if self.verify:
                    crc = crc32c(data, crc)
                if wanted is None:
                    continue
                positions, local = wanted[0], wanted[1]
                chunk = data.view(stored).reshape((hi - lo, *inner))
                values = chunk[
                    local - lo if isinstance(local, np.ndarray) else slice(local.start - lo, local.stop - lo)
                ]
                if entry.dtype == BFLOAT16:
                    values = from_bfloat16(values)
                out[(positions,) + columns] = values
                del chunk, values
        finally:
            os.close(fd)
        if self.verify:
            self._check_crc(entry, crc, where, path)

    def read_all(self) -> dict[str, np.ndarray]:
        return {name: self.read(name) for name in self._names}

    def _check_dtype(self, name: str, entry: BundleEntry) -> None:
        if not is_supported(entry.dtype):
            raise UnimplementedError(
                f"Checkpoint {self.prefix!r}: tensor {name!r} has dtype {name_of(entry.dtype)} (DataType "
                f"{entry.dtype}), which this reader does not read. Readable: float16/32/64, bfloat16 (as float32), "
                "int8/16/32/64, uint8/16/32/64, bool, complex64/128, string."
            )

    def _data_path(self, entry: BundleEntry, where: str) -> str:
        if not 0 <= entry.shard_id < self.header.num_shards:
            raise DataLossError(
                f"{self.index_path}: {where} is in data shard {entry.shard_id}, but the checkpoint "
                f"has {self.header.num_shards}."
            )
        path = data_file(self.prefix, entry.shard_id, self.header.num_shards)
        kind = not_a_regular_file(path)
        if kind is not None:
            raise DataLossError(
                f"Checkpoint {self.prefix!r}: the data file {path} of {where} is {kind}, not a regular file."
            )
        if not os.path.isfile(path):
            raise NotFoundError(f"Checkpoint {self.prefix!r}: the data file {path} of {where} does not exist.")
        return path

    def _check_extent(self, entry: BundleEntry, where: str) -> str:
        """The data file of `entry`, after checking that its bytes [offset, offset + size) lie in that file."""
        if entry.offset < 0 or entry.size < 0:
            raise DataLossError(
                f"{self.index_path}: {where} has offset {entry.offset} and size {entry.size}; both must be >= 0: "
                "the index is corrupt."
            )
        path = self._data_path(entry, where)
        have = os.path.getsize(path)
        end = entry.offset + entry.size
        if end > have:
            raise DataLossError(
                f"{path}: {where} needs bytes [{entry.offset}, {end}), the file has {have}: the data file is "
                "truncated or the index is corrupt."
            )
        return path

    def _read_bytes(self, path: str, offset: int, size: int, where: str) -> bytes:
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read(size)
        if len(data) != size:
            raise DataLossError(
                f"{path}: {where} needs bytes [{offset}, {offset + size}), the file has "
                f"{offset + len(data)}: the data file is truncated."
            )
        return data

    def _check_shape(self, entry: BundleEntry, where: str) -> None:
        """DataLossError for a shape no array can have (numpy caps the product of the nonzero dims)."""
        if math.prod(n for n in entry.shape if n) > _MAX_ELEMENTS:
            raise DataLossError(
                f"{self.index_path}: {where} has shape {list(entry.shape)}, more elements than any array can "
                "hold: the index is corrupt."
            )

    def _read_entry(self, entry: BundleEntry, where: str, mmap: bool | None) -> np.ndarray:
        self._check_shape(entry, where)
        count = math.prod(entry.shape)
        code = entry.dtype
        if code == STRING:
            return self._read_strings(entry, count, where)
        stored = stored_dtype(code, self.byteorder)
        expected = count * stored.itemsize
        if entry.size != expected:
            raise DataLossError(
                f"{self.index_path}: {where} ({name_of(code)} {list(entry.shape)}) has a stored size "
                f"of {entry.size} bytes, expected {expected}: the index is corrupt."
            )
        if count == 0:
            self._check_crc(entry, 0, where, None)
            return np.zeros(entry.shape, dtype=numpy_dtype(code))
        path = self._check_extent(entry, where)
        mapped = mmap if mmap is not None else expected >= self.mmap_threshold
        mapped = mapped and self.byteorder == "<" and code != BFLOAT16
        raw: np.ndarray
        if mapped:
            raw = np.memmap(path, dtype=stored, mode="c", offset=entry.offset, shape=(count,))
        else:
            raw = np.fromfile(path, dtype=stored, count=count, offset=entry.offset)
        if self.verify:
            flat = raw.view(np.uint8)
            crc = 0
            for start in range(0, flat.size, _CRC_CHUNK):
                crc = crc32c(flat[start : start + _CRC_CHUNK], crc)
            self._check_crc(entry, crc, where, path)
        if code == BFLOAT16:
            raw = from_bfloat16(raw)
        elif self.byteorder != "<" or stored.byteorder == ">":
            raw = raw.astype(numpy_dtype(code))
        return raw.reshape(entry.shape)

    def _read_strings(self, entry: BundleEntry, count: int, where: str) -> np.ndarray:
        if count == 0 and entry.size == 0:
            return np.empty(entry.shape, dtype=object)
        if entry.size < count:
            raise DataLossError(
                f"{self.index_path}: {where} (string {list(entry.shape)}) has a stored size of "
                f"{entry.size} bytes, less than one per element: the index is corrupt."
            )
        path = self._check_extent(entry, where)
        out = np.empty(count, dtype=object)
        data = self._read_bytes(path, entry.offset, entry.size, where)
        try:
            values = decode_strings(data, count, unmask(entry.crc32c) if self.verify else None, where, self.byteorder)
        except ValueError as error:
            raise DataLossError(f"{path}: {error}.") from None
        out[:] = values
        return out.reshape(entry.shape)

    def _check_crc(self, entry: BundleEntry, actual: int, where: str, path: str | None) -> None:
        if self.verify and unmask(entry.crc32c) != actual:
            raise DataLossError(
                f"{path or self.index_path}: {where}: checksum does not match (stored {unmask(entry.crc32c):#010x}, "
                f"computed {actual:#010x} on {entry.size} bytes at offset {entry.offset}): the data is corrupt."
            )

    def _assemble(self, name: str, entry: BundleEntry, mmap: bool | None) -> np.ndarray:
        shape = entry.shape
        self._check_shape(entry, f"tensor {name!r}")
        parts = self._check_slices(name, entry)
        out = np.empty(shape, dtype=numpy_dtype(entry.dtype))
        for box, part, label in parts:
            out[tuple(slice(a, a + n) for a, n in box)] = self._read_entry(part, label, mmap)
        return out

    def _check_slices(
        self, name: str, entry: BundleEntry
    ) -> list[tuple[tuple[tuple[int, int], ...], BundleEntry, str]]:
        """(box, entry, label) of every slice of a partitioned tensor, each checked against the tensor's shape
        and its data file, and all together covering the tensor exactly: nothing is allocated before this."""
        shape = entry.shape
        parts = []
        boxes: list[tuple[tuple[int, int], ...]] = []
        covered = 0
        stored_bytes = 0
        for extents in entry.slices:
            label = f"slice {_describe(extents)} of tensor {name!r}"
            if len(extents) != len(shape):
                raise DataLossError(f"{self.index_path}: {label} has rank {len(extents)}, the tensor {len(shape)}.")
            fitted = []
            for dim, (start, length) in enumerate(extents):
                if length == FULL:
                    start, length = 0, shape[dim]
                if start < 0 or length < 0 or start + length > shape[dim]:
                    raise DataLossError(f"{self.index_path}: {label} is outside the tensor's shape {list(shape)}.")
                fitted.append((start, length))
            box = tuple(fitted)
            if any(overlap(box, other) for other in boxes):
                raise DataLossError(f"{self.index_path}: {label} overlaps another slice of the tensor.")
            boxes.append(box)
            part = self.slice_entry(name, extents)
            if part is None:
                raise DataLossError(
                    f"{self.index_path}: the index lists {label} but holds no entry for it: the index is corrupt."
                )
            if part.dtype != entry.dtype or tuple(part.shape) != tuple(n for _, n in box):
                raise DataLossError(
                    f"{self.index_path}: {label} is stored as {name_of(part.dtype)} "
                    f"{list(part.shape)}, expected {name_of(entry.dtype)} {[n for _, n in box]}."
                )
            self._check_extent(part, label)
            if part.dtype != STRING:
                expected = math.prod(part.shape) * stored_dtype(part.dtype, self.byteorder).itemsize
                if part.size != expected:
                    raise DataLossError(
                        f"{self.index_path}: {label} ({name_of(part.dtype)} {list(part.shape)}) has a stored size "
                        f"of {part.size} bytes, expected {expected}: the index is corrupt."
                    )
            stored_bytes += part.size
            parts.append((box, part, label))
            covered += math.prod(n for _, n in box)
        if covered != math.prod(shape):
            raise DataLossError(
                f"{self.index_path}: the slices of tensor {name!r} cover {covered} of its {math.prod(shape)} elements."
            )
        data_bytes = sum(os.path.getsize(path) for path in {self._data_path(part, label) for _, part, label in parts})
        if stored_bytes > data_bytes:
            raise DataLossError(
                f"{self.index_path}: the slices of tensor {name!r} claim {stored_bytes} bytes, more than its data "
                f"files hold ({data_bytes}): the index is corrupt."
            )
        return parts


class _Selection:
    """The rows `read_rows` was asked for: a run [first, stop), or ids (sorted once, with where each goes)."""

    def __init__(self, count: int, first: int, stop: int, ids: np.ndarray | None):
        self.count, self.first, self.stop, self.ids = count, first, stop, ids
        self.order: np.ndarray | None = None
        if ids is not None and ids.size > 1 and bool((ids[1:] < ids[:-1]).any()):
            self.order = np.argsort(ids, kind="stable")  # out[order[k]] is the k-th smallest id
            self.sorted = ids[self.order]
        elif ids is not None:  # in order already (a rank's ids): no copy
            self.sorted = ids

    @classmethod
    def of(cls, rows: Any, shape: tuple[int, ...], where: str) -> _Selection:
        if not shape:
            raise ValueError(f"{where} is a scalar: it has no rows to read (read it with read()).")
        total = shape[0]
        if isinstance(rows, (slice, range)):
            if rows.step not in (None, 1):
                raise ValueError(
                    f"{where}: argument `rows` must be a run of rows (step 1) or an array of row indices. "
                    f"Received a step of {rows.step}."
                )
            first = 0 if rows.start is None else rows.start
            stop = total if rows.stop is None else rows.stop
            if not (isinstance(first, (int, np.integer)) and isinstance(stop, (int, np.integer))):
                raise ValueError(f"{where}: argument `rows` must have int bounds. Received: {rows!r}.")
            if not 0 <= first <= stop <= total:
                raise ValueError(
                    f"{where}: argument `rows` must lie in [0, {total}] (the tensor has {total} rows). "
                    f"Received: [{first}, {stop})."
                )
            return cls(int(stop - first), int(first), int(stop), None)
        ids = np.asarray(rows)
        if ids.size == 0:
            ids = ids.astype(np.int64)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(
                f"{where}: argument `rows` must be a slice or a 1-D array of int row indices. Received: "
                f"{ids.dtype} of shape {ids.shape}."
            )
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= total):
            bad = ids[(ids < 0) | (ids >= total)][0]
            raise ValueError(
                f"{where}: argument `rows` must hold row indices in [0, {total}) (the tensor has {total} rows). "
                f"Received: {int(bad)}."
            )
        return cls(int(ids.size), 0, 0, ids)

    def touches(self, start: int, stop: int) -> bool:
        return self.within(start, stop) is not None

    def within(self, start: int, stop: int) -> tuple[Any, Any, int, int] | None:
        """For the tensor's rows [start, stop): (positions in the result, rows from `start`, the first and the
        stop of the rows asked for, from `start`), or None when none is asked for."""
        if self.ids is None:
            lo, hi = max(start, self.first), min(stop, self.stop)
            if lo >= hi:
                return None
            return slice(lo - self.first, hi - self.first), range(lo - start, hi - start), lo - start, hi - start
        i, j = np.searchsorted(self.sorted, [start, stop])
        if i == j:
            return None
        local = self.sorted[i:j] - start
        positions = slice(i, j) if self.order is None else self.order[i:j]
        return positions, local, int(local[0]), int(local[-1]) + 1


def read_bundle(prefix: str | os.PathLike[str], *, verify: bool = True) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint at `prefix`, by name."""
    return BundleReader(prefix, verify=verify).read_all()


def list_bundle(prefix: str | os.PathLike[str]) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, TensorFlow dtype name, shape) of every tensor of the checkpoint at `prefix`, in key order."""
    reader = BundleReader(prefix)
    return [(name, reader.dtype_name(name), reader.shape(name)) for name in reader.names()]
