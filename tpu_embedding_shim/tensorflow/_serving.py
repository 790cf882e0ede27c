"""CPU serving under the bridge: tables as `tf.Variable`s and lookups as TensorFlow ops.

`TPUEmbeddingForServing` is a CPU class in TensorFlow too, so here it is one
in TensorFlow's terms: its tables (and optimizer slots) are real
`tf.Variable`s, created as TensorFlow creates them (named after the table,
slots `<table>/<slot>`, restored on creation from a pending checkpoint), and
its lookups are TensorFlow ops over them. Hence Keras trains the tables of a
model that looks them up (the ops are differentiable), and a SavedModel that
holds the object serves in any process with TensorFlow alone (the ops are
serializable; nothing calls back into Python).

The numbers are the project's serving lookups (api/tpu_embedding_for_serving.py:
the training path's lookups, which differ from TensorFlow's serving lookup in
places), and the checks are the project's: each call first runs TensorFlow's
serving checks and the project's input rules, on the values eagerly, on an
empty batch of the traced shapes inside `tf.function` (what TensorFlow
checks while tracing). Inside a graph, ids outside `[0, vocabulary_size)`
fail an assertion that names the feature.

`serving_embedding_lookup` is the same lookup over given tables, eagerly or
inside `tf.function`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from tensorflow.python.trackable.base import CheckpointInitialValueCallable  # a restore waiting for the variable

from ..api import lowering
from ..api import tpu_embedding_for_serving as serving
from ..api.midlevel_inputs import convert_input, output_shape_of_input_shape
from ..api.nest import Path, flatten_up_to, flatten_with_paths, pack_as, path_string
from ..engine import initial_table
from ..spec import FeatureSpec
from . import _convert
from ._checkpoint import Trackable
from ._convert import Leaf
from ._midlevel import callable_by_tensorflow, empty_batch_like, tensorflow_initializer_seed

__all__ = ["TPUEmbeddingForServing", "serving_embedding_lookup"]

do_not_convert = tf.autograph.experimental.do_not_convert


class _Feature(NamedTuple):
    path: Path
    config: Any  # FeatureConfig
    spec: FeatureSpec  # the engine's pooled spec (what `convert_input` checks ids against)


class _Plan(NamedTuple):
    """How one feature's input fills its output: the output shape (None where unknown while tracing) and the
    positions per example (0: one combined output per example; None: decided when the op runs, from a configured
    output shape and the batch size)."""

    output_shape: tuple[int | None, ...] | None
    positions: int | None


# Checks and plans ---------------------------------------------------------------------------------


def _empty_batch(leaf: Leaf, weights: bool, unknown: int | None) -> Any:
    """An empty batch of the leaf's traced shape in the project's form; unknown sizes as `unknown` (None: give
    up and return None)."""
    if leaf.kind in ("ragged", "dense", "sparse") and unknown is not None and leaf.shape.rank is not None:
        sizes = [unknown if s is None else s for s in leaf.shape.as_list()]
        if leaf.kind == "ragged":
            sizes[1:] = [None] * (len(sizes) - 1)
        leaf = leaf._replace(shape=tf.TensorShape(sizes))
    return empty_batch_like(leaf, weights)


def _serving_checks(leaf: Leaf, weight: Leaf, feature: _Feature, batch: int | None) -> None:
    """TensorFlow's serving checks (`check_serving_input`) of TensorFlow values, or of other values as they are."""
    types: tuple[Any, Any]
    if leaf.kind == "object" or weight.kind == "object":
        kinds = (serving.input_kind(leaf.value), serving.input_kind(weight.value))
        types = (type(leaf.value), type(weight.value))
    else:
        tensor_types = {"sparse": tf.SparseTensor, "ragged": tf.RaggedTensor}
        kinds = (_tensor_kind(leaf), _tensor_kind(weight))
        types = (
            type(leaf.components[0]) if leaf.kind == "dense" else tensor_types.get(leaf.kind),
            type(weight.components[0]) if weight.kind == "dense" else tensor_types.get(weight.kind),
        )
    serving.check_serving_input(kinds[0], kinds[1], types, feature.config, feature.path, batch)


def _tensor_kind(leaf: Leaf) -> str | None:
    return leaf.kind if leaf.kind in ("dense", "sparse", "ragged") else None


