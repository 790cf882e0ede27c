"""The mid-level API over TensorFlow values: thin wrappers around the project's numpy classes.

`TPUEmbedding` and `TPUEmbeddingV2` here hold the
project's object (`api/tpu_embedding_v2.py` etc., which stay numpy-only)
and convert at the boundary (`_convert.py`): `enqueue` and the lookups take
`tf.Tensor` / `tf.SparseTensor` / `tf.RaggedTensor` nests (dataset
elements), activations come back as `tf.Tensor`s, `apply_gradients` takes
tensors. Eagerly, each call runs at once with the project's exceptions.
Inside a `tf.function` each call is one op, in program order; what
TensorFlow checks while tracing is checked while tracing here too (the
structure, the input types and ranks, weights, static shapes), by running
the project's own checks on an empty batch of the traced shapes, and the
object is built from those shapes as TensorFlow builds its own
(`_maybe_build`). Each is a TensorFlow trackable (`_checkpoint.py`).
(`TPUEmbeddingForServing`, a CPU class in TensorFlow too, holds
`tf.Variable`s and looks up with TensorFlow ops: `_serving.py`.)

`embedding_tables` and `variables` hold `EngineArray`s: copies of the
engine's tables and slots as numpy arrays (TensorFlow ops take them as they
are) that also answer what a program asks of TensorFlow's variables there
(`.numpy()`, `.assign()` into the engine). Every other attribute (`build`,
`engine`, ...) is the project object's.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import random_seed  # TF's global-seed rule (what its initializers use)
from tensorflow.python.trackable import data_structures
from tensorflow.python.trackable.data_structures import NoDependency  # how Keras code hands back untracked slots

from ..api import tpu_embedding_v2 as v2
from ..api import tpu_embedding_v3 as v3
from ..api.midlevel_inputs import output_shape_of_input_shape
from ..api.tensors import RaggedTensor, SparseTensor
from . import _convert
from ._checkpoint import CheckpointedEmbedding
from ._convert import Leaf

__all__ = ["TPUEmbedding", "TPUEmbeddingV2", "EngineArray"]

do_not_convert = tf.autograph.experimental.do_not_convert


def empty_batch_like(leaf: Leaf, weights: bool) -> Any:
    """An empty batch of a tensor leaf's static shape, in the engine's form (None when the shape is not known)."""
    if leaf.kind == "object" or leaf.kind == "none":
        return leaf.value
    shape = leaf.shape.as_list() if leaf.shape.rank is not None else None
    text = not weights and leaf.dtype == tf.string
    dtype = np.float32 if weights else (object if text else leaf.dtype.as_numpy_dtype)
    if leaf.kind == "ragged":
        if shape is None or shape[0] is None:
            return None
        return RaggedTensor(np.zeros(0, dtype), np.zeros(shape[0] + 1, np.int64))
    if shape is None or None in shape:
        return None
    if leaf.kind == "sparse":
        return SparseTensor(np.zeros((0, len(shape)), np.int64), np.zeros(0, dtype), shape)
    return np.full(shape, b"", object) if text else np.zeros(shape, dtype)


def _partial_output_shape(known: tuple | None, leaf: Leaf, path: Any, config: Any) -> tuple | None:
    """A feature's output shape from a traced input shape that is not fully known (None sizes stay None)."""
    if known is not None:
        return known
    if leaf.shape.rank is None or leaf.shape.rank < 1:
        return None
    return output_shape_of_input_shape(leaf.shape.as_list(), config, path)


def untracked(structure: Any) -> Any:
    """`structure` with TensorFlow's tracking wrappers (what a Keras layer makes of a dict, list or tuple it
    keeps, as TFRS's layer keeps `feature_config`) replaced by the plain dict, list or tuple.

    The project's object packs every step's activations and gradients like its `feature_config`: into a
    `_DictWrapper` that is ~10x slower than into a dict (0.13 against 0.01 ms for 26 features), three times a
    step in Keras `fit` with TFRS's layer.
    """
    if isinstance(structure, data_structures._TupleWrapper):  # noqa: SLF001  (TensorFlow's wrapper type)
        structure = structure.__wrapped__
    if isinstance(structure, (data_structures._DictWrapper, dict)):  # noqa: SLF001
        return {key: untracked(value) for key, value in structure.items()}
    if isinstance(structure, (data_structures.ListWrapper, list)):
        return [untracked(value) for value in structure]
    if type(structure) is tuple:
        return tuple(untracked(value) for value in structure)
    return structure


