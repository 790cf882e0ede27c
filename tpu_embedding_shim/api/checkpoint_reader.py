"""`tf.train.load_checkpoint`, `list_variables`, `load_variable`, `latest_checkpoint` over TF's own format.

They read TensorFlow checkpoints (`<prefix>.index` + `<prefix>.data-*`),
whether TensorFlow wrote them (a TPU job, `tf.compat.v1.train.Saver`,
`tf.train.Checkpoint`, an Estimator) or this project did
(`engine.tf_bundle.write_bundle`), with the engine's `tf_bundle` reader.

They also read the project's own engine checkpoints (`Engine.save`,
`engine.checkpoint.save_checkpoint`: a directory with a `manifest.json`,
or a directory of them, whose latest is read when it has no `checkpoint`
state file), as the tensors `<table>`, `<table>/<slot>` and `global_step`
(see `engine_checkpoint_reader.py`).

As in TensorFlow:

- a path is a checkpoint prefix (`run/model.ckpt-100`) or a directory,
  which means the latest checkpoint its `checkpoint` state file names;
- `get_tensor` returns numpy values, a numpy scalar (or `bytes`) for a
  0-d tensor; strings are `bytes`, in an object array;
- a missing tensor raises `NotFoundError` ("Key ... not found in
  checkpoint"); corrupt, truncated or mismatching data `DataLossError`.
  Both are `CheckpointError`s (`ValueError`); `NotFoundError` is also a
  `FileNotFoundError` (TensorFlow's are `tf.errors.OpError`s).

Unlike TensorFlow, a bfloat16 tensor is read as float32 (numpy has no
bfloat16), and its dtype in `get_variable_to_dtype_map` says float32.

>>> import os, tempfile, numpy as np
>>> import tpu_embedding_shim as tf
>>> from tpu_embedding_shim.engine.tf_bundle import write_bundle
>>> model_dir = tempfile.mkdtemp()
>>> _ = write_bundle(os.path.join(model_dir, "model.ckpt-3"),
...                  {"global_step": np.int64(3), "dense/kernel": np.ones((2, 1), np.float32)}, update_state=True)
>>> tf.train.list_variables(model_dir)
[('dense/kernel', [2, 1]), ('global_step', [])]
>>> reader = tf.train.load_checkpoint(model_dir)
>>> step = reader.get_tensor("global_step")
>>> type(step).__name__, int(step), reader.has_tensor("dense/bias")
('int64', 3, False)
>>> tf.train.load_variable(model_dir, "dense/kernel:0").tolist()
[[1.0], [1.0]]
"""

from __future__ import annotations

import logging
import os
from typing import Any, Union

from ..engine import checkpoint as _engine_checkpoint
from ..engine.tf_bundle import (
    BundleReader,
    DataLossError,
    NotFoundError,
    index_file,
    index_suffix_hint,
    is_bundle,
    read_state,
)
from . import dtypes as _dtypes
from .engine_checkpoint_reader import EngineCheckpoint, is_engine_checkpoint

__all__ = ["CheckpointReader", "load_checkpoint", "list_variables", "load_variable", "latest_checkpoint"]

log = logging.getLogger("tpu_embedding_shim")

PathLike = Union[str, "os.PathLike[str]"]
_DT_NAMES = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "HALF"}  # DataType enum names that differ


def latest_checkpoint(checkpoint_dir: PathLike, latest_filename: str | None = None) -> str | None:
    """`tf.train.latest_checkpoint`: the checkpoint the directory's state file names as the latest, or None.

    None also when there is no state file, when it can't be parsed, or when
    the checkpoint it names is gone (TensorFlow logs these; so does this).
    Finds TensorFlow checkpoints and engine checkpoints; in a directory
    without a state file, the latest engine checkpoint
    (`Engine.save`'s `ckpt-<step>` directories).
    """
    directory = os.fspath(checkpoint_dir)
    try:
        state = read_state(directory, latest_filename)
    except DataLossError as error:
        log.warning("%s: checkpoint state ignored.", error)
        return None
    if state is None:
        return _engine_checkpoint.latest_checkpoint(directory) if latest_filename is None else None
    path = state.model_checkpoint_path
    if is_bundle(path) or is_engine_checkpoint(path):
        return path
    log.error("Couldn't match files for checkpoint %s", path)
    return None


