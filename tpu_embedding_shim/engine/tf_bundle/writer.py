"""Writing a TensorFlow checkpoint (tensor bundle) that TensorFlow reads and restores.

`write_bundle(prefix, {name: value})` writes `<prefix>.index` and
`<prefix>.data-<k>-of-<n>`. A value is an array (anything `np.asarray`
takes: numbers, bools, strings as bytes / str / object arrays) or a
`SlicedTensor` (a partitioned tensor: its full shape and the slices that
cover it, each stored under its own key as TensorFlow's partitioned
savers do). TensorFlow slices a full stored tensor itself when it restores
a partitioned variable, so full tensors are all a writer for TF needs.

Atomic: everything is checked before anything is written; the files are
written under temporary names (`<file>.tempstate<random>`), fsynced, and
renamed, the `.index` last (a checkpoint exists once its index does). An
existing checkpoint at the same prefix loses its index before the new data
files replace its own, so a crash leaves either no checkpoint at `prefix`
or a whole one, never a mix. With `update_state=True` the directory's
`checkpoint` state file names the new checkpoint as the latest, after all
that. A failure at any point leaves no temporary file behind.

Large tensors are streamed to disk in blocks of rows: no copy of a table
is made (except for a dtype or byte-order conversion, one block at a time).

>>> import os, tempfile, numpy as np
>>> from tpu_embedding_shim.engine.tf_bundle import BundleReader
>>> prefix = os.path.join(tempfile.mkdtemp(), "model.ckpt-7")
>>> table = np.arange(12, dtype=np.float32).reshape(6, 2)
>>> part = SlicedTensor((6, 2), [(((0, 4), (0, -1)), table[:4]), (((4, 2), (0, -1)), table[4:])])
>>> _ = write_bundle(prefix, {"emb": table, "global_step": np.int64(7), "names": np.array([b"a", b"b"], object),
...                           "part": part})
>>> sorted(os.listdir(os.path.dirname(prefix)))
['model.ckpt-7.data-00000-of-00001', 'model.ckpt-7.index']
>>> reader = BundleReader(prefix)
>>> reader.names(), bool((reader.read("part") == table).all())
(['emb', 'global_step', 'names', 'part'], True)
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..files import created_directories, fsync_directory
from .crc32c import crc32c, mask
from .dtypes import BFLOAT16, CODES, STRING, ByteOrder, code_of, name_of, stored_dtype, to_bfloat16
from .naming import data_file, data_files, index_file
from .ordered_code import slice_key
from .protos import BIG, FULL, LITTLE, BundleEntry, BundleHeader, Slice, overlap
from .state import record_latest
from .strings import encode_strings
from .table import build_table

__all__ = ["SlicedTensor", "write_bundle", "delete_bundle", "ShardEntry", "write_data_shard", "write_shared_index"]

_BLOCK_BYTES = 1 << 24  # bytes per block when streaming a tensor to disk


@dataclasses.dataclass(frozen=True)
class SlicedTensor:
    """A partitioned tensor: its full shape and the slices that cover it.

    Each part is `(extents, values)`: `extents` has one `(start, length)`
    per dimension (length -1: the whole dimension), and `values` has the
    shape of those extents. The parts must not overlap and must cover the
    full shape; they must share one dtype.
    """

    shape: tuple[int, ...]
    parts: Sequence[tuple[Slice, Any]]


@dataclasses.dataclass
class _Item:
    """One index entry to write: a full tensor, a slice, or a partitioned tensor's own entry."""

    key: bytes
    label: str
    code: int
    shape: tuple[int, ...]
    values: np.ndarray | None = None  # None: the entry of a partitioned tensor (no data)
    slices: tuple[Slice, ...] = ()
    is_slice: bool = False
    shard: int = 0
    offset: int = 0
    size: int = 0
    crc: int = 0