def tensorflow_initializer_seed() -> int | None:
    """A seed for the tables' unseeded initializers from TensorFlow's global seed, as TensorFlow's own
    initializers take theirs: None (fresh) without `tf.random.set_seed`, else the same tables on every run."""
    global_seed, op_seed = random_seed.get_seed(None)
    if global_seed is None:
        return None
    return (int(global_seed) * 1_000_003 + int(op_seed or 0)) % 2**31


def callable_by_tensorflow(initializer: Any) -> Any:
    """A project initializer `init(shape, dtype) -> array` as TensorFlow calls one: `(shape, dtype=tf.float32)`."""

    def initialize(shape: Any, dtype: Any = tf.float32, **kwargs: Any) -> tf.Tensor:
        values = initializer(tuple(tf.TensorShape(shape).as_list()), np.float32)
        return tf.constant(values, tf.as_dtype(dtype))

    return initialize


def _call_slot_creation_fn(table: Any, parameters: np.ndarray, names: list[str], initializers: list[Any]) -> Any:
    """A TensorFlow program's `slot_variable_creation_fn`, called as TensorFlow calls it; its slots as arrays.

    It gets the table as a `tf.Variable` holding its initial values and
    initializers taking `(shape, dtype=tf.float32)` (Keras's
    `optimizer.add_slot`, which TensorFlow Recommenders uses, needs both);
    the slots it returns (variables, also wrapped in `NoDependency`) are read
    once, as the engine's initial slots. The engine keeps and trains them
    from then on.
    """

    with tf.init_scope():
        variable = tf.Variable(parameters, trainable=False, name=table.name)
        created = table.optimizer.slot_variable_creation_fn(
            variable, names, [callable_by_tensorflow(initializer) for initializer in initializers]
        )
        if not isinstance(created, dict):
            return created
        values = {
            name: getattr(slot, "value", slot) if isinstance(slot, NoDependency) else slot
            for name, slot in created.items()
        }
        return {name: np.asarray(value.numpy() if hasattr(value, "numpy") else value) for name, value in values.items()}


class EngineArray(np.ndarray):
    """A copy of one engine table or slot (float32 `[vocabulary_size, dim]`) that also behaves as TensorFlow's
    variable does where a program reads or writes a table: `.numpy()`, `.shape`, `.dtype`, `.assign(value)`.

    `assign` writes the value into the engine (and into this array); the
    engine's step and the other tables stay. Under mpiexec, as every call
    that reaches a replicated engine, every replica calls it with the same
    value. Slices and copies of it are plain arrays.
    """

    _write: Any = None

    def __new__(cls, values: np.ndarray, write: Any) -> EngineArray:
        self = np.asarray(values, np.float32).view(cls)
        self._write = write
        return self

    def __array_finalize__(self, obj: Any) -> None:
        self._write = None

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        plain = np.asarray(array).view(np.ndarray)
        return plain[()] if return_scalar else plain

    def __getitem__(self, key: Any) -> Any:
        item = super().__getitem__(key)
        return item.view(np.ndarray) if isinstance(item, np.ndarray) else item

    def copy(self, order: Any = "C") -> np.ndarray:
        return np.array(self, order=order).view(np.ndarray)

    def numpy(self) -> np.ndarray:
        """The values, as `tf.Variable.numpy()` (a plain copy)."""
        return self.copy()

    def read_value(self) -> tf.Tensor:
        return tf.constant(self.copy())

    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        """Writes `value` (same shape) into the engine's table or slot, as `tf.Variable.assign`."""
        if self._write is None:
            raise TypeError(
                "assign works on an array that embedding_tables or variables returned, not on a copy or slice of it."
            )
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float32)
        if array.shape != self.shape:
            raise ValueError(
                f"Cannot assign to a table of shape {list(self.shape)} a value of shape {list(array.shape)}: give "
                "the whole table."
            )
        self._write(array)
        np.ndarray.__setitem__(self, Ellipsis, array)
        return self if read_value else None