def _checkpoint_prefix(ckpt_dir_or_file: PathLike) -> str:
    """The prefix a path means: a directory's latest checkpoint, or the path itself."""
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path) and not is_engine_checkpoint(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given directory {path}")
        path = latest
    if is_engine_checkpoint(path):
        return path
    if not is_bundle(path):
        raise NotFoundError(
            f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files for "
            f"{path}: {index_file(path)} does not exist.{index_suffix_hint(path)}"
        )
    return path


class CheckpointReader:
    """What `tf.train.load_checkpoint` returns: the tensors of one TensorFlow checkpoint.

    Also the tensors of one engine checkpoint (`format` says which).

    Args:
      prefix: the checkpoint's prefix (`<prefix>.index` must exist), or an
        engine checkpoint directory (holding a `manifest.json`).
    """

    def __init__(self, prefix: PathLike):
        if is_engine_checkpoint(os.fspath(prefix)):
            self._bundle: Any = EngineCheckpoint(prefix)
            self.format = "engine"
        else:
            self._bundle = BundleReader(prefix)
            self.format = "tensorflow"
        self.prefix = self._bundle.prefix

    @staticmethod
    def _name(tensor_str: Any) -> str:
        if isinstance(tensor_str, bytes):
            return tensor_str.decode("utf-8", "surrogateescape")
        if not isinstance(tensor_str, str):
            raise TypeError(f"A tensor name must be a str or bytes. Received: {tensor_str!r}.")
        return tensor_str

    def has_tensor(self, tensor_str: Any) -> bool:
        """True when the checkpoint holds a tensor of that name."""
        return self._name(tensor_str) in self._bundle

    def get_tensor(self, tensor_str: Any) -> Any:
        """The tensor's value: a numpy array, or a numpy scalar / `bytes` for a 0-d tensor.

        Raises:
          NotFoundError: no tensor of that name ("Key ... not found in checkpoint").
          DataLossError: its data is truncated, corrupt or fails its CRC-32C.
          UnimplementedError: its dtype is one this reader does not read.
        """
        value = self._bundle.read(self._name(tensor_str))
        return value[()] if value.ndim == 0 else value

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        """name -> shape (a list of ints) of every tensor."""
        return {name: list(self._bundle.shape(name)) for name in self._bundle.names()}

    def get_variable_to_dtype_map(self) -> dict[str, Any]:
        """name -> dtype (`tf.float32`, `tf.string`, ...; bfloat16 tensors read as `tf.float32`)."""
        out = {}
        for name in self._bundle.names():
            out[name] = _dtypes.string if self._bundle.dtype_name(name) == "string" else self._bundle.dtype(name)
        return out

    def debug_string(self) -> bytes:
        """One line per tensor, 'name (DT_FLOAT) [2,3]', as TensorFlow's reader prints."""
        lines = []
        for name in self._bundle.names():
            dtype = self._bundle.dtype_name(name)
            dtype = "DT_" + _DT_NAMES.get(dtype, dtype.upper())
            shape = ",".join(str(n) for n in self._bundle.shape(name))
            lines.append(f"{name} ({dtype}) [{shape}]\n")
        return "".join(lines).encode("utf-8", "surrogateescape")

    def __repr__(self) -> str:
        kind = " (engine format)" if self.format == "engine" else ""
        return f"<CheckpointReader of {self.prefix!r}{kind}: {len(self._bundle.names())} tensors>"


def load_checkpoint(ckpt_dir_or_file: PathLike) -> CheckpointReader:
    """`tf.train.load_checkpoint`: a `CheckpointReader` of a checkpoint prefix or a directory's latest checkpoint.

    An engine checkpoint directory, or a directory of them, is read too (see the module).

    Raises:
      ValueError: a directory without a checkpoint state file naming an existing checkpoint.
      NotFoundError: no checkpoint at that prefix.
      DataLossError: its index is truncated or corrupt.
    """
    return CheckpointReader(_checkpoint_prefix(ckpt_dir_or_file))


def list_variables(ckpt_dir_or_file: PathLike) -> list[tuple[str, list[int]]]:
    """`tf.train.list_variables`: (name, shape) of every tensor, sorted by name."""
    shapes = load_checkpoint(ckpt_dir_or_file).get_variable_to_shape_map()
    return [(name, shapes[name]) for name in sorted(shapes)]


def load_variable(ckpt_dir_or_file: PathLike, name: str) -> Any:
    """`tf.train.load_variable`: one tensor's value (a trailing ':0' of a graph tensor name is dropped)."""
    if isinstance(name, str) and name.endswith(":0"):
        name = name[:-2]
    return load_checkpoint(ckpt_dir_or_file).get_tensor(name)
