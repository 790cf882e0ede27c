"""Tables kept in memory-mapped `.npy` files, for tables larger than RAM.

`Engine(spec, table_files={"big": "/data/big.npy"})` keeps table `big` in
`/data/big.npy` and each of its optimizer slots beside it
(`/data/big.npy.accumulators.npy`, ...), opened with `numpy.lib.format.
open_memmap`. The operating system pages rows in and out: a step touches
only the rows it looks up. Updates are written into the mapping (the OS
writes them back to the file); `Engine.save` still writes a checkpoint.

- If the files exist (shape [V, D], float32), they ARE the table: the
  initializer is not called, so a table can be resumed from its files.
  Each is checked first: a regular file whose size is what its header
  promises. A file cut short after it was complete is refused (numpy
  would extend it with zeros and the missing rows would read as zeros).
- Otherwise they are created and filled in blocks of rows, so no full-table
  temporary is ever made. Each file is made as `<path>.partial`, its disk
  space allocated up front (a full disk is an `OSError` at creation, not a
  SIGBUS in the middle of a step), filled, flushed and only then renamed to
  `<path>`; the slots first, the table last. So a table file that exists is
  complete, and a creation that was killed leaves only `.partial` files,
  which the next open removes (saying so) before it builds the table anew.
  The values are those of an in-memory table built with the same seed
  (`initialization.py` draws any rows alone: random ones block by block,
  each from its own stream).

Needs the table in id order (one shard, or `div` shards: their storage is
the id order); one file per table.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..spec import EmbeddingSpec, OptimizerSpec, TableSpec
from ..spec.initializers import Constant
from .files import not_a_regular_file, read_npy_header
from .initialization import initial_rows

__all__ = ["open_table", "slot_path", "rank_file", "check_table_files", "BLOCK_ROWS"]

log = logging.getLogger(__name__)

BLOCK_ROWS = 1 << 18
"""Rows initialized per block (64 MiB at D = 64)."""


def check_table_files(spec: EmbeddingSpec, table_files: Mapping[str, str] | None) -> dict[str, str]:
    """`table_files` checked against the spec's tables: table name -> path (None: no file tables)."""
    if table_files is None:
        return {}
    if not isinstance(table_files, Mapping):
        raise TypeError(
            f"Argument `table_files` must be a dict of table name -> .npy path. Received: {type(table_files).__name__}."
        )
    names = [t.name for t in spec.tables]
    unknown = sorted(set(table_files) - set(names))
    if unknown:
        raise ValueError(f"Argument `table_files` names unknown tables {unknown}; tables are {names}.")
    return {name: str(path) for name, path in table_files.items()}


def rank_file(path: str, rank: int, world_size: int) -> str:
    """Where rank `rank` of `world_size` keeps its rows of the table given as `path`:
    `/data/big.npy` -> `/data/big.rank-00001-of-00002.npy` (a file per rank, on its host's disk)."""
    root, extension = os.path.splitext(path)
    return f"{root}.rank-{rank:05d}-of-{world_size:05d}{extension or '.npy'}"


def slot_path(path: str, slot: str) -> str:
    """Where slot `slot` of the table in `path` is kept."""
    return f"{path}.{slot}.npy"


def _check_file(path: str, shape: tuple[int, int]) -> None:
    """ValueError unless `path` is a regular `.npy` file of float32 `shape` holding every byte its header
    promises. numpy would map a short file after extending it with zeros: the missing rows read as zeros."""
    kind = not_a_regular_file(path)
    if kind is not None:
        raise ValueError(f"The table file {path!r} is {kind}, not a regular file. Remove it to start a new table.")
    with open(path, "rb") as file:
        try:
            found, dtype = read_npy_header(file)
        except (ValueError, EOFError, OSError) as error:
            raise ValueError(
                f"The table file {path!r} is not a readable .npy file ({error}). Remove it to start a new table."
            ) from None
        start = file.tell()
    if tuple(found) != shape or dtype != np.float32:
        raise ValueError(
            f"The table file {path!r} holds {dtype} {tuple(found)}; expected float32 {shape}. "
            "Remove it to start a new table."
        )
    expected = start + shape[0] * shape[1] * 4
    size = os.path.getsize(path)
    if size != expected:
        raise ValueError(
            f"The table file {path!r} has {size:,} bytes; its header ({shape[0]:,} x {shape[1]} float32) needs "
            f"{expected:,}: the file was cut short (or extended) after it was written. Restore it from a "
            "checkpoint, or remove it to start a new table."
        )


