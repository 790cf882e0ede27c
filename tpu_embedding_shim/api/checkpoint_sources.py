"""Where `tf.train.Checkpoint.restore` finds values: a TensorFlow object-based checkpoint, or an older save.

Both kinds answer the same question, "the value saved for the object at
this path" (a path is the local names from the checkpoint's root, as
`('embedding', 'items/accumulators')`), with a `Saved` tensor that knows
its key, stored shape and dtype before it is read:

- `BundleSource`: a TensorFlow checkpoint (`<prefix>.index` + data files),
  TensorFlow's or ours. Paths are walked through its object graph
  (`_CHECKPOINTABLE_OBJECT_GRAPH`). A checkpoint without one (written by
  a name-based `Saver`) is looked up by variable name instead, as
  TensorFlow's name-based restore does: the embedding tables and slots
  (`items`, `items/accumulators`) and `save_counter` are found that way.
- `LegacySource`: a directory written by this project's `tf.train.Checkpoint`
  before it wrote TensorFlow's format (`checkpoint.json`, `.npz` files and
  engine checkpoints). Its objects get the paths they get today.

`open_source(path)` picks one. Reading a `Saved` checks its CRC-32C (or,
in an older save, its sha256 / zip CRC) and raises `CheckpointError` on
any damage, naming the file and the key.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import CheckpointError, not_a_regular_file
from ..engine import load_checkpoint as load_engine_checkpoint
from ..engine.tf_bundle import (
    OBJECT_GRAPH_KEY,
    VARIABLE_VALUE,
    BundleReader,
    NotFoundError,
    TrackableObjectGraph,
    WireError,
    code_of,
    escape_local_name,
    index_suffix_hint,
    is_bundle,
    name_of,
)
from .checkpoint_reader import latest_checkpoint

__all__ = ["Saved", "BundleSource", "LegacySource", "open_source", "shim_key", "LEGACY_MANIFEST", "SHIM_KEY"]

Path = tuple[str, ...]

LEGACY_MANIFEST = "checkpoint.json"
LEGACY_FORMAT = "tpu_embedding_shim.train.Checkpoint"
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

    def __init__(self, key: str, shape: tuple[int, ...], dtype: str, read: Callable[[], np.ndarray]):
        self.key, self.shape, self.dtype, self._read = key, tuple(shape), dtype, read

    def read(self) -> np.ndarray:
        return self._read()


class BundleSource:
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
        return Saved(key, self.reader.shape(key), self.reader.dtype_name(key), lambda: self.reader.read(key))

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


class LegacySource:
    """A save of this project's `tf.train.Checkpoint` in its own format (a `checkpoint.json` directory).

    Paths are the object's name, then the array's key (a dict of arrays),
    the weight's index (`get_weights`), the table or `<table>/<slot>` (an
    embedding); an object saved as `root` has its values at the top.
    """

    def __init__(self, directory: str):
        self.where = directory
        manifest_path = os.path.join(directory, LEGACY_MANIFEST)
        kind = not_a_regular_file(manifest_path)
        if kind is not None:
            raise CheckpointError(f"Checkpoint {directory!r}: {LEGACY_MANIFEST} is {kind}, not a manifest file.")
        try:
            with open(manifest_path, encoding="utf-8") as file:
                manifest = json.load(file)
        except (OSError, ValueError) as error:
            raise CheckpointError(f"Checkpoint {directory!r}: {LEGACY_MANIFEST} can't be read ({error}).") from None
        if (
            not isinstance(manifest, dict)
            or manifest.get("format") != LEGACY_FORMAT
            or not isinstance(manifest.get("objects"), dict)
        ):
            raise CheckpointError(f"{manifest_path} is not a {LEGACY_FORMAT} manifest.")
        self.values: dict[Path, tuple[str, np.ndarray]] = {}
        self.steps: dict[Path, int] = {}
        self.save_counter = manifest.get("save_counter")
        for name, entry in manifest["objects"].items():
            self._load(directory, name, entry)

    def _load(self, directory: str, name: str, entry: Any) -> None:
        prefix: Path = () if name == "root" else (name,)
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind == "embedding":
            state, step, _ = load_engine_checkpoint(os.path.join(directory, str(entry.get("path"))))
            label = os.path.join(directory, str(entry.get("path")))
            for table, arrays in state.items():
                for slot, array in arrays.items():
                    name_here = table if slot == "embedding" else f"{table}/{slot}"
                    self.values[prefix + (name_here,)] = (f"{label}: table {table!r} {slot}", array)
            self.steps[prefix] = step
            return
        if kind not in ("array", "arrays", "weights") or not isinstance(entry.get("keys"), list):
            raise CheckpointError(
                f"Checkpoint {directory!r}: object {name!r} has an entry this version can't read: {entry!r}."
            )
        file_name = os.path.basename(str(entry.get("file")))
        path = os.path.join(directory, file_name)
        if not_a_regular_file(path) is not None:
            raise CheckpointError(
                f"Checkpoint {directory!r}: {file_name} of object {name!r} is {not_a_regular_file(path)}, not a file."
            )
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: np.array(data[key]) for key in entry["keys"]}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise CheckpointError(
                f"Checkpoint {directory!r}: {file_name} of object {name!r} can't be read: {error}."
            ) from None
        for key, array in arrays.items():
            if kind == "array":
                local: Path = ()
            elif kind == "arrays":
                local = (key,)
            else:
                local = (key[1:],)  # 'w0' -> '0'
            self.values[prefix + local] = (f"{path}[{key!r}]", array)

    def lookup(self, path: Path, full_name: str | None = None) -> Saved | None:
        found = self.values.get(tuple(path))
        if found is None:
            return None
        array = found[1]
        return Saved("/".join(path), array.shape, name_of(code_of(array.dtype)), lambda: array)

    def extra(self, path: Path, name: str) -> Saved | None:
        """The engine's global step of the embedding saved at `path` (the only such value of this format)."""
        if name != "global_step" or tuple(path) not in self.steps:
            return None
        step = np.int64(self.steps[tuple(path)])
        return Saved(f"{self.where}: {'/'.join(path)} step", (), "int64", lambda: np.asarray(step))

    def keys(self) -> list[str]:
        return sorted("/".join(path) for path in self.values)


def open_source(path: str) -> Any:
    """The source at `path`: a TensorFlow checkpoint prefix, or a directory of this project's older format.

    Raises:
      NotFoundError: nothing restorable there (a directory of checkpoints
        gets a hint at `tf.train.latest_checkpoint`).
      CheckpointError: a damaged index, object graph or manifest.
    """
    if is_bundle(path):
        return BundleSource(path)
    if os.path.isfile(os.path.join(path, LEGACY_MANIFEST)):
        return LegacySource(path)
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
        f"No checkpoint at {path!r}: neither {path}.index nor {os.path.join(path, LEGACY_MANIFEST)} exists.{hint}"
    )