def _plan(leaf: Leaf, weight: Leaf, feature: _Feature) -> _Plan:
    """The project's checks of one feature's input (module docstring) and how it fills its output."""
    config = feature.config
    configured = tuple(config.output_shape) if config.output_shape is not None else None
    if _convert.executing_eagerly() or leaf.kind in ("object", "none"):
        ids = _convert.decode(leaf, [c.numpy() for c in leaf.components])
        weights = _convert.decode(weight, [c.numpy() for c in weight.components])
        batch = int(ids.row_splits.shape[0]) - 1 if leaf.kind == "ragged" else None
        _serving_checks(leaf, weight, feature, batch)
        converted = convert_input(ids, weights, config, feature.path, feature=feature.spec, serving=True)
        return _Plan(converted.output_shape, converted.positions)
    batch = leaf.shape[0] if leaf.kind == "ragged" and leaf.shape.rank else None
    _serving_checks(leaf, weight, feature, batch)
    ids, weights = _empty_batch(leaf, False, None), _empty_batch(weight, True, None)
    if ids is not None and (weights is not None or weight.kind == "none"):
        converted = convert_input(ids, weights, config, feature.path, feature=feature.spec, serving=True)
        return _Plan(converted.output_shape, converted.positions)
    if leaf.shape.rank is None:
        raise ValueError(
            f"Input {path_string(feature.path)} has an unknown rank while tracing: give the tf.function's input "
            "signature a shape of known rank (its batch size may be None)."
        )
    if configured is None:  # the checks on a batch of one example stand for those of any batch size
        ids, weights = _empty_batch(leaf, False, 1), _empty_batch(weight, True, 1)
        convert_input(ids, weights, config, feature.path, feature=feature.spec, serving=True)
    sizes = leaf.shape.as_list()
    output = configured or output_shape_of_input_shape(sizes, config, feature.path)
    flexible = leaf.kind == "ragged" or (leaf.kind == "sparse" and len(sizes) == 2)
    if not flexible:
        return _Plan(output, 0)
    if configured is None:
        return _Plan(output, config.max_sequence_length)
    return _Plan(output, None)


# The lookup as TensorFlow ops ---------------------------------------------------------------------