def _open_existing(path: str, shape: tuple[int, int]) -> np.ndarray:
    """The mapping of a complete table or slot file, checked against `shape` and its size first."""
    _check_file(path, shape)
    mapped = np.lib.format.open_memmap(path, mode="r+")
    if mapped.shape != shape or mapped.dtype != np.float32:
        raise ValueError(
            f"The table file {path!r} holds {mapped.dtype} {mapped.shape}; expected float32 {shape}. "
            "Remove it to start a new table."
        )
    return mapped.view(np.ndarray)


def _partial(path: str) -> str:
    return path + ".partial"


def _create(path: str, shape: tuple[int, int], fill: Callable[[np.ndarray], None]) -> np.ndarray:
    """A new file at `path`, complete or absent: made as `<path>.partial` with its space allocated,
    filled by `fill(array)`, flushed, then renamed. Any failure removes the partial file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    partial = _partial(path)
    try:
        mapped = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=shape)
        size = os.path.getsize(partial)
        fd = os.open(partial, os.O_RDWR)
        try:
            if hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError as error:
                    if error.errno == errno.ENOSPC:
                        raise OSError(
                            errno.ENOSPC, f"No space left on the device for the table file {path!r} ({size:,} bytes)"
                        ) from None
                    if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
            array = mapped.view(np.ndarray)
            fill(array)
            mapped.flush()
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    return array


def _remove_partials(paths: list[str]) -> None:
    """Remove what a killed creation left (`.partial` files), saying so."""
    for path in paths:
        if os.path.exists(_partial(path)):
            log.warning(
                "Removing %s: an incomplete table file from a creation that did not finish; the table is built again.",
                _partial(path),
            )
            os.remove(_partial(path))


def open_table(
    path: str,
    table: TableSpec,
    optimizer: OptimizerSpec | None,
    initializer: Callable[..., Any],
    rows: slice = slice(None),
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(table, slot name -> slot): arrays backed by files, created and initialized if missing
    (`initializer`: the table's, seeded as the engine seeds it). `rows`: the rows of the table the
    files hold (a rank's rows under mpiexec: `slice(start, stop)` or `slice(rank, V, W)`), default all."""
    start, stop, step = rows.indices(table.vocabulary_size)
    owned = range(start, stop, step)
    shape = (len(owned), table.dim)
    initial_slots = optimizer.slot_initial_values() if optimizer is not None else {}
    _remove_partials([path] + [slot_path(path, name) for name in initial_slots])
    if os.path.exists(path):  # a complete table; a slot it lacks (the optimizer changed) starts anew
        slots = {
            name: _open_existing(slot_path(path, name), shape)
            if os.path.exists(slot_path(path, name))
            else _create(slot_path(path, name), shape, _filler(initial))
            for name, initial in initial_slots.items()
        }
        return _open_existing(path, shape), slots
    if isinstance(initializer, Constant):
        initializer.check_shape((table.vocabulary_size, table.dim))  # a wrong size raises before any file exists
    # A new table: slot files left from an older one are replaced; the table file comes last.
    slots = {name: _create(slot_path(path, name), shape, _filler(initial)) for name, initial in initial_slots.items()}
    full = _create(path, shape, lambda array: _initialize(array, table, initializer, owned))
    return full, slots


def _filler(value: float) -> Callable[[np.ndarray], None]:
    def fill(array: np.ndarray) -> None:
        for start in range(0, array.shape[0], BLOCK_ROWS):
            array[start : start + BLOCK_ROWS] = value

    return fill


def _initialize(full: np.ndarray, table: TableSpec, initializer: Callable[..., Any], owned: range) -> None:
    """The initial values of the rows `owned`, block by block (no full-table temporary for the built-in
    initializers)."""
    for start in range(0, full.shape[0], BLOCK_ROWS):
        block = owned[start : start + BLOCK_ROWS]
        full[start : start + len(block)] = initial_rows(table, initializer, slice(block.start, block.stop, block.step))
