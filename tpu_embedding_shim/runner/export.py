"""Export for CPU serving: the unsharded tables, the dense state, and a JSON manifest.

`TPUEstimator.export_embeddings(dir)` (and `export_saved_model(base)`,
which picks a timestamped sub-directory) writes::

    <dir>/
      manifest.json          # format, global_step, tables, features, dense state
      tables/tbl_movie.npy   # one full [V, D] float32 table per file, row i = id i
      dense_state.npz        # params['dense_state'] (dense weights, tensor-core tables)

Tables are always whole and in id order, whatever `num_shards` and
`partition_strategy` trained them; optimizer slots are not exported (a
checkpoint has them). The manifest lists, per feature, everything a CPU
lookup needs (table, combiner, max_sequence_length, vocabulary, default
value, OOV buckets, weight key), so `load_exported(dir).lookup(features)`
serves the same activations the model_fn saw in PREDICT mode, with numpy
only. Files are written to a temporary directory, fsynced and renamed
(`engine/files.py`). Under mpiexec, replica 0 writes each table as its
rows arrive from the replicas, a block at a time (`StreamedTable`): no
replica holds a whole table.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..checkpoints.state import DenseState
from ..engine import lookup as lookup_kernels
from ..engine import new_directory, not_a_regular_file, to_ragged
from ..spec import FeatureSpec

FORMAT = "tpu_embedding_shim.export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def _sha256(path: str) -> str:
    kind = not_a_regular_file(path)
    if kind is not None:  # a FIFO or a device would never end
        raise ValueError(f"Export file {path!r} is {kind}, not a regular file.")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _file_stem(name: str) -> str:
    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")
    return (stem or "table") + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]


class StreamedTable:
    """A table written as its rows arrive: its shape, and its rows in id order from a collective generator
    (`DistributedEngine.table_blocks`: arrays on the replica that writes, None on the others).

    `blocks()` is one generator, made at the first call: a writer that fails half-way and then `drain()`s
    goes on where it stopped, so every replica runs each block's collective exactly once.
    """

    def __init__(self, shape: tuple[int, int], blocks: Callable[[], Iterator[np.ndarray | None]]):
        self.shape = shape
        self._make = blocks
        self._blocks: Iterator[np.ndarray | None] | None = None

    def blocks(self) -> Iterator[np.ndarray | None]:
        if self._blocks is None:
            self._blocks = self._make()
        return self._blocks

    def drain(self) -> None:
        """Runs the collective to its end without writing."""
        for _ in self.blocks():
            pass


@dataclasses.dataclass
class ServedTables:
    """What a served model looks up: each table whole and in id order, what trained it, its combiner; the features."""

    tables: dict[str, np.ndarray | StreamedTable] = dataclasses.field(default_factory=dict)
    trained_by: dict[str, str] = dataclasses.field(default_factory=dict)
    combiners: dict[str, str] = dataclasses.field(default_factory=dict)
    features: list[FeatureSpec] = dataclasses.field(default_factory=list)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every table as a whole array (a SavedModel's variables): none may be streamed."""
        streamed = [name for name, table in self.tables.items() if isinstance(table, StreamedTable)]
        if streamed:
            raise TypeError(f"Tables {streamed} are streamed; a SavedModel needs them whole (served_tables()).")
        return {name: table for name, table in self.tables.items() if isinstance(table, np.ndarray)}


def served_tables(
    engine: Any, tensor_core: Any = None, dense_state: Any = None, *, streamed: bool = False
) -> ServedTables:
    """The engine's tables (if any), then those of the tensor-core columns (if any), read from `dense_state`.

    `streamed`: the engine's tables as `StreamedTable`s, gathered while they are written (an engine with
    `table_blocks`, over several processes); else whole arrays (a collective gather under mpiexec)."""
    served = ServedTables()
    if engine is not None:
        for table in engine.spec.tables:
            if streamed:
                shape = (table.vocabulary_size, table.dim)
                served.tables[table.name] = StreamedTable(shape, functools.partial(engine.table_blocks, table.name))
            else:
                served.tables[table.name] = engine.table(table.name)
            served.trained_by[table.name] = "embedding engine"
            served.combiners[table.name] = table.combiner
        served.features += list(engine.spec.features)
    if tensor_core is not None:
        for name, table in tensor_core.tables.items():
            served.tables[name] = np.asarray(dense_state[name])
            served.trained_by[name] = "model (tpu_tensor_core)"
            served.combiners[name] = table.combiner
        served.features += list(tensor_core.features)
    return served


def timestamped_dir(export_dir_base: Any) -> str:
    """A new `<export_dir_base>/<seconds since the epoch>` (the next free second if taken), as TensorFlow names
    exports."""
    base = os.fspath(export_dir_base)
    stamp = int(time.time())
    while os.path.exists(os.path.join(base, str(stamp))) or os.path.exists(os.path.join(base, f"temp-{stamp}")):
        stamp += 1
    return os.path.join(base, str(stamp))


def write_export(
    export_dir: str, served: ServedTables, *, dense_state: DenseState, global_step: int, extra: dict | None = None
) -> str:
    """Writes an export directory (must not exist yet); returns its path."""
    try:
        return _write_export(export_dir, served, dense_state=dense_state, global_step=global_step, extra=extra)
    finally:
        drain_streams(served)  # what a failure left of the streamed tables' collectives: the other replicas run them


