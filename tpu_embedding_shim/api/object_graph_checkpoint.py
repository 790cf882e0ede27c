"""A TensorFlow object-based checkpoint (`tf.train.Checkpoint`'s), read where `tf.train.Checkpoint.restore`
finds values.

`ObjectGraphCheckpoint` answers one question, "the value saved for the
object at this path" (a path is the local names from the checkpoint's
root, as `('embedding', 'items/accumulators')`), with a `Saved` tensor
that knows its key, stored shape and dtype before it is read. Paths are
walked through the checkpoint's object graph (`_CHECKPOINTABLE_OBJECT_GRAPH`).
A checkpoint without one (written by a name-based `Saver`) is looked up by
variable name instead, as TensorFlow's name-based restore does: the
embedding tables and slots (`items`, `items/accumulators`) and
`save_counter` are found that way. Reading a `Saved` checks its CRC-32C
and raises `CheckpointError` on any damage, naming the file and the key.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from ..engine import CheckpointError
from ..engine.tf_bundle import (
    OBJECT_GRAPH_KEY,
    VARIABLE_VALUE,
    BundleReader,
    NotFoundError,
    TrackableObjectGraph,
    WireError,
    escape_local_name,
    index_suffix_hint,
    is_bundle,
)
from .checkpoint_reader import latest_checkpoint

__all__ = ["Saved", "ObjectGraphCheckpoint", "open_object_graph_checkpoint", "shim_key", "SHIM_KEY"]

Path = tuple[str, ...]

SHIM_KEY = ".ATTRIBUTES/TPU_EMBEDDING_SHIM_"
"""Keys `<object path>/.ATTRIBUTES/TPU_EMBEDDING_SHIM_<name>` hold what TensorFlow has no variable for (the
engine's global step): the form TensorFlow gives a saved attribute, so the TensorFlow bridge's trackables
(`tpu_embedding_shim.tensorflow`) write the same key. TensorFlow's own objects never ask for it."""


def shim_key(path: Path, name: str) -> str:
    """The key of this project's value `name` of the object at `path`
    (`embedding/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step`)."""
    return f"{'/'.join(escape_local_name(p) for p in path)}/{SHIM_KEY}{name}"


class Saved:
    """One saved tensor: its key, stored shape and TensorFlow dtype name, and how to read (and check) it."""

    def __init__(
        self,
        key: str,
        shape: tuple[int, ...],
        dtype: str,
        read: Callable[[], np.ndarray],
        read_rows: Callable[[slice | np.ndarray], np.ndarray] | None = None,
    ):
        self.key, self.shape, self.dtype, self._read, self._read_rows = key, tuple(shape), dtype, read, read_rows

    def read(self) -> np.ndarray:
        return self._read()

    def read_rows(self, rows: slice | np.ndarray) -> np.ndarray:
        """Rows `rows` of the tensor (its first axis), without reading the rest when the source can."""
        return self._read()[rows] if self._read_rows is None else self._read_rows(rows)


class ObjectGraphCheckpoint:
    """A TensorFlow checkpoint, its tensors found through its object graph (or by name without one)."""

    def __init__(self, prefix: str):
        self.where = prefix
        self.reader = BundleReader(prefix)
        self.graph: TrackableObjectGraph | None = None
        if OBJECT_GRAPH_KEY in self.reader:
            try:
                self.graph = TrackableObjectGraph.decode(bytes(self.reader.read(OBJECT_GRAPH_KEY).reshape(-1)[0]))
            except (WireError, IndexError) as error:
                raise CheckpointError(
                    f"Checkpoint {prefix!r}: {OBJECT_GRAPH_KEY} is not a TrackableObjectGraph ({error})."
                ) from None

    def _saved(self, key: str) -> Saved | None:
        if key not in self.reader:
            return None
        return Saved(
            key,
            self.reader.shape(key),
            self.reader.dtype_name(key),
            lambda: self.reader.read(key),
            lambda rows: self.reader.read_rows(key, rows),
        )

    def lookup(self, path: Path, full_name: str | None = None) -> Saved | None:
        """The variable at `path` (by `full_name` in a checkpoint without an object graph), or None."""
        if self.graph is None:
            return self._saved(full_name) if full_name else None
        node_id = self.graph.resolve(path)
        if node_id is None:
            return None
        attribute = self.graph.attribute(node_id, VARIABLE_VALUE)
        if attribute is None:
            return None
        saved = self._saved(attribute.checkpoint_key)
        if saved is None:
            raise CheckpointError(
                f"Checkpoint {self.where!r}: the object graph names the key "
                f"{attribute.checkpoint_key!r}, which the checkpoint does not hold."
            )
        return saved

    def extra(self, path: Path, name: str) -> Saved | None:
        """This project's value `name` of the object at `path`, kept outside the object graph (None if absent)."""
        return self._saved(shim_key(path, name))

    def keys(self) -> list[str]:
        """Every key that holds an object's value (the object graph's attributes, or every tensor without one)."""
        if self.graph is None:
            return sorted(self.reader.names())
        return sorted({a.checkpoint_key for node in self.graph.nodes for a in node.attributes})


def open_object_graph_checkpoint(path: str) -> ObjectGraphCheckpoint:
    """The checkpoint at the prefix `path` (`<path>.index` and its data files).

    Raises:
      NotFoundError: nothing restorable there (a directory of checkpoints
        gets a hint at `tf.train.latest_checkpoint`).
      CheckpointError: a damaged index, object graph or manifest.
    """
    if is_bundle(path):
        return ObjectGraphCheckpoint(path)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        hint = (
            f" It is a directory: did you mean tf.train.latest_checkpoint({path!r}) = {latest!r}?"
            if latest
            else " It is a directory, with no checkpoint recorded in it."
        )
    else:
        hint = index_suffix_hint(path)
    raise NotFoundError(
        f"No checkpoint at {path!r}: {path}.index does not exist (a checkpoint is a prefix such as ckpt/ckpt-1).{hint}"
    )
