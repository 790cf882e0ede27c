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
  A `RowIdInitializer` gives the same values as in memory; a constant one
  too (a number, or an array of V * D values, each block taking its rows'
  values). A random initializer is called once per block with a seed
  derived from (its seed, block index): the values have the same
  distribution, not the same numbers as an in-memory table built from the
  same seed.

Needs the table in id order (one shard, or `div` shards: their storage is
the id order); one file per table.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
from collections.abc import Callable

import numpy as np

from ..spec import OptimizerSpec, RowIdInitializer, TableSpec
from ..spec.initializers import Constant
from .files import not_a_regular_file, read_npy_header

__all__ = ["open_table", "slot_path", "BLOCK_ROWS"]

log = logging.getLogger(__name__)

BLOCK_ROWS = 1 << 18
"""Rows initialized per block (64 MiB at D = 64)."""


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


def _values_per_entry(initializer) -> np.ndarray | None:
    """The flat values of a `Constant` initializer given as an array of many values, else None."""
    if isinstance(initializer, Constant) and isinstance(initializer.value, np.ndarray) and initializer.value.size > 1:
        return initializer.value.reshape(-1)
    return None


def _block_initializer(initializer, start: int, stop: int, block: int, dim: int, rng: np.random.Generator):
    """The initializer of rows start..stop: the same values the whole table would get, where they are defined."""
    if isinstance(initializer, RowIdInitializer):
        return dataclasses.replace(initializer, offset=initializer.offset + start)
    flat = _values_per_entry(initializer)
    if flat is not None:
        return Constant(flat[start * dim : stop * dim])
    seed = getattr(initializer, "seed", "absent")
    if seed == "absent":
        return initializer
    base = int(rng.integers(2**31)) if seed is None else int(seed)
    return dataclasses.replace(initializer, seed=int(np.random.SeedSequence([base, block]).generate_state(1)[0]))


def open_table(
    path: str, table: TableSpec, optimizer: OptimizerSpec | None, rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(table, slot name -> slot): arrays backed by files, created and initialized if missing."""
    shape = (table.vocabulary_size, table.dim)
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
    constant = table.effective_initializer()
    if isinstance(constant, Constant) and _values_per_entry(constant) is not None:
        constant.check_shape(shape)  # a wrong size raises here, before any file is created
    # A new table: slot files left from an older one are replaced; the table file comes last.
    slots = {name: _create(slot_path(path, name), shape, _filler(initial)) for name, initial in initial_slots.items()}
    full = _create(path, shape, lambda array: _initialize(array, table, rng))
    return full, slots


def _filler(value: float) -> Callable[[np.ndarray], None]:
    def fill(array: np.ndarray) -> None:
        for start in range(0, array.shape[0], BLOCK_ROWS):
            array[start : start + BLOCK_ROWS] = value

    return fill


def _initialize(full: np.ndarray, table: TableSpec, rng: np.random.Generator) -> None:
    """The table's initial values, block by block (no full-table temporary)."""
    base_rng = np.random.default_rng(int(rng.integers(2**31)))
    for block, start in enumerate(range(0, full.shape[0], BLOCK_ROWS)):
        stop = min(start + BLOCK_ROWS, full.shape[0])
        init = _block_initializer(table.effective_initializer(), start, stop, block, full.shape[1], base_rng)
        values = np.asarray(init((stop - start, full.shape[1]), np.float32), dtype=np.float32)
        if values.shape != (stop - start, full.shape[1]) or not np.all(np.isfinite(values)):
            raise ValueError(f"The initializer of table {table.name!r} returned bad values for rows {start}..{stop}.")
        full[start:stop] = values