class _Bridge(CheckpointedEmbedding):
    """What the three classes share: the project's object, the nest of features, the trace-time checks."""

    _compat_class: Any = None

    def __init__(self, *args: Any, **kwargs: Any):
        self._init_checkpointing()
        if args:
            args = (untracked(args[0]), *args[1:])
        elif "feature_config" in kwargs:
            kwargs["feature_config"] = untracked(kwargs["feature_config"])
        with tf.init_scope():  # TensorFlow initializers run eagerly, as TensorFlow creates its tables
            self._embedding = self._compat_class(*args, **kwargs)
            self._embedding.initializer_seed = tensorflow_initializer_seed()
            self._embedding.call_slot_variable_creation_fn = _call_slot_creation_fn

    def __getattr__(self, name: str) -> Any:
        """The project object's public attributes (`embedding_tables`, `variables`, `engine`, `build`...)."""
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._apply_restored()
        return getattr(self._embedding, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | {n for n in dir(self._embedding) if not n.startswith("_")})

    @property
    def embedding_tables(self) -> dict[Any, EngineArray]:
        """`{TableConfig: EngineArray [vocabulary_size, dim]}`: the project's `embedding_tables` (copies, any
        pending update applied), each with `.numpy()` and `.assign()` as TensorFlow's variables."""
        self._apply_restored()
        tables = self._embedding.embedding_tables
        return {table: EngineArray(values, self._writer(table.name, "embedding")) for table, values in tables.items()}

    @property
    def variables(self) -> dict[Any, dict[str, EngineArray]]:
        """`{TableConfig: {'parameters': table, <slot name>: slot}}` as `EngineArray`s."""
        self._apply_restored()
        return {
            table: {
                name: EngineArray(values, self._writer(table.name, "embedding" if name == "parameters" else name))
                for name, values in arrays.items()
            }
            for table, arrays in self._embedding.variables.items()
        }

    def _writer(self, table: str, slot: str) -> Any:
        def write(values: np.ndarray) -> None:
            self._apply_restored()
            engine = self._embedding.engine
            state = engine.state()
            state[table][slot] = values
            self._embedding.restore_state(state, engine.global_step)

        return write

    def __repr__(self) -> str:
        return f"{self._embedding!r} (TensorFlow bridge)"

    # The feature nest -------------------------------------------------------------------------

    @property
    def _paths(self) -> list[str]:
        return [v2.path_string(f.path) or "(the only feature)" for f in self._embedding.features]

    def _leaves(self, values: Any, argument: str) -> list[Leaf]:
        """`values`' leaves in `tf.nest` order, checked against `feature_config`'s structure (TensorFlow's errors)."""
        flat = v2.flatten_up_to(self._embedding.feature_config, values, argument)
        what = {"features": "input", "weights": "weight", "gradients": "gradient"}.get(argument, argument)
        return [_convert.encode(value, f"{what} {path}") for value, path in zip(flat, self._paths)]

    def _pack(self, flat: Sequence[Any]) -> Any:
        return v2.pack_as(self._embedding.feature_config, list(flat))

    def _traced_output_shapes(self, features: list[Leaf], weights: list[Leaf] | None) -> list[tuple] | None:
        """While tracing: the project's checks on an empty batch of the traced shapes -> its output shapes.

        None when a traced shape is not fully known (the batch is checked when
        the op runs instead).
        """
        inputs = [empty_batch_like(leaf, weights=False) for leaf in features]
        extra = None if weights is None else [empty_batch_like(leaf, weights=True) for leaf in weights]
        if any(x is None and leaf.kind != "none" for x, leaf in zip(inputs, features)) or (
            extra is not None and any(x is None and leaf.kind != "none" for x, leaf in zip(extra, weights))
        ):
            return None
        return self._embedding.batch_output_shapes(self._pack(inputs), None if extra is None else self._pack(extra))

    def _activation_shapes(self, output_shapes: Sequence[tuple | None]) -> list[tf.TensorShape]:
        shapes = []
        for shape, feature in zip(output_shapes, self._embedding.features):
            dim = feature.config.table.dim
            shapes.append(tf.TensorShape(None) if shape is None else tf.TensorShape(list(shape) + [dim]))
        return shapes

    def _flatten_activations(self, activations: Any) -> list[np.ndarray]:
        return v2.flatten_up_to(self._embedding.feature_config, activations, "activations")

    def _gradient_leaves(self, gradients: Any, expected: Sequence[tuple | None]) -> list[Leaf]:
        """The gradients' leaves; while tracing, TensorFlow's checks: tensors (or None) of the expected shape.

        A None gradient is a zero gradient: eagerly the project warns and
        sends zeros; while tracing the warning is given now and the zeros are
        a constant, as in TensorFlow.
        """
        leaves = self._leaves(gradients, "gradients")
        if _convert.executing_eagerly():
            return leaves
        out = []
        for leaf, shape, feature in zip(leaves, expected, self._embedding.features):
            path = feature.path
            full = None if shape is None else tuple(shape) + (feature.config.table.dim,)
            if leaf.kind == "object":
                v2.check_gradient(leaf.value, full, path)  # a list or other non-tensor: TensorFlow's ValueError
            elif leaf.kind == "none" and full is not None:
                v2.zero_gradient_warning(path, full)
                leaf = _convert.encode(tf.zeros(full, tf.float32), "")
            elif leaf.kind != "dense":
                raise ValueError(f"found non-tensor type: {type(leaf.value)} at path {v2.path_string(path)}.")
            elif full is not None and leaf.shape.is_fully_defined() and tuple(leaf.shape.as_list()) != full:
                raise ValueError(
                    f"Found gradient of shape {leaf.shape.as_list()} at path {v2.path_string(path)}. "
                    f"Expected shape {list(full)}."
                )
            out.append(leaf)
        return out


