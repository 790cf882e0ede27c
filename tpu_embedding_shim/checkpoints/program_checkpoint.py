"""A TPUEstimator program's checkpoint files: TensorFlow's format in `model_dir`, and one opened as named tensors.

A save writes `model_dir/model.ckpt-<step>.index` + `.data-00000-of-00001`
(atomically: temporary names, fsync, rename, the index last), then the
`checkpoint` state file naming it the latest and listing the kept ones,
and only then deletes the checkpoints beyond `keep_checkpoint_max` -- so
the state file never names a deleted checkpoint and a crash at any point
leaves the previous latest checkpoint readable.

A `ProgramCheckpoint` is one such checkpoint opened for reading
(`open_program_checkpoint`), whatever wrote it; its `kind` says which:

- 'ours': one the runner wrote (it holds the tensor
  `_TPU_EMBEDDING_SHIM_STATE`, a JSON string: which tensor is which table
  and the dense state's structure);
- 'tf': one TensorFlow wrote (a TPUEstimator on a CPU or a TPU, a Saver).
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import numpy as np

from ..engine import CheckpointError, shard_sizes
from ..engine.tf_bundle import (
    FULL,
    BundleReader,
    DataLossError,
    NotFoundError,
    SlicedTensor,
    delete_bundle,
    index_file,
    index_suffix_hint,
    is_bundle,
    newest_complete,
    read_state,
    remove_debris,
    write_bundle,
    write_state,
    writing,
)
from .tf_names import to_mod_layout

__all__ = [
    "BASENAME",
    "METADATA",
    "FORMAT",
    "ProgramCheckpoint",
    "open_program_checkpoint",
    "latest",
    "step_of",
    "save",
    "write_for_tpu",
]

BASENAME = "model.ckpt"
METADATA = "_TPU_EMBEDDING_SHIM_STATE"
FORMAT = "tpu_embedding_shim.tpu_estimator"
FORMAT_VERSION = 1
_STEP_RE = re.compile(r"ckpt-(\d+)$")
log = logging.getLogger(__name__)


def step_of(path: str) -> int:
    """The step of a checkpoint prefix: `model.ckpt-<N>` (any `...ckpt-<N>`), else its `global_step`."""
    base = os.path.basename(os.path.normpath(path))
    match = _STEP_RE.search(base)
    if match is not None:
        return int(match.group(1))
    if is_bundle(path):
        reader = BundleReader(path)
        if "global_step" in reader:
            return int(reader.read("global_step"))
    raise ValueError(f"{path!r} is not a TPUEstimator checkpoint (model.ckpt-<step>) and holds no global_step.")


def latest(model_dir: str) -> str | None:
    """The latest checkpoint of `model_dir`: the one its state file names, else the newest complete one on disk.

    Raises:
      CheckpointError: the state file can't be parsed, or names a
        checkpoint whose index is missing (starting afresh would overwrite it).
    """
    state = read_state(model_dir)
    if state is not None:
        path = state.model_checkpoint_path
        if not is_bundle(path):
            raise NotFoundError(
                f"{os.path.join(model_dir, 'checkpoint')} names {path!r} as the latest checkpoint, "
                f"but {index_file(path)} does not exist. Restore the file or fix the state file; "
                "training would start afresh and overwrite the checkpoints."
            )
        return path
    # no state file, or an empty one: the newest complete checkpoint on disk, not a fresh start over it
    newest = newest_complete(model_dir, BASENAME)
    if newest is not None:
        log.warning(
            "%s has no checkpoint state naming a checkpoint; the newest complete one on disk, %s, is the latest.",
            model_dir,
            newest,
        )
    return newest


def save(model_dir: str, step: int, tensors: dict[str, Any], *, keep: int | None) -> str:
    """Writes `model.ckpt-<step>`, records it in the state file, then prunes beyond `keep` (None: keep all).

    It writes as a live writer of `model_dir` (`debris.writing`), first
    removing what killed saves left when no other writer is alive.
    """
    with saving(model_dir):
        return _save(model_dir, step, tensors, keep)


def saving(model_dir: str) -> Any:
    """The context `save` writes in (a live writer of `model_dir`, debris of killed saves removed first): for a
    checkpoint several processes write (`record` it after)."""
    return writing(model_dir, lambda: remove_debris(model_dir, re.escape(BASENAME) + r"-\d+"))


def prefix_of(model_dir: str, step: int) -> str:
    """`<model_dir>/model.ckpt-<step>`."""
    return os.path.join(model_dir, f"{BASENAME}-{step}")


def _save(model_dir: str, step: int, tensors: dict[str, Any], keep: int | None) -> str:
    prefix = prefix_of(model_dir, step)
    write_bundle(prefix, tensors)
    return record(model_dir, prefix, keep)


def record(model_dir: str, prefix: str, keep: int | None) -> str:
    """Names the written checkpoint `prefix` the latest in the state file, then prunes beyond `keep`."""
    try:
        state = read_state(model_dir)
    except DataLossError:
        state = None
    previous = list(state.all_model_checkpoint_paths) if state is not None else []
    kept = [p for p in previous if os.path.abspath(p) != os.path.abspath(prefix) and is_bundle(p)] + [prefix]
    dropped = kept[:-keep] if keep else []
    kept = kept[len(dropped) :]
    write_state(model_dir, prefix, kept)
    for path in dropped:  # after the state file stopped naming them
        if os.path.dirname(os.path.abspath(path)) == os.path.abspath(model_dir):
            delete_bundle(path)
            if os.path.exists(path + ".meta"):  # TensorFlow's graph beside its own checkpoints
                os.remove(path + ".meta")
    return prefix


class ProgramCheckpoint:
    """One checkpoint of a TPUEstimator program to read: its tensors by name, their slices, and what wrote it."""

    def __init__(
        self,
        path: str,
        kind: str,
        *,
        reader: BundleReader,
        meta: dict | None = None,
    ):
        self.path = path
        self.kind = kind
        self._reader = reader
        self._tensors: dict[str, np.ndarray] = {}  # the ones read, cached
        self.meta = meta
        self.names = set(reader.names())
        self.names.discard(METADATA)
        self._step: int | None = None

    def __repr__(self):
        return f"ProgramCheckpoint({self.path!r}, {self.kind})"

    def shape(self, name: str) -> tuple[int, ...]:
        return self._reader.shape(name)

    def is_numeric(self, name: str) -> bool:
        return self._reader.dtype_name(name) != "string"

    def read(self, name: str) -> np.ndarray:
        """The tensor `name` (CRC-checked; a partitioned one assembled). NotFoundError if there is none."""
        if name not in self.names:
            raise NotFoundError(f"Key {name!r} not found in checkpoint {self.path!r}.")
        if name not in self._tensors:
            self._tensors[name] = self._reader.read(name)
        return self._tensors[name]

    def read_rows(self, name: str, rows: slice | np.ndarray) -> np.ndarray:
        """Rows `rows` of tensor `name` (`BundleReader.read_rows`: CRC-checked, the rest never read; not cached)."""
        if name not in self.names:
            raise NotFoundError(f"Key {name!r} not found in checkpoint {self.path!r}.")
        if name in self._tensors:
            return self._tensors[name][rows]
        return self._reader.read_rows(name, rows)

    def row_slices(self, name: str) -> list[tuple[int, int]] | None:
        """(start, length) of each row slice of a partitioned tensor, by start; None if stored whole.

        Raises ValueError when the slices cut another dimension too.
        """
        entry = self._reader.entry(name)
        if not entry.slices:
            return None
        shape = tuple(entry.shape)
        rows = []
        for extents in entry.slices:
            for dim, (start, length) in enumerate(extents[1:], start=1):
                if length != FULL and (start != 0 or length != shape[dim]):
                    raise ValueError(
                        f"Checkpoint {self.path!r}: tensor {name!r} is partitioned along dimension "
                        f"{dim}, not into row slices: it is not a table a TPU job saved."
                    )
            start, length = extents[0]
            rows.append((0, shape[0]) if length == FULL else (start, length))
        return sorted(rows)

    @property
    def step(self) -> int | None:
        """The checkpoint's global step (None if it has none)."""
        if self._step is None and "global_step" in self.names:
            self._step = int(np.asarray(self.read("global_step")).reshape(()))
        return self._step