def _stored_code(name: str, array: np.ndarray, override: str | None) -> int:
    try:
        natural = code_of(array.dtype)
    except TypeError as error:
        raise TypeError(f"write_bundle: tensor {name!r}: {error}") from None
    if override is None:
        return natural
    if override not in CODES:
        raise ValueError(f"write_bundle: `dtypes[{name!r}]` must be one of {sorted(CODES)}. Received: {override!r}.")
    code = CODES[override]
    if (code == STRING) != (natural == STRING):
        raise TypeError(f"write_bundle: tensor {name!r} of dtype {array.dtype} can't be stored as {override}.")
    if code == BFLOAT16 and array.dtype.kind not in "fiub":
        raise TypeError(f"write_bundle: tensor {name!r} of dtype {array.dtype} can't be stored as bfloat16.")
    return code


def _as_array(name: str, value: Any) -> np.ndarray:
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    if array.dtype.kind == "O":
        for item in array.reshape(-1):
            if not isinstance(item, (bytes, str)):
                raise TypeError(
                    f"write_bundle: tensor {name!r} is an object array holding {type(item).__name__}; "
                    "only bytes and str elements can be stored (as a string tensor)."
                )
    return array


def _strings(array: np.ndarray) -> list[bytes]:
    return [item.encode("utf-8") if isinstance(item, str) else bytes(item) for item in array.reshape(-1).tolist()]


def _check_name(name: Any) -> bytes:
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"write_bundle: tensor names must be non-empty strings (the empty key holds the header). "
            f"Received: {name!r}."
        )
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"write_bundle: tensor name {name!r} is not valid unicode (it can't be UTF-8 encoded)."
        ) from None


def _plan(tensors: Mapping[str, Any], dtypes: Mapping[str, str], *, partial: bool = False) -> list[_Item]:
    """Every entry to write, checked, in key order (`partial`: a SlicedTensor's parts need not cover it)."""
    items: dict[bytes, _Item] = {}
    unknown = sorted(set(dtypes) - set(tensors))
    if unknown:
        raise ValueError(f"write_bundle: `dtypes` names tensors that are not written: {unknown}.")
    for name, value in tensors.items():
        key = _check_name(name)
        if not isinstance(value, SlicedTensor):
            array = _as_array(name, value)
            code = _stored_code(name, array, dtypes.get(name))
            items[key] = _Item(key, f"tensor {name!r}", code, tuple(array.shape), array)
            continue
        shape = tuple(value.shape)
        if not all(isinstance(n, (int, np.integer)) and n >= 0 for n in shape):
            raise ValueError(
                f"write_bundle: SlicedTensor {name!r}: `shape` must be non-negative ints. Received: {value.shape!r}."
            )
        shape = tuple(int(n) for n in shape)
        if not value.parts:
            raise ValueError(f"write_bundle: SlicedTensor {name!r} has no parts.")
        boxes: list[tuple[tuple[int, int], ...]] = []
        slices: list[Slice] = []
        sliced_code: int | None = None
        for extents, part in value.parts:
            extents = tuple((int(s), int(n)) for s, n in extents)
            label = f"slice {list(extents)} of tensor {name!r}"
            if len(extents) != len(shape):
                raise ValueError(
                    f"write_bundle: {label} has {len(extents)} extents, the shape {list(shape)} has "
                    f"{len(shape)} dimensions."
                )
            box = tuple((0, shape[d]) if n == FULL else (s, n) for d, (s, n) in enumerate(extents))
            if any(s < 0 or n < 0 or s + n > shape[d] for d, (s, n) in enumerate(box)) or any(
                n == FULL and s != 0 for s, n in extents
            ):
                raise ValueError(f"write_bundle: {label} is outside the shape {list(shape)}.")
            array = _as_array(name, part)
            if tuple(array.shape) != tuple(n for _, n in box):
                raise ValueError(
                    f"write_bundle: {label} has values of shape {list(array.shape)}, expected {[n for _, n in box]}."
                )
            part_code = _stored_code(name, array, dtypes.get(name))
            if sliced_code is not None and part_code != sliced_code:
                raise TypeError(
                    f"write_bundle: the slices of tensor {name!r} have different dtypes "
                    f"({name_of(sliced_code)}, {name_of(part_code)})."
                )
            sliced_code = part_code
            if any(overlap(box, other) for other in boxes):
                raise ValueError(f"write_bundle: {label} overlaps another slice.")
            boxes.append(box)
            slices.append(extents)
            part_key = slice_key(name, extents)
            items[part_key] = _Item(part_key, label, part_code, tuple(array.shape), array, is_slice=True)
        covered = sum(math.prod(n for _, n in box) for box in boxes)
        if covered != math.prod(shape) and not partial:
            raise ValueError(
                f"write_bundle: the slices of tensor {name!r} cover {covered} of its "
                f"{math.prod(shape)} elements; they must cover the tensor."
            )
        assert sliced_code is not None  # value.parts is not empty (checked above)
        items[key] = _Item(key, f"tensor {name!r}", sliced_code, shape, None, tuple(slices))
    ordered = [items[key] for key in sorted(items)]
    names = {name.encode("utf-8") for name in tensors}
    for key, item in items.items():
        if item.is_slice and key in names:
            raise ValueError(f"write_bundle: the key of {item.label} equals another tensor's name.")
    return ordered