class TPUEmbedding(_Bridge):
    """`tf.tpu.experimental.embedding.TPUEmbedding` for TensorFlow programs, on the CPU engine.

    The arguments are those of the project's class (both TensorFlow
    signatures); see `tpu_embedding_shim.api.tpu_embedding_v2.TPUEmbedding`.

    A `name` given to `enqueue` inside a `tf.function` works as TensorFlow's
    graph pass makes it work: a `training=True` enqueue whose graph has no
    `apply_gradients` of the same name runs as `training=False` (TensorFlow
    Recommenders' layer enqueues so in Keras's evaluate and predict steps).
    """

    _compat_class = v2.TPUEmbedding

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._named_applies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> names traced in it

    def _trains(self, training: bool, name: Any) -> Callable[[], bool]:
        """Whether the enqueue traced now trains, asked when it runs: by then its whole graph is traced."""
        if not training or name is None or _convert.executing_eagerly():
            return lambda: training
        graph = tf.compat.v1.get_default_graph()
        return lambda: str(name) in self._named_applies.get(graph, ())

    @do_not_convert
    def build(self, per_replica_input_shapes: Any = None, per_replica_batch_size: int | None = None) -> None:
        """The project's `build` (`TensorShape`s are shapes); TensorFlow initializers run eagerly."""
        self._apply_restored()
        with tf.init_scope():
            self._embedding.build(per_replica_input_shapes, per_replica_batch_size)

    @do_not_convert
    def enqueue(
        self, features: Any, weights: Any = None, training: bool = True, name: Any = None, device: str | None = None
    ) -> None:
        """Queues a batch of `tf.Tensor` / `tf.SparseTensor` / `tf.RaggedTensor` ids (and weights) for `dequeue`."""
        embedding = self._embedding
        leaves = self._leaves(features, "features")
        weight_leaves = None if weights is None else self._leaves(weights, "weights")
        if not _convert.executing_eagerly():
            output_shapes = self._traced_output_shapes(leaves, weight_leaves)
            if not embedding.built:  # TensorFlow builds from the traced shapes (`_maybe_build`)
                with tf.init_scope():
                    if output_shapes is not None:
                        embedding.build([list(s) + [1] for s in output_shapes])  # input shapes giving these outputs
                    else:
                        embedding.build([leaf.shape for leaf in leaves])  # TensorFlow's error for unknown sizes
        count = len(leaves)
        trains = self._trains(training, name)

        def run(*values: Any) -> list[Any]:
            self._apply_restored()
            embedding.enqueue(
                self._pack(values[:count]),
                None if weights is None else self._pack(values[count:]),
                training=trains(),
                device=device,
            )
            return []

        _convert.call(run, leaves + (weight_leaves or []), [], [], "tpu_embedding_enqueue")

    @do_not_convert
    def dequeue(self, name: str | None = None) -> Any:
        """Looks the oldest queued batch up: a nest like `feature_config` of float32 `tf.Tensor`s."""
        embedding = self._embedding
        if not embedding.built:
            embedding.dequeue()  # TensorFlow's RuntimeError (dequeue before enqueue or build); changes nothing

        def run() -> list[np.ndarray]:
            self._apply_restored()
            return self._flatten_activations(embedding.dequeue())

        shapes = self._activation_shapes(embedding.output_shapes)
        outputs = _convert.call(run, [], [tf.float32] * len(shapes), shapes, "tpu_embedding_dequeue")
        return self._pack(outputs)

    @do_not_convert
    def apply_gradients(self, gradients: Any, name: str | None = None) -> None:
        """Applies d loss / d activations (`tf.Tensor`s, None for zero) of the last dequeued batch."""
        embedding = self._embedding
        leaves = self._gradient_leaves(gradients, embedding.output_shapes)
        if name is not None and not _convert.executing_eagerly():
            self._named_applies.setdefault(tf.compat.v1.get_default_graph(), set()).add(str(name))

        def run(*values: Any) -> list[Any]:
            self._apply_restored()
            embedding.apply_gradients(self._pack(values))
            return []

        _convert.call(run, leaves, [], [], "tpu_embedding_apply_gradients")