def _entries(value: Any, kind: str, plan: _Plan, config: Any) -> tuple[tf.Tensor, ...]:
    """One feature's input as the project's input rules map it to samples, as tensors: `(ids, sample of each id,
    spread, keep, sample count, output shape)`. `spread` (None for inputs that never spread) says whether each
    example's ids are one output per position, and `keep` which ids take part before the padding and safe rules."""
    if kind == "dense":
        ids = tf.reshape(tf.cast(value, tf.int64), [-1])
        count = tf.size(ids, out_type=tf.int64)
        shape = tf.shape(value, out_type=tf.int64)
        natural = shape if value.shape.rank == 1 else shape[:-1]
        output = _configured(config, natural)
        return ids, tf.range(count), None, tf.ones_like(ids, tf.bool), count, output
    if kind == "sparse" and value.shape.rank != 2:
        dims = value.dense_shape[:-1]
        strides = tf.math.cumprod(dims, exclusive=True, reverse=True)
        sample = tf.reduce_sum(value.indices[:, :-1] * strides, axis=1)
        ids = tf.cast(value.values, tf.int64)
        return ids, sample, None, tf.ones_like(ids, tf.bool), tf.reduce_prod(dims), _configured(config, dims)
    if kind == "sparse":
        ids, row, position = tf.cast(value.values, tf.int64), value.indices[:, 0], value.indices[:, 1]
        batch = value.dense_shape[0]
    else:
        ids, row = tf.cast(value.values, tf.int64), value.value_rowids()
        position = tf.range(tf.size(ids, out_type=tf.int64)) - tf.gather(value.row_splits, row)
        batch = value.nrows()
    if plan.positions is None:  # a configured output shape: per example, or k per example, by the batch size
        total = tf.constant(int(np.prod(config.output_shape, dtype=np.int64)), tf.int64)
        positions = tf.where(total == batch, tf.constant(0, tf.int64), total // tf.maximum(batch, 1))
    else:
        positions = tf.constant(plan.positions, tf.int64)
    spread = positions > 0
    sample = tf.where(spread, row * positions + position, row)
    keep = tf.logical_or(tf.logical_not(spread), position < positions)
    count = tf.where(spread, batch * positions, batch)
    natural = tf.stack([batch, positions]) if plan.positions else tf.reshape(batch, [1])
    return ids, sample, spread, keep, count, _configured(config, natural)


def _configured(config: Any, natural: tf.Tensor) -> tf.Tensor:
    if config.output_shape is None:
        return natural
    return tf.constant(list(config.output_shape), tf.int64)


def _weights(weight: Any, kind: str, ids: tf.Tensor) -> tf.Tensor:
    if weight is None or kind == "none":
        return tf.ones_like(ids, tf.float64)
    return tf.cast(tf.reshape(weight.values, [-1]), tf.float64)


def _lookup_one(table: Any, value: Any, weight: Any, feature: _Feature, plan: _Plan) -> tf.Tensor:
    """One feature's activations `output_shape + [dim]`: the project's pooled lookup (engine/lookup.py) as ops."""
    config = feature.config
    leaf = _convert.encode(value, "")
    kind = leaf.kind
    if kind == "object":  # numpy or the project's tensors: as TensorFlow values
        value = _as_tensorflow(value)
        weight = None if weight is None else _as_tensorflow(weight)
        kind = _convert.encode(value, "").kind
    ids, sample, spread, keep, count, output = _entries(value, kind, plan, config)
    w = _weights(weight, kind if weight is not None else "none", ids)
    if spread is not None:  # one id per position: its weight is ignored
        w = tf.where(spread, tf.ones_like(w), w)
    keep = tf.logical_and(keep, ids >= 0)  # negative ids are padding
    combiner = config.table.combiner
    if config.validate_weights_and_indices and combiner != "sum":
        keep = tf.logical_and(keep, w > 0)  # the safe rule prunes non-positive weights for mean and sqrtn
    ids, sample, w = tf.boolean_mask(ids, keep), tf.boolean_mask(sample, keep), tf.boolean_mask(w, keep)
    vocabulary = config.table.vocabulary_size
    check = tf.debugging.Assert(
        tf.reduce_all(ids < vocabulary),
        [
            f"Feature {feature.spec.name} (table {config.table.name}): an id is out of range [0, {vocabulary}); "
            "ids must be in [0, vocabulary_size), negative ids are padding. Received ids:",
            ids,
        ],
    )
    with tf.control_dependencies([check]):
        ids = tf.identity(ids)
    if combiner == "sum":
        scale = tf.ones_like(w)
    else:
        total = tf.math.unsorted_segment_sum(w if combiner == "mean" else w * w, sample, count)
        total = total if combiner == "mean" else tf.sqrt(total)
        scale = tf.gather(tf.math.divide_no_nan(tf.ones_like(total), total), sample)
    coefficients = tf.cast(scale * w, tf.float32)
    if kind == "sparse":
        # The table's gradient names its rows as TensorFlow's own CPU lookup's does: once per row for a sparse
        # input (its sparse lookup gathers the unique ids), once per id otherwise. An optimizer that applies the
        # repeated rows of a sparse gradient apart (Keras 3's) then gives TensorFlow's numbers.
        unique, position = tf.unique(ids)
        rows = tf.gather(tf.gather(table, unique), position)
    else:
        rows = tf.gather(table, ids)
    out = tf.math.unsorted_segment_sum(rows * coefficients[:, None], sample, count)
    out = tf.reshape(out, tf.concat([output, [config.table.dim]], 0))
    if plan.output_shape is not None:
        out.set_shape(list(plan.output_shape) + [config.table.dim])
    return out


def _as_tensorflow(value: Any) -> Any:
    from ..engine import is_ragged_tensor, is_sparse

    if is_sparse(value):
        return tf.SparseTensor(
            np.asarray(value.indices, np.int64), np.asarray(value.values), np.asarray(value.dense_shape, np.int64)
        )
    if is_ragged_tensor(value):
        return tf.RaggedTensor.from_row_splits(np.asarray(value.values), np.asarray(value.row_splits, np.int64))
    return tf.convert_to_tensor(np.asarray(value))


def _lookup(feature_config: Any, features: Sequence[_Feature], inputs: Any, weights: Any, tables: list[Any]) -> Any:
    flat_inputs = flatten_up_to(feature_config, inputs, "features")
    flat_weights = [None] * len(flat_inputs) if weights is None else flatten_up_to(feature_config, weights, "weights")
    leaves = [_convert.encode(v, f"input {path_string(f.path)}") for v, f in zip(flat_inputs, features)]
    weight_leaves = [_convert.encode(w, f"weight {path_string(f.path)}") for w, f in zip(flat_weights, features)]
    plans = [_plan(leaf, weight, f) for leaf, weight, f in zip(leaves, weight_leaves, features)]
    outputs = [
        _lookup_one(table, value, weight, f, plan)
        for table, value, weight, f, plan in zip(tables, flat_inputs, flat_weights, features, plans)
    ]
    return pack_as(feature_config, outputs)


# The class and the function -----------------------------------------------------------------------


class TPUEmbeddingForServing(Trackable):
    """`tf.tpu.experimental.embedding.TPUEmbeddingForServing` under the bridge: `tf.Variable` tables, TF ops.

    Arguments and errors are the project's class's
    (`compat.tpu_embedding_for_serving.TPUEmbeddingForServing`: refused under
    a `TPUStrategy`, tables named and given the global optimizer as in
    TensorFlow). `build()` creates the variables; `embedding_tables` is
    `{TableConfig: tf.Variable}`, `variables` `{TableConfig: {'parameters':
    table, <slot>: slot}}`; a `tf.train.Checkpoint` saves them under
    TensorFlow's keys (`<table>`, `<table>/<slot>`).
    """

    def __init__(self, feature_config: Any, optimizer: Any, experimental_sparsecore_restore_info: Any = None):
        restore_info = experimental_sparsecore_restore_info
        self._embedding = serving.TPUEmbeddingForServing(feature_config, optimizer, restore_info)
        self._feature_config = feature_config
        self._table_config = self._embedding.table_configs
        self._features = [_Feature(f.path, f.config, f.spec) for f in self._embedding.features]
        self._seed = tensorflow_initializer_seed()
        self._variables: dict[str, dict[str, Any]] = {}
        self._built = False

    def __repr__(self) -> str:
        return f"{self._embedding!r} (TensorFlow bridge: tf.Variable tables, TensorFlow ops)"

    def build(self) -> None:
        """Creates the tables and slots as `tf.Variable`s (once)."""
        if self._built:
            return
        with tf.init_scope():
            self._variables = self._create_variables()
        self._built = True

    def _maybe_build(self) -> None:
        if not self._built:
            self.build()

    def _create_variables(self) -> dict[str, dict[str, Any]]:
        """The variables of every table, in table order: TensorFlow's names, the project's initial values.

        The initializers draw as the engine would (`initializer_seed` from
        TensorFlow's global seed), table after table.
        """
        rng = np.random.default_rng(self._seed)
        table_specs = {spec.name: spec for spec in self._embedding.engine_spec.tables}
        seeded = {name: spec.seeded_initializer(rng) for name, spec in table_specs.items()}
        variables = {}
        for table in self._table_config:
            name = str(table.name)  # named by the project's class, as TensorFlow names its tables
            spec = dataclasses.replace(table_specs[name], initializer=seeded[name])
            parameters = self._variable(name, lambda spec=spec: initial_table(spec, rng), True)
            slots: Any = {}
            if table.optimizer is not None:
                names, initializers = lowering.slot_names_and_initializers(table.optimizer)
                shape = (table.vocabulary_size, table.dim)
                creation_fn = getattr(table.optimizer, "slot_variable_creation_fn", None)
                if creation_fn is not None:
                    slots = self._created_slots(table, creation_fn, parameters, names, initializers)
                else:
                    slots = {
                        slot: self._variable(f"{name}/{slot}", functools.partial(init, shape, np.float32), False)
                        for slot, init in zip(names, initializers)
                    }
            variables[name] = {**slots, "parameters": parameters}
        return variables

    def _variable(self, name: str, initial: Any, trainable: bool) -> tf.Variable:
        """A `[vocabulary_size, dim]` float32 variable tracked under `name`, restored on creation when a
        checkpoint is waiting for it (TensorFlow's `_add_variable_with_custom_getter`)."""
        table = name.split("/")[0]
        config = next(t for t in self._table_config if t.name == table)
        shape = (config.vocabulary_size, config.dim)

        def getter(name: str, shape: Any, dtype: Any, initializer: Any, trainable: bool) -> tf.Variable:
            if isinstance(initializer, CheckpointInitialValueCallable):
                value = initializer(shape=variable_shape).wrapped_value
                if tuple(value.shape.as_list()) != variable_shape:
                    raise ValueError(
                        f"The checkpoint's value for {name!r} has shape {value.shape.as_list()}; this "
                        f"embedding's is {list(variable_shape)}. Restore into an embedding with the same TableConfigs."
                    )
                variable = tf.Variable(value, name=name, shape=variable_shape, dtype=dtype, trainable=trainable)
                # TensorFlow internals, as its own restore-on-create getter uses them: no public API marks a variable
                # created from a checkpoint's value as restored (so the pending restore skips it).
                variable._maybe_initialize_trackable()  # noqa: SLF001  (TensorFlow's Trackable internal)
                if initializer.restore_uid is not None:
                    variable._update_uid = initializer.restore_uid  # noqa: SLF001  (TensorFlow's Trackable internal)
                return variable
            return tf.Variable(initializer, name=name, shape=variable_shape, dtype=dtype, trainable=trainable)

        variable_shape = shape
        return self._add_variable_with_custom_getter(
            name=name,
            shape=shape,
            dtype=tf.float32,
            initializer=lambda: tf.constant(initial(), tf.float32),
            getter=getter,
            trainable=trainable,
        )

    def _created_slots(self, table: Any, creation_fn: Any, parameters: Any, names: list, initializers: list) -> Any:
        """The optimizer's `slot_variable_creation_fn(table variable, slot names, initializers)`, as TensorFlow
        calls it; what it returns are the slots."""
        created = creation_fn(parameters, list(names), [callable_by_tensorflow(init) for init in initializers])
        if not isinstance(created, dict) or sorted(created) != sorted(names):
            received = sorted(created) if isinstance(created, dict) else type(created).__name__
            raise ValueError(
                f"slot_variable_creation_fn of table {table.name!r} must return a dict with exactly the "
                f"slot names {list(names)}. Received: {received}."
            )
        return dict(created)

    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        """Nothing of its own to save: the tables and slots are its variables (children)."""
        return {}

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> Any:
        """Takes and ignores what a checkpoint of the training `TPUEmbedding` holds beside the tables (the
        engine's step, `_checkpoint.py`): serving has no step, and TensorFlow's `assert_consumed()` then passes
        on a checkpoint taken under a `TPUStrategy`, as with TensorFlow's own checkpoints."""
        return tf.no_op()

    @property
    def embedding_tables(self) -> dict[Any, tf.Variable]:
        """`{TableConfig: tf.Variable [vocabulary_size, dim]}` (built on first use)."""
        self._maybe_build()
        return {table: self._variables[str(table.name)]["parameters"] for table in self._table_config}

    @property
    def variables(self) -> dict[Any, dict[str, tf.Variable]]:
        """`{TableConfig: {'parameters': table, <slot name>: slot}}`, the variables themselves."""
        self._maybe_build()
        return {table: dict(self._variables[str(table.name)]) for table in self._table_config}

    @do_not_convert
    def embedding_lookup(self, features: Any, weights: Any = None) -> Any:
        """The training path's lookups of `features`, as TensorFlow ops over the table variables: a nest like
        `feature_config` of float32 `output_shape + [dim]` tensors, differentiable with respect to the tables."""
        with tf.init_scope():
            self._maybe_build()
        tables = [self._variables[str(f.config.table.name)]["parameters"] for f in self._features]
        return _lookup(self._feature_config, self._features, features, weights, tables)

    __call__ = embedding_lookup


@do_not_convert
def serving_embedding_lookup(inputs: Any, weights: Any | None, tables: Any, feature_config: Any) -> Any:
    """`tf.tpu.experimental.embedding.serving_embedding_lookup` as TensorFlow ops (eagerly or in `tf.function`).

    `tables` maps each `TableConfig` (or its name) to a `[vocabulary_size,
    dim]` table: a `tf.Variable`, a tensor or an array.
    """
    leaves = flatten_with_paths(feature_config)
    flatten_up_to(feature_config, inputs, "inputs")  # the structure first, as TensorFlow
    if weights is not None:
        flatten_up_to(feature_config, weights, "weights")
    if not isinstance(tables, dict):
        raise ValueError(f"Argument `tables` must be a dict of TableConfig -> table. Received: {type(tables)}.")
    for _, config in leaves:
        if not hasattr(config, "table"):
            raise ValueError(f"Argument `feature_config` must be a nest of FeatureConfig. Received {config!r}.")
    spec = lowering.spec_from_feature_config(feature_config, None)
    features = [
        _Feature(path, config, dataclasses.replace(feature, max_sequence_length=0))
        for (path, config), feature in zip(leaves, spec.features)
    ]
    values = [serving.table_of(tables, f.config.table) for f in features]
    return _lookup(feature_config, features, inputs, weights, values)