def _write_export(
    export_dir: str, served: ServedTables, *, dense_state: DenseState, global_step: int, extra: dict | None
) -> str:
    export_dir = os.fspath(export_dir)
    if os.path.exists(export_dir):
        raise FileExistsError(f"Export directory {export_dir!r} already exists; exports are never overwritten.")
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    with new_directory(export_dir, temporary_prefix=".tmp-export-") as tmp:
        os.makedirs(os.path.join(tmp, "tables"))
        entries = []
        for name, array in served.tables.items():
            relative = f"tables/{_file_stem(name)}.npy"
            if isinstance(array, StreamedTable):
                shape = _save_streamed(os.path.join(tmp, relative), array)
            else:
                array = np.ascontiguousarray(array, dtype=np.float32)
                np.save(os.path.join(tmp, relative), array, allow_pickle=False)
                shape = array.shape
            entries.append(
                {
                    "name": name,
                    "file": relative,
                    "shape": list(shape),
                    "dtype": np.dtype(np.float32).str,
                    "sha256": _sha256(os.path.join(tmp, relative)),
                    "combiner": served.combiners[name],
                    "trained_by": served.trained_by[name],
                }
            )
        with open(os.path.join(tmp, "dense_state.npz"), "wb") as handle:
            handle.write(dense_state.to_bytes())
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "global_step": int(global_step),
            "tables": entries,
            "features": [_feature_to_json(f) for f in served.features],
            "dense_state": {"file": "dense_state.npz", "sha256": _sha256(os.path.join(tmp, "dense_state.npz"))},
            "extra": extra or {},
        }
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2, sort_keys=True)
            handle.write("\n")
    return export_dir


def _save_streamed(path: str, table: StreamedTable) -> tuple[int, int]:
    """`table` as a `.npy` file, written block by block as its rows arrive; its shape."""
    with open(path, "wb") as handle:
        header = {"descr": np.dtype(np.float32).str, "fortran_order": False, "shape": table.shape}
        np.lib.format.write_array_header_1_0(handle, header)
        for block in table.blocks():
            handle.write(np.ascontiguousarray(block, dtype=np.float32).tobytes())
    return table.shape


def drain_streams(served: ServedTables) -> None:
    """Runs every streamed table's collective to its end (the replicas that do not write)."""
    for table in served.tables.values():
        if isinstance(table, StreamedTable):
            table.drain()


def _feature_to_json(feature: FeatureSpec) -> dict[str, Any]:
    data = dataclasses.asdict(feature)
    if data.get("vocabulary") is not None:
        data["vocabulary"] = [v.item() if isinstance(v, np.generic) else v for v in data["vocabulary"]]
    return data


class ExportedModel:
    """An export read back: `tables`, `dense_state`, `manifest`, and `lookup(features)`.

    Example (a full, tested one is in docs/runner.md)::

        model = load_exported(path)
        activations, lengths = model.lookup({"movie": [[3], [7]]})
    """

    def __init__(self, path: str):
        self.path = os.fspath(path)
        manifest_path = os.path.join(self.path, MANIFEST)
        if not os.path.isfile(manifest_path):  # follows links: a FIFO or a device is not a file
            raise ValueError(f"No export at {self.path!r}: {MANIFEST} not found (or not a regular file).")
        with open(manifest_path, encoding="utf-8") as handle:
            self.manifest = json.load(handle)
        if self.manifest.get("format") != FORMAT:
            raise ValueError(f"{manifest_path!r} is not a {FORMAT} manifest.")
        self.tables: dict[str, np.ndarray] = {}
        self.combiners: dict[str, str] = {}
        for entry in self.manifest["tables"]:
            file = os.path.join(self.path, entry["file"])
            if _sha256(file) != entry["sha256"]:
                raise ValueError(f"Export {self.path!r}: {entry['file']} does not match its checksum.")
            self.tables[entry["name"]] = np.load(file, allow_pickle=False)
            self.combiners[entry["name"]] = entry["combiner"]
        self.features = [
            FeatureSpec(**{**f, "vocabulary": None if f.get("vocabulary") is None else tuple(f["vocabulary"])})
            for f in self.manifest["features"]
        ]
        dense = self.manifest["dense_state"]
        dense_path = os.path.join(self.path, dense["file"])
        if _sha256(dense_path) != dense["sha256"]:
            raise ValueError(f"Export {self.path!r}: {dense['file']} does not match its checksum.")
        self.dense_state = DenseState()
        with open(dense_path, "rb") as handle:
            self.dense_state.load_bytes(handle.read(), where=dense_path)
        self.global_step = self.manifest["global_step"]

    def lookup(self, features: Mapping[str, Any]):
        """(activations {feature: [B, D] or [B, L, D]}, sequence lengths {feature: [B]}) for serving."""
        activations, lengths = {}, {}
        for feature in self.features:
            if feature.name not in features:
                raise ValueError(f"Feature {feature.name!r} is missing. Received keys: {sorted(features)}.")
            weights = features.get(feature.weight_key) if feature.weight_key else None
            batch = to_ragged(features[feature.name], weights, feature=feature)
            table = self.tables[feature.table]
            if feature.is_sequence:
                activations[feature.name], lengths[feature.name] = lookup_kernels.sequence_lookup(
                    table, batch, feature.max_sequence_length
                )
            else:
                activations[feature.name] = lookup_kernels.pooled_lookup(
                    table, batch, self.combiners[feature.table], safe=feature.safe_lookup
                )
        return activations, lengths


def load_exported(path: str) -> ExportedModel:
    """Reads an export directory written by `TPUEstimator.export_embeddings` / `export_saved_model`."""
    return ExportedModel(path)