def _blocks(item: _Item, byteorder: ByteOrder) -> Iterator[np.ndarray]:
    """The stored bytes of `item`, as a sequence of contiguous arrays (bounded size)."""
    array = item.values
    assert array is not None  # only items with values are written (the shards hold no others)
    if item.code == STRING:
        data, crc = encode_strings(_strings(array), byteorder)
        item.crc = crc
        yield np.frombuffer(data, dtype=np.uint8)
        return
    stored = stored_dtype(item.code, byteorder)
    flat = array.reshape(1) if array.ndim == 0 else array
    rows = max(1, _BLOCK_BYTES // max(1, stored.itemsize * math.prod(flat.shape[1:])))
    for start in range(0, flat.shape[0], rows):
        block = flat[start : start + rows]
        if item.code == BFLOAT16:
            block = to_bfloat16(block)
            if byteorder == ">":
                block = block.astype(">u2")
        else:
            block = np.ascontiguousarray(block, dtype=stored)
        yield block


_ALIGN = 64
"""Numeric tensors start at a multiple of 64 bytes (a cache line): numpy copies a table out of the file
about twice as fast as from an odd offset (2.2-2.4 vs 4.5-6.2 GB/s measured). TensorFlow's own
`BundleWriter` has this option (`data_alignment`); readers follow the stored offsets, so the zero
padding between tensors is never read."""


def _write_index(path: str, items: Sequence[_Item], num_shards: int, byteorder: ByteOrder) -> None:
    """The `.index` file of `items` (in key order): the header, then each entry where its data lives."""
    header = BundleHeader(num_shards=num_shards, endianness=BIG if byteorder == ">" else LITTLE)
    pairs = [(b"", header.encode())]
    for item in items:
        if item.values is None:  # a partitioned tensor: its slices, no data of its own
            entry = BundleEntry(dtype=item.code, shape=item.shape, slices=item.slices)
        else:
            entry = BundleEntry(
                dtype=item.code,
                shape=item.shape,
                shard_id=item.shard,
                offset=item.offset,
                size=item.size,
                crc32c=mask(item.crc),
            )
        pairs.append((item.key, entry.encode()))
    with open(path, "wb") as file:
        file.write(build_table(pairs))
        file.flush()
        os.fsync(file.fileno())


def _write_data(path: str, items: list[_Item], byteorder: ByteOrder) -> None:
    with open(path, "wb") as file:
        offset = 0
        for item in items:
            if item.code != STRING and offset % _ALIGN:
                padding = _ALIGN - offset % _ALIGN
                file.write(bytes(padding))
                offset += padding
            item.offset, crc, size = offset, 0, 0
            for block in _blocks(item, byteorder):
                if item.code != STRING:
                    crc = crc32c(block, crc)
                if block.size:
                    file.write(block.reshape(-1).view(np.uint8).data)
                size += block.nbytes
            item.size = size
            if item.code != STRING:
                item.crc = crc
            offset += size
        file.flush()
        os.fsync(file.fileno())


def write_bundle(
    prefix: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    dtypes: Mapping[str, str] | None = None,
    num_shards: int = 1,
    byteorder: ByteOrder = "<",
    update_state: bool = False,
) -> str:
    """Writes the checkpoint `prefix` holding `tensors`; returns `prefix`.

    Args:
      prefix: the checkpoint's path without `.index` (`run/model.ckpt-100`);
        its directory is created.
      tensors: name -> array (or `SlicedTensor`). Names are any non-empty
        unicode strings ('/' included). Arrays of any numeric dtype, bool,
        or strings (bytes / str / object arrays of those); float32 values
        can be stored as bfloat16 or float16 through `dtypes`.
      dtypes: name -> TensorFlow dtype name to store the tensor as
        ('bfloat16', 'float16', 'int64', ...), for the tensors that should
        not keep their numpy dtype.
      num_shards: data files to spread the tensors over (TensorFlow's
        sharded saves write several; 1 is TF's default).
      byteorder: '<' (little-endian, what TensorFlow writes on every
        common machine) or '>'.
      update_state: also record the checkpoint as the latest in the
        directory's `checkpoint` state file (written after the bundle).

    Raises:
      ValueError / TypeError: a bad name, value, dtype or slice (nothing
        is written).
      OSError: the files can't be written (nothing is left behind; an
        earlier checkpoint at another prefix is untouched).
    """
    if not isinstance(prefix, (str, os.PathLike)) or not os.fspath(prefix):
        raise ValueError(f"write_bundle: `prefix` must be a non-empty path. Received: {prefix!r}.")
    prefix = os.fspath(prefix)
    if not isinstance(tensors, Mapping):
        raise TypeError(
            f"write_bundle: `tensors` must be a mapping of name -> array. Received: {type(tensors).__name__}."
        )
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or not 1 <= num_shards <= 99999:
        raise ValueError(f"write_bundle: `num_shards` must be an int in [1, 99999]. Received: {num_shards!r}.")
    if byteorder not in ("<", ">"):
        raise ValueError(f"write_bundle: `byteorder` must be '<' or '>'. Received: {byteorder!r}.")
    items = _plan(tensors, dict(dtypes or {}))

    # Spread the data over the shards: each item goes to the least-filled shard so far.
    fill = [0] * num_shards
    by_shard: list[list[_Item]] = [[] for _ in range(num_shards)]
    for item in items:
        if item.values is None:
            continue
        item.shard = min(range(num_shards), key=fill.__getitem__)
        fill[item.shard] += item.values.nbytes + 16
        by_shard[item.shard].append(item)

    directory = os.path.dirname(prefix) or "."
    token = secrets.token_hex(8)
    finals = [data_file(prefix, shard, num_shards) for shard in range(num_shards)]
    temps = [f"{path}.tempstate{token}" for path in finals]
    index_tmp = f"{index_file(prefix)}.tempstate{token}"
    with created_directories(directory):  # a failed write removes the directories it made
        try:
            for shard in range(num_shards):
                _write_data(temps[shard], by_shard[shard], byteorder)
            _write_index(index_tmp, items, num_shards, byteorder)
            # Commit: the old index goes first, so no reader ever pairs it with the new data files.
            if os.path.lexists(index_file(prefix)):
                os.remove(index_file(prefix))
            for temp, final in zip(temps, finals):
                os.replace(temp, final)
            os.replace(index_tmp, index_file(prefix))
        finally:
            for path in temps + [index_tmp]:
                if os.path.lexists(path):
                    os.remove(path)
        fsync_directory(directory)
        for stale in set(data_files(prefix)) - set(finals):
            os.remove(stale)
        if update_state:
            try:
                record_latest(prefix)
            except BaseException:
                # The state file is as it was: so is the directory (a rerun then finds nothing in the way).
                delete_bundle(prefix)
                raise
    return prefix


def delete_bundle(prefix: str | os.PathLike[str]) -> None:
    """Removes the checkpoint at `prefix` (its index first, so it is never seen half-deleted)."""
    prefix = os.fspath(prefix)
    if os.path.lexists(index_file(prefix)):
        os.remove(index_file(prefix))
    for path in data_files(prefix):
        os.remove(path)


# A bundle written by several processes ---------------------------------------------------------------

ShardEntry = _Item
"""One index entry a process's data shard holds (values dropped), for `write_shared_index`."""


def write_data_shard(
    prefix: str,
    tensors: Mapping[str, Any],
    *,
    shard: int,
    num_shards: int,
    token: str,
    byteorder: ByteOrder = "<",
) -> list[ShardEntry]:
    """Writes this process's data file of a bundle several processes write, under a temporary name.

    `tensors` are this process's: whole tensors, or `SlicedTensor`s holding
    only its parts (the other processes write the rest). The file is
    `<data file of shard>.tempstate<token>`; `write_shared_index` then
    writes the index of every process's entries, and each file is renamed
    to its final name (engine/distributed/bundle.py runs the protocol).

    Returns the index entries of this shard (without their values).

    Raises:
      ValueError / TypeError: as `write_bundle`; nothing is written.
      OSError: the file can't be written (nothing is left behind).
    """
    items = _plan(tensors, {}, partial=True)
    path = f"{data_file(prefix, shard, num_shards)}.tempstate{token}"
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    try:
        _write_data(path, [item for item in items if item.values is not None], byteorder)
    except BaseException:
        if os.path.lexists(path):
            os.remove(path)
        raise
    for item in items:
        item.shard = shard
        item.values = None if not item.is_slice and item.slices else _NO_VALUES
    return items


_NO_VALUES = np.zeros(0, np.uint8)  # marks an entry with data in a shard (its values are not kept)


def write_shared_index(
    prefix: str, shards: Sequence[Sequence[ShardEntry]], *, token: str, byteorder: ByteOrder = "<"
) -> str:
    """Writes the index of a bundle from every shard's entries (`write_data_shard`), under a temporary name;
    returns that name (`<prefix>.index.tempstate<token>`).

    A partitioned tensor's slices may come from several shards: its entry
    lists them all, and they must cover it without overlapping.

    Raises:
      ValueError: two shards hold the same tensor or slice, or a partitioned
        tensor's slices disagree on dtype or shape, overlap or leave a gap.
    """
    entries: dict[bytes, _Item] = {}
    for items in shards:
        for item in items:
            known = entries.get(item.key)
            if known is None:
                entries[item.key] = dataclasses.replace(item)
                continue
            if known.is_slice or item.is_slice or not (known.slices and item.slices):
                raise ValueError(f"write_shared_index: {item.label} is written by two shards.")
            if known.code != item.code or known.shape != item.shape:
                raise ValueError(f"write_shared_index: the shards disagree on the dtype or shape of {item.label}.")
            known.slices = known.slices + item.slices
    for item in entries.values():
        if item.slices and not item.is_slice:
            boxes = [
                tuple((0, item.shape[d]) if n == FULL else (s, n) for d, (s, n) in enumerate(extents))
                for extents in item.slices
            ]
            if any(overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]):
                raise ValueError(f"write_shared_index: slices of {item.label} overlap.")
            covered = sum(math.prod(n for _, n in box) for box in boxes)
            if covered != math.prod(item.shape):
                raise ValueError(
                    f"write_shared_index: the slices of {item.label} cover {covered} of its "
                    f"{math.prod(item.shape)} elements; they must cover the tensor."
                )
    path = f"{index_file(prefix)}.tempstate{token}"
    items = [dataclasses.replace(entries[key], slices=tuple(sorted(entries[key].slices))) for key in sorted(entries)]
    _write_index(path, items, len(shards), byteorder)
    return path