def _open_bundle(prefix: str) -> ProgramCheckpoint:
    reader = BundleReader(prefix)
    if METADATA not in reader:
        return ProgramCheckpoint(prefix, "tf", reader=reader)
    raw = reader.read(METADATA)  # a missing or corrupt file raises here, naming it
    try:
        meta = json.loads(np.asarray(raw).reshape(()).item().decode("utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"format {meta.get('format')!r}")
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as error:
        raise DataLossError(
            f"Checkpoint {prefix!r}: tensor {METADATA!r} is not this runner's description of the checkpoint ({error})."
        ) from None
    if meta.get("version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint {prefix!r} was written by a newer tpu_embedding_shim (format version "
            f"{meta['version']}; this one reads {FORMAT_VERSION})."
        )
    return ProgramCheckpoint(prefix, "ours", reader=reader, meta=meta)


def open_program_checkpoint(path: Any) -> ProgramCheckpoint:
    """The checkpoint `path` means: a prefix, a model_dir (its latest) or a SavedModel directory.

    Raises:
      NotFoundError: no checkpoint there.
      DataLossError / CheckpointError: a corrupt or unreadable one.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        saved_model = os.path.join(path, "variables", "variables")
        if is_bundle(saved_model):
            return _open_bundle(saved_model)
        found = latest(path)
        if found is None:
            raise NotFoundError(
                f"No checkpoint in {path!r}: no 'checkpoint' state file naming a model.ckpt-<step>, and no "
                "complete model.ckpt-<step> (a TensorFlow checkpoint, its .index and data files)."
            )
        path = found
    if is_bundle(path):
        return _open_bundle(path)
    raise NotFoundError(
        f"No checkpoint at {path!r}: {index_file(path)} does not exist (a checkpoint is a prefix "
        f"such as model_dir/model.ckpt-100, or a directory holding a 'checkpoint' file).{index_suffix_hint(path)}"
    )


def write_for_tpu(checkpoint: str, prefix: str, *, num_hosts: int) -> str:
    """Rewrites a checkpoint of this runner as a TPU job with `num_hosts` hosts and `partition_strategy='mod'` saves it.

    Such a job keeps each table (and slot) as one row slice per host, host
    i holding ids i, i + H, ... (see `tf_names`), and restores a stored
    tensor slice by slice: a table written whole in id order would reach it
    permuted. This writes every table and slot as those `num_hosts` row
    slices of one key (`SlicedTensor`), the rest as it is, and records the
    checkpoint as the latest of its directory. This runner reads the result
    back in id order. (`div` jobs and one host need none of this.)

    Returns the prefix written.
    """
    if isinstance(num_hosts, bool) or not isinstance(num_hosts, int) or num_hosts < 1:
        raise ValueError(f"Argument `num_hosts` must be an int >= 1. Received: {num_hosts!r}.")
    source = open_program_checkpoint(checkpoint)
    if source.kind != "ours":
        raise ValueError(
            f"{source.path!r} was not written by this runner (no {METADATA!r}): its tables are not "
            "known by name. Train or resume from it with the runner first."
        )
    meta = dict(source.meta)
    if meta.get("mod_hosts", 1) != 1:
        raise ValueError(f"{source.path!r} is already in the layout of {meta['mod_hosts']} hosts.")
    tables = [entry["name"] for entry in meta["tables"].values()]
    tensors: dict[str, Any] = {}
    for name in sorted(source.names):
        value = source.read(name)
        if any(name == t or name.startswith(t + "/") for t in tables) and np.ndim(value) == 2 and len(value):
            stored, parts, start = to_mod_layout(value, num_hosts), [], 0
            for size in shard_sizes(len(value), min(num_hosts, len(value)), "mod"):
                parts.append((((start, size), (0, FULL)), stored[start : start + size]))
                start += size
            value = SlicedTensor(tuple(np.shape(value)), parts)
        tensors[name] = value
    meta["mod_hosts"] = num_hosts
    tensors[METADATA] = np.array(json.dumps(meta).encode("utf-8"), dtype=object)
    return write_bundle(prefix, tensors, update_state=True)
