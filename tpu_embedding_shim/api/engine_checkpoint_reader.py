"""The project's own checkpoints (engine format) seen as named tensors, for `tf.train.load_checkpoint`.

An engine checkpoint (`Engine.save`, `engine.checkpoint.save_checkpoint`:
a directory of `.npy` files and a `manifest.json`) holds, per table, the
whole embedding and every optimizer slot, and the global step. Read
through `tf.train.load_checkpoint` it holds the tensors

- `<table>`: the `[vocabulary_size, dim]` embedding;
- `<table>/<slot>`: each slot, under the engine's slot name
  (`accumulators`, `momenta`, `velocities`, `linears`, `ms`, `mom`);
- `global_step`: the checkpoint's step, an int64 scalar.

These are the keys `tpu-embedding-shim checkpoint convert` writes into a
TensorFlow checkpoint, so both formats read alike. `EngineCheckpoint` has
the reading interface of `engine.tf_bundle.BundleReader` (`names`,
`shape`, `dtype`, `dtype_name`, `read`), which `CheckpointReader` wraps.
Each array is checked against its sha256 when it is read.

>>> import tempfile, numpy as np
>>> from tpu_embedding_shim.engine.checkpoint import save_checkpoint
>>> path = save_checkpoint(tempfile.mkdtemp(), {"users": {"embedding": np.ones((3, 2), np.float32),
...                                                       "accumulators": np.full((3, 2), 0.1, np.float32)}},
...                        step=12, spec_structure={"users": {"vocabulary_size": 3, "dim": 2,
...                                                            "slots": ["accumulators"]}}, fingerprint="")
>>> checkpoint = EngineCheckpoint(path)
>>> checkpoint.names(), checkpoint.shape("users/accumulators"), int(checkpoint.read("global_step"))
(['global_step', 'users', 'users/accumulators'], (3, 2), 12)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..engine import EMBEDDING, MANIFEST, CheckpointError, read_array, read_manifest
from ..engine.tf_bundle import CODES, NotFoundError, code_of

__all__ = ["EngineCheckpoint", "is_engine_checkpoint", "engine_name", "GLOBAL_STEP"]

GLOBAL_STEP = "global_step"


def is_engine_checkpoint(path: str) -> bool:
    """True when `path` is an engine checkpoint directory (it has a `manifest.json`)."""
    return os.path.isfile(os.path.join(path, MANIFEST))


def engine_name(table: str, slot: str) -> str:
    """The tensor name of a table's array: `<table>` for its embedding, `<table>/<slot>` for a slot."""
    return table if slot == EMBEDDING else f"{table}/{slot}"


class EngineCheckpoint:
    """One engine checkpoint directory, read as named tensors (see the module).

    Args:
      path: the checkpoint directory (`<directory>/ckpt-<step>`, the one
        holding `manifest.json`).

    Raises:
      CheckpointError: no manifest there, a malformed one, a table without
        an embedding, or two arrays that would get the same name.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self.prefix = self.path
        self.manifest = read_manifest(self.path)
        self.step = int(self.manifest["step"])
        self._entries: dict[str, dict[str, Any]] = {}
        tables = {entry["table"] for entry in self.manifest["arrays"]}
        embedded = {entry["table"] for entry in self.manifest["arrays"] if entry["slot"] == EMBEDDING}
        if tables - embedded:
            raise CheckpointError(
                f"Checkpoint {self.path!r}: table {sorted(tables - embedded)[0]!r} has no 'embedding' array."
            )
        for entry in self.manifest["arrays"]:
            name = engine_name(entry["table"], entry["slot"])
            other = self._entries.get(name)
            if other is not None or name == GLOBAL_STEP:
                what = "the global step" if other is None else f"table {other['table']!r} slot {other['slot']!r}"
                raise CheckpointError(
                    f"Checkpoint {self.path!r}: table {entry['table']!r} slot {entry['slot']!r} and {what} would "
                    f"both be read as tensor {name!r}; rename one of the tables to read it as a TensorFlow "
                    "checkpoint (engine.checkpoint.load_checkpoint reads it as it is)."
                )
            self._entries[name] = entry
        self._names = sorted([GLOBAL_STEP, *self._entries], key=lambda n: n.encode("utf-8", "surrogateescape"))

    def names(self) -> list[str]:
        """The tensor names, sorted as a TensorFlow checkpoint's keys (bytewise)."""
        return list(self._names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name == GLOBAL_STEP or name in self._entries)

    def table_and_slot(self, name: str) -> tuple[str, str]:
        """The (table, slot) a tensor name stands for ('embedding' for the table itself)."""
        entry = self._entry(name)
        return entry["table"], entry["slot"]

    def _entry(self, name: str) -> dict[str, Any]:
        if name not in self._entries:
            raise NotFoundError(f"Key {name!r} not found in checkpoint {self.path!r}.")
        return self._entries[name]

    def shape(self, name: str) -> tuple[int, ...]:
        if name == GLOBAL_STEP:
            return ()
        return tuple(self._entry(name)["shape"])

    def dtype(self, name: str) -> np.dtype:
        """The dtype of the array `read` returns."""
        if name == GLOBAL_STEP:
            return np.dtype(np.int64)
        try:
            return np.dtype(self._entry(name)["dtype"])
        except TypeError:
            raise CheckpointError(
                f"Checkpoint {self.path!r}: {MANIFEST}: tensor {name!r} has dtype "
                f"{self._entry(name)['dtype']!r}, which numpy does not know."
            ) from None

    def dtype_name(self, name: str) -> str:
        """TensorFlow's name of the dtype ('float32', 'int64', ...; numpy's where TensorFlow has none)."""
        dtype = self.dtype(name)
        try:
            code = code_of(dtype)
        except TypeError:
            return dtype.name
        return next(tf_name for tf_name, c in CODES.items() if c == code)

    def read(self, name: str, *, mmap: bool | None = None) -> np.ndarray:
        """The value of tensor `name`, checked against the manifest's sha256, shape and dtype.

        Args:
          name: the tensor's name.
          mmap: True: a copy-on-write memory map of the array's file (no
            copy in memory); otherwise the array is read into memory.

        Raises:
          NotFoundError: no such tensor.
          CheckpointError: the array's file is missing, corrupt or does not match the manifest.
        """
        if name == GLOBAL_STEP:
            return np.array(self.step, dtype=np.int64)
        return read_array(self.path, self._entry(name), mmap=bool(mmap))

    def read_all(self) -> dict[str, np.ndarray]:
        return {name: self.read(name) for name in self._names}
