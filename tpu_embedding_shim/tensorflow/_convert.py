"""TensorFlow values in, the engine's numpy values out, and calls that keep program order inside `tf.function`.

The project's mid-level objects take numpy arrays and their own
`SparseTensor` / `RaggedTensor`. At this boundary a TensorFlow value is
split into its component tensors (`encode`), and, when the call runs, those
are read as numpy and put back together (`decode`):

| TensorFlow value | components | the engine gets |
|---|---|---|
| `tf.Tensor` (dense ids, gradients) | the tensor | its numpy array |
| `tf.SparseTensor` | indices, values, dense_shape | `compat.tensors.SparseTensor` |
| `tf.RaggedTensor` (ragged rank 1) | values, row_splits | `compat.tensors.RaggedTensor` |
| anything else (numpy, lists, the project's tensors) | none | the value itself |

`call(fn, leaves, ...)` runs `fn` on the decoded values. Eagerly it runs at
once and its exceptions are the project's own. Inside a `tf.function` it
becomes one stateful `tf.numpy_function` op, made to depend on the previous
bridged op of the same graph, so enqueue -> dequeue -> apply_gradients run
in program order (TensorFlow's automatic control dependencies order them as
well; the explicit chain does not rely on it). `tf.numpy_function` hands
the call numpy arrays; `tf.py_function` wraps each input in an eager tensor
first, which cost ~1.1 ms a call with 26 tensors in and out, against ~0.2
(TensorFlow 2.15, B = 256). No gradient flows through these ops: the
engine's inputs are ids, and its gradients come to `apply_gradients` as
values. An exception raised when such an op runs
reaches the caller as TensorFlow maps an exception in a Python op: a
`ValueError` or `TypeError` as `tf.errors.InvalidArgumentError`, any other
as `tf.errors.UnknownError`, its message holding the project's exception
type and message.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from ..api.tensors import RaggedTensor, SparseTensor

_last_op: weakref.WeakKeyDictionary[Any, tf.Tensor] = weakref.WeakKeyDictionary()


class Leaf(NamedTuple):
    """One value at a leaf of a `feature_config`-shaped nest, ready to cross the boundary."""

    kind: str  # 'none', 'dense', 'sparse', 'ragged' or 'object' (passed as it is)
    components: tuple[Any, ...] = ()
    value: Any = None  # kind 'object': the value itself
    shape: tf.TensorShape = tf.TensorShape(None)  # the static shape TensorFlow knows (ragged: [B, None])

    @property
    def is_tensor(self) -> bool:
        return self.kind in ("dense", "sparse", "ragged")

    @property
    def dtype(self) -> tf.DType | None:
        if self.kind == "dense":
            return self.components[0].dtype
        if self.kind in ("sparse", "ragged"):
            return self.components[0 if self.kind == "ragged" else 1].dtype
        return None


def encode(value: Any, where: str) -> Leaf:
    """A value as a `Leaf`; `where` names it in errors ('input f', 'gradient f')."""
    if value is None:
        return Leaf("none")
    if isinstance(value, tf.SparseTensor):
        return Leaf("sparse", (value.indices, value.values, value.dense_shape), shape=value.shape)
    if isinstance(value, tf.RaggedTensor):
        if value.ragged_rank != 1 or value.flat_values.shape.rank != 1:
            raise ValueError(
                f"Only rank 2 ragged tensor is supported, but got a ragged tensor of higher rank for "
                f"{where} (ragged_rank {value.ragged_rank}, shape {value.shape})."
            )
        return Leaf("ragged", (value.values, value.row_splits), shape=value.shape)
    if isinstance(value, (tf.Tensor, tf.Variable, tf.IndexedSlices)) or tf.is_tensor(value):
        tensor = tf.convert_to_tensor(value)
        return Leaf("dense", (tensor,), shape=tensor.shape)
    return Leaf("object", value=value)


def decode(leaf: Leaf, arrays: Sequence[np.ndarray]) -> Any:
    """The engine's form of a leaf, from its components read as numpy."""
    if leaf.kind == "none":
        return None
    if leaf.kind == "object":
        return leaf.value
    if leaf.kind == "dense":
        return arrays[0]
    if leaf.kind == "sparse":
        return SparseTensor(*arrays)
    return RaggedTensor(arrays[0], arrays[1])


def executing_eagerly() -> bool:
    return tf.executing_eagerly()


def call(
    fn: Callable[..., Sequence[Any]],
    leaves: Sequence[Leaf],
    out_dtypes: Sequence[tf.DType],
    out_shapes: Sequence[Any],
    name: str,
) -> list[tf.Tensor]:
    """`fn(*decoded leaves)` -> arrays, as TensorFlow tensors; in a graph, one op after the previous bridged one.

    Args:
      fn: takes one decoded value per leaf and returns one array per output.
      leaves: the inputs (`encode`).
      out_dtypes: the output dtypes.
      out_shapes: the outputs' static shapes (TensorShape-likes), set on
        the graph tensors.
      name: the op's name.
    """
    if tf.executing_eagerly():
        decoded = [decode(leaf, [c.numpy() for c in leaf.components]) for leaf in leaves]
        outputs = fn(*decoded)
        return [tf.convert_to_tensor(np.asarray(o, dtype.as_numpy_dtype)) for o, dtype in zip(outputs, out_dtypes)]

    counts = [len(leaf.components) for leaf in leaves]
    flat = [c for leaf in leaves for c in leaf.components]

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
        decoded, start = [], 0
        for leaf, count in zip(leaves, counts):
            decoded.append(decode(leaf, list(arrays[start : start + count])))
            start += count
        outputs = fn(*decoded)
        return [np.asarray(o, dtype.as_numpy_dtype) for o, dtype in zip(outputs, out_dtypes)] + [np.int64(0)]

    graph = tf.compat.v1.get_default_graph()
    previous = _last_op.get(graph)
    with tf.control_dependencies([] if previous is None else [previous]):
        *outputs, done = tf.numpy_function(run, flat, list(out_dtypes) + [tf.int64], stateful=True, name=name)
    _last_op[graph] = done
    for tensor, shape in zip(outputs, out_shapes):
        tensor.set_shape(shape)
    return outputs