class _Handles:
    """Python objects named by an int64 scalar, so that they can flow through a TensorFlow graph.

    Inside `tf.function`, `TPUEmbeddingV2`'s preserved outputs are such a
    handle; only lookups not older than the engine's step are kept (an older
    one can no longer be applied).
    """

    def __init__(self) -> None:
        self._objects: dict[int, Any] = {}
        self._next = itertools.count(1)
        self._lock = threading.Lock()

    def put(self, value: Any, step: int) -> int:
        with self._lock:
            self._objects = {k: v for k, v in self._objects.items() if v.lookup.step >= step}
            handle = next(self._next)
            self._objects[handle] = value
            return handle

    def get(self, handle: int) -> Any:
        with self._lock:
            return self._objects.get(int(handle))


class TPUEmbeddingV2(_Bridge):
    """`tf.tpu.experimental.embedding.TPUEmbeddingV2` (SparseCore) for TensorFlow programs, on the CPU engine.

    `embedding_lookup` / `__call__` and `apply_gradients` take and return
    TensorFlow tensors, eagerly and inside `tf.function`. Eagerly the
    preserved outputs are the project's (`PartitionedCsrFormatTensor`s per
    table); inside `tf.function` they are an int64 scalar tensor naming the
    lookup, to be passed back to `apply_gradients` unchanged. `enqueue`,
    `preprocess_features` and `dequeue` work eagerly.
    """

    _compat_class = v3.TPUEmbeddingV2

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._handles = _Handles()

    @do_not_convert
    def embedding_lookup(self, features: Any, weights: Any = None) -> tuple[Any, Any]:
        """`(activations, preserved_outputs)`: activations are float32 `tf.Tensor`s in `feature_config`'s nest."""
        embedding = self._embedding
        leaves = self._leaves(features, "features")
        weight_leaves = None if weights is None else self._leaves(weights, "weights")
        count = len(leaves)
        if _convert.executing_eagerly():
            decoded = [
                _convert.decode(leaf, [c.numpy() for c in leaf.components]) for leaf in leaves + (weight_leaves or [])
            ]
            self._apply_restored()
            activations, preserved = embedding.embedding_lookup(
                self._pack(decoded[:count]), None if weights is None else self._pack(decoded[count:])
            )
            return self._pack([tf.constant(a) for a in self._flatten_activations(activations)]), preserved
        output_shapes = self._traced_output_shapes(leaves, weight_leaves)
        if output_shapes is None:  # some traced size is unknown: what the traced shapes say, None where unknown
            output_shapes = [
                _partial_output_shape(f.output_shape, leaf, f.path, f.config)
                for leaf, f in zip(leaves, embedding.features)
            ]

        def run(*values: Any) -> list[Any]:
            self._apply_restored()
            activations, preserved = embedding.embedding_lookup(
                self._pack(values[:count]), None if weights is None else self._pack(values[count:])
            )
            handle = self._handles.put(preserved, embedding.engine.global_step)
            return self._flatten_activations(activations) + [np.int64(handle)]

        shapes = self._activation_shapes(output_shapes) + [tf.TensorShape([])]
        *outputs, handle = _convert.call(
            run,
            leaves + (weight_leaves or []),
            [tf.float32] * len(leaves) + [tf.int64],
            shapes,
            "tpu_embedding_v2_lookup",
        )
        return self._pack(outputs), handle

    __call__ = embedding_lookup

    @do_not_convert
    def apply_gradients(self, gradients: Any, preserved_outputs: Any) -> None:
        """Applies d loss / d activations of the lookup that returned `preserved_outputs`."""
        embedding = self._embedding
        leaves = self._gradient_leaves(gradients, embedding.output_shapes)
        preserved = _convert.encode(preserved_outputs, "preserved_outputs")

        def run(*values: Any) -> list[Any]:
            *gradient_values, kept = values
            if isinstance(kept, (np.ndarray, np.integer)):  # a handle from a lookup inside tf.function
                found = self._handles.get(kept)
                if found is None:
                    raise RuntimeError(
                        f"apply_gradients got the preserved outputs of lookup {int(kept)}, which "
                        "was already applied or is older than the engine's step: apply each "
                        "lookup's gradients once, in order."
                    )
                kept = found
            self._apply_restored()
            embedding.apply_gradients(self._pack(gradient_values), kept)
            return []

        _convert.call(run, leaves + [preserved], [], [], "tpu_embedding_v2_apply_gradients")

    def _numpy_nest(self, values: Any, argument: str) -> Any:
        """Eagerly: a nest of TensorFlow values as the project's values."""
        leaves = self._leaves(values, argument)
        return self._pack([_convert.decode(leaf, [c.numpy() for c in leaf.components]) for leaf in leaves])

    def _eager_only(self, method: str) -> None:
        if not _convert.executing_eagerly():
            raise NotImplementedError(
                f"TPUEmbeddingV2.{method} inside tf.function is not bridged: call "
                "embedding_lookup(features) (or the object itself), which enqueues and "
                "dequeues in one op, or call it eagerly."
            )

    @do_not_convert
    def preprocess_features(self, features: Any = None, weights: Any = None, **kwargs: Any) -> Any:
        """Eagerly: the project's `preprocess_features` on the tensors' values."""
        self._eager_only("preprocess_features")
        return self._embedding.preprocess_features(
            self._numpy_nest(features, "features"),
            None if weights is None else self._numpy_nest(weights, "weights"),
            **kwargs,
        )

    @do_not_convert
    def enqueue(self, features: Any, weights: Any = None, device: str | None = None) -> Any:
        """Eagerly: the project's `enqueue` on the tensors' values; returns the batch for `dequeue`."""
        self._eager_only("enqueue")
        return self._embedding.enqueue(
            self._numpy_nest(features, "features"),
            None if weights is None else self._numpy_nest(weights, "weights"),
            device,
        )

    @do_not_convert
    def dequeue(self, partitioned_tensors: Any) -> tuple[Any, Any]:
        """Eagerly: `(activations as tf.Tensors, preserved_outputs)` of an enqueued batch."""
        self._eager_only("dequeue")
        self._apply_restored()
        activations, preserved = self._embedding.dequeue(partitioned_tensors)
        return self._pack([tf.constant(a) for a in self._flatten_activations(activations)]), preserved
