"""`export_saved_model` for a TensorFlow model_fn: a real SavedModel that TensorFlow serves on a CPU.

Training feeds the feature layers' outputs from the engine (tf_bridge.py).
A served model has no engine, so the export builds the PREDICT graph again
with every feature-layer output computed in TensorFlow, from the serving
input receiver's tensors:

- each table is a TF variable holding the engine's (whole, unsharded) table,
  named as in the model_dir's checkpoint (`dense_features/movie_embedding/
  embedding_weights`);
- the ids are mapped with TensorFlow ops under the engine's input rules
  (`engine/ragged.py`: dense padding, identity `default_value`, vocabularies
  with TensorFlow's OOV hash buckets);
- the lookups are the engine's (`engine/lookup.py`): pooled lookups with the
  same coefficients and the same entry-order float32 sums, the safe rule,
  sequence lookups padded or truncated to `max_sequence_length`.

The dense variables take their trained values from `params['dense_state']`.
The SavedModel is TF1-style (`tf.compat.v1.saved_model.Builder`, tag
`serve`), what TensorFlow's own Estimator writes: `tf.saved_model.load`,
`saved_model_cli` and TensorFlow Serving run it, and its outputs equal the
runner's `predict`. See docs/tensorflow_estimator.md.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.saved_model.model_utils import export_utils  # TF core: what its Estimator exports with

from ..api.lookup_scope import LookupScope
from ..spec import FeatureSpec
from .tf_bridge import GraphLayers, refuse_keras_3

__all__ = ["ServingScope", "write_saved_model"]

SINGLE_FEATURE = "feature"  # the key TensorFlow gives a receiver's features that are not a dict


# Ids -------------------------------------------------------------------------------------------


class Entries:
    """One feature's ids in a batch as flat tensors: `ids`, `rows` (example), `positions`, `weights`."""

    def __init__(self, ids: Any, rows: Any, positions: Any, weights: Any | None, batch_size: Any):
        self.ids, self.rows, self.positions, self.weights, self.batch_size = ids, rows, positions, weights, batch_size

    def keep(self, mask: Any) -> Entries:
        ids, rows, positions = (tf.boolean_mask(t, mask) for t in (self.ids, self.rows, self.positions))
        weights = None if self.weights is None else tf.boolean_mask(self.weights, mask)
        return Entries(ids, rows, positions, weights, self.batch_size)


def _flat(value: Any, feature: FeatureSpec, what: str) -> tuple[Any, Any, Any, Any, Any | None]:
    """(values, rows, positions, batch size, dense-entry indices) of a SparseTensor, RaggedTensor or dense tensor."""
    if isinstance(value, tf.SparseTensor):
        value = tf.sparse.reorder(value)
        rank = value.shape.rank
        if rank not in (1, 2, None):
            raise ValueError(
                f"Feature {feature.name!r}: sparse {what} must have rank 1 or 2 ([batch] or "
                f"[batch, ids]); received a SparseTensor of rank {rank}."
            )
        rows = value.indices[:, 0]
        positions = value.indices[:, -1] if rank != 1 else tf.zeros_like(rows)
        return value.values, rows, positions, value.dense_shape[0], None
    if isinstance(value, tf.RaggedTensor):
        if value.ragged_rank != 1:
            raise ValueError(
                f"Feature {feature.name!r}: ragged {what} must have ragged_rank 1; received "
                f"ragged_rank {value.ragged_rank}."
            )
        rows = value.value_rowids()
        positions = tf.range(tf.size(value.values, out_type=tf.int64), dtype=tf.int64) - tf.gather(
            value.row_splits, rows
        )
        return value.values, rows, positions, value.nrows(), None
    value = tf.convert_to_tensor(value)
    if value.shape.rank == 1:
        value = tf.expand_dims(value, -1)
    if value.shape.rank != 2:
        raise ValueError(
            f"Feature {feature.name!r}: dense {what} must have shape [batch] or [batch, ids]; "
            f"received shape {value.shape}."
        )
    return value, None, None, tf.shape(value, out_type=tf.int64)[0], True


def _dense_padding(value: Any, feature: FeatureSpec) -> Any:
    """The padding entries of a dense id tensor: negative ints (and 0 under dense_zero_is_padding), ''."""
    if value.dtype == tf.string:
        return tf.equal(value, "")
    padding = tf.less(value, 0)
    if feature.dense_zero_is_padding:
        padding = tf.logical_or(padding, tf.equal(value, 0))
    return padding


def entries(ids: Any, weights: Any, feature: FeatureSpec) -> Entries:
    """The kept entries of one feature, ids mapped to rows of its table (engine/ragged.py's rules)."""
    values, rows, positions, batch_size, dense = _flat(ids, feature, "ids")
    weight_values = None
    if dense:
        where = tf.where(tf.logical_not(_dense_padding(values, feature)))
        if weights is not None:
            dense_weights = tf.convert_to_tensor(weights)
            if dense_weights.shape.rank == 1:
                dense_weights = tf.expand_dims(dense_weights, -1)
            weight_values = tf.gather_nd(dense_weights, where)
        values, rows, positions = tf.gather_nd(values, where), where[:, 0], where[:, 1]
    elif weights is not None:
        weight_values = _flat(weights, feature, "weights")[0]
    if weight_values is not None:
        weight_values = tf.cast(weight_values, tf.float32)
    mapped, checks = _map_ids(values, feature)
    with tf.control_dependencies(checks):
        mapped = tf.identity(mapped)
    return Entries(mapped, rows, positions, weight_values, batch_size).keep(tf.greater_equal(mapped, 0))


def _map_ids(values: Any, feature: FeatureSpec) -> tuple[Any, list[Any]]:
    """(int64 row ids, -1 for dropped entries; run-time checks) for raw ids or tokens."""
    is_text = values.dtype == tf.string
    if not (is_text or values.dtype.is_integer):
        raise TypeError(
            f"Feature {feature.name!r}: ids must be integers or strings; the serving input gives {values.dtype.name}."
        )
    if feature.id_source == "identity":
        if is_text:
            raise TypeError(
                f"Feature {feature.name!r} is an identity feature: its ids must be integers. The "
                "serving input gives strings."
            )
        values = tf.cast(values, tf.int64)
        too_big = tf.greater_equal(values, feature.num_buckets)
        if feature.default_value is not None:
            out_of_range = tf.logical_or(too_big, tf.less(values, 0))
            return tf.where(out_of_range, tf.constant(feature.default_value, tf.int64), values), []
        check = tf.debugging.assert_less(
            values,
            tf.constant(feature.num_buckets, tf.int64),
            message=(
                f"Feature {feature.name!r}: ids must be in [0, num_buckets={feature.num_buckets}); negative ids are "
                "padding and are dropped."
            ),
        )
        return tf.where(tf.less(values, 0), tf.constant(-1, tf.int64), values), [check]
    vocabulary = list(feature.vocabulary or ())
    text_vocabulary = isinstance(vocabulary[0], (str, bytes))
    if text_vocabulary != is_text:
        want, got = ("strings", "integers") if text_vocabulary else ("integers", "strings")
        raise TypeError(f"Feature {feature.name!r} has a vocabulary of {want}; the serving input gives {got}.")
    keys = tf.constant(vocabulary if is_text else np.asarray(vocabulary, np.int64))
    default = -1 if feature.default_value is None else int(feature.default_value)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(keys, tf.range(len(vocabulary), dtype=tf.int64)), default_value=-1
    )
    found = table.lookup(values if is_text else tf.cast(values, tf.int64))
    if feature.num_oov_buckets > 0:
        tokens = values if is_text else tf.strings.as_string(tf.cast(values, tf.int64))
        unknown = len(vocabulary) + tf.strings.to_hash_bucket_fast(tokens, feature.num_oov_buckets)
    else:
        unknown = tf.fill(tf.shape(found), tf.constant(default, tf.int64))
    return tf.where(tf.greater_equal(found, 0), found, unknown), []


# Lookups --------------------------------------------------------------------------------------


def pooled_lookup(table: Any, batch: Entries, combiner: str, safe: bool) -> Any:
    """float32 [B, D]: engine/lookup.pooled_lookup in TensorFlow ops (same coefficients, same sums)."""
    if safe and combiner != "sum" and batch.weights is not None:
        batch = batch.keep(tf.greater(batch.weights, 0))
    weights = tf.ones_like(batch.ids, dtype=tf.float64) if batch.weights is None else tf.cast(batch.weights, tf.float64)
    num_examples = tf.cast(batch.batch_size, tf.int64)
    if combiner == "sum":
        scale = tf.ones([num_examples], tf.float64)
    elif combiner == "mean":
        scale = tf.math.divide_no_nan(
            tf.constant(1.0, tf.float64), tf.math.unsorted_segment_sum(weights, batch.rows, num_examples)
        )
    else:  # sqrtn
        scale = tf.math.divide_no_nan(
            tf.constant(1.0, tf.float64),
            tf.sqrt(tf.math.unsorted_segment_sum(weights * weights, batch.rows, num_examples)),
        )
    coefficients = tf.cast(tf.gather(scale, batch.rows) * weights, tf.float32)
    rows = tf.gather(table, batch.ids) * coefficients[:, None]
    return tf.math.unsorted_segment_sum(rows, batch.rows, num_examples)


def sequence_lookup(table: Any, batch: Entries, max_sequence_length: int) -> tuple[Any, Any]:
    """(float32 [B, L, D], int64 [B] lengths): engine/lookup.sequence_lookup in TensorFlow ops."""
    length = int(max_sequence_length)
    num_examples = tf.cast(batch.batch_size, tf.int64)
    lengths = tf.minimum(
        tf.maximum(
            tf.math.unsorted_segment_max(batch.positions + 1, batch.rows, num_examples), tf.constant(0, tf.int64)
        ),
        length,
    )
    kept = batch.keep(tf.less(batch.positions, length))
    dim = table.shape[1]
    out = tf.scatter_nd(
        tf.stack([kept.rows, kept.positions], axis=1),
        tf.gather(table, kept.ids),
        tf.stack([num_examples, tf.constant(length, tf.int64), tf.constant(dim, tf.int64)]),
    )
    return tf.reshape(out, [-1, length, dim]), lengths


# The feature layers' outputs in the serving graph ----------------------------------------------


class ServingScope(GraphLayers):
    """The scope the feature layers read while the export builds its graph: outputs are TF lookups.

    Args:
      features: the engine's FeatureSpecs.
      combiners: table -> combiner.
      table_variable: `(table name) -> tf.Variable`.
    """

    def __init__(
        self, features: Iterable[FeatureSpec], combiners: Mapping[str, str], table_variable: Callable[[str], Any]
    ):
        super().__init__({}, {}, training=False)
        self.specs = {f.name: f for f in features}
        self.combiners = dict(combiners)
        self.table_variable = table_variable

    def _spec(self, column: Any, owner: str) -> FeatureSpec:
        key = column.get_feature_key_name()
        if key not in self.specs:
            raise ValueError(
                f"{owner}: column {column.name!r} (feature {key!r}) is not among the embedding columns "
                "of the EmbeddingConfigSpec given to TPUEstimator, so the export has no table for it."
            )
        return self.specs[key]

    def _entries(self, feature: FeatureSpec, features: Mapping[str, Any], owner: str) -> Entries:
        needed = {feature.name: f"feature {feature.name!r}"}
        if feature.weight_key is not None:
            needed[feature.weight_key] = f"the weight feature {feature.weight_key!r} of feature {feature.name!r}"
        for key, what in needed.items():
            if key not in features:
                raise ValueError(
                    f"{owner}: {what} is missing from the serving input's features. Received keys: {sorted(features)}."
                )
        weights = None if feature.weight_key is None else features[feature.weight_key]
        return entries(features[feature.name], weights, feature)

    def _pooled(self, column: Any, features: Mapping[str, Any], owner: str) -> Any:
        feature = self._spec(column, owner)
        return pooled_lookup(
            self.table_variable(feature.table),
            self._entries(feature, features, owner),
            self.combiners[feature.table],
            feature.safe_lookup,
        )

    def _sequence(self, column: Any, owner: str, with_lengths: bool) -> tuple[Any, Any]:
        feature = self._spec(column, owner)
        return sequence_lookup(
            self.table_variable(feature.table),
            self._entries(feature, self.features or {}, owner),
            feature.max_sequence_length,
        )


# Signatures -----------------------------------------------------------------------------------


def _signature_defs(receiver: Any, spec: Any) -> dict[str, Any]:
    """TensorFlow's own rule (what its Estimator calls): the spec's export_outputs, one of them the default, else
    every prediction as the default; one signature per output and receiver alternative."""
    outputs = export_utils.get_export_outputs(getattr(spec, "export_outputs", None), spec.predictions)
    return export_utils.build_all_signature_defs(
        receiver.receiver_tensors, outputs, getattr(receiver, "receiver_tensors_alternatives", None)
    )


# The export ------------------------------------------------------------------------------------


def write_saved_model(
    export_dir: str,
    *,
    serving_input_receiver_fn: Callable[[], Any],
    call_model_fn: Callable[[Any, LookupScope], Any],
    features: Iterable[FeatureSpec],
    tables: Mapping[str, np.ndarray],
    combiners: Mapping[str, str],
    table_names: Callable[[str], str],
    dense_state: Mapping[str, Any],
    global_step: int,
    assets_extra: Mapping[str, str] | None,
    as_text: bool,
) -> str:
    """Builds the serving graph and writes it with the trained values as a SavedModel at `export_dir`.

    The SavedModel is written into a temporary sibling directory and renamed,
    so `export_dir` holds a whole SavedModel or nothing.
    """
    graph = tf.Graph()
    variables: dict[str, Any] = {}
    with graph.as_default():
        receiver = serving_input_receiver_fn()
        for attribute in ("features", "receiver_tensors"):
            if not hasattr(receiver, attribute):
                raise TypeError(
                    "serving_input_receiver_fn must return a ServingInputReceiver (with `features` and "
                    f"`receiver_tensors`). Received: {type(receiver).__name__}."
                )
        receiver_features = receiver.features
        if not isinstance(receiver_features, Mapping):
            receiver_features = {SINGLE_FEATURE: receiver_features}
        step_variable = tf.compat.v1.train.get_or_create_global_step()
        for table, value in tables.items():  # at the graph's root, before any scope of the model_fn
            variables[table] = tf.compat.v1.get_variable(
                table_names(table),
                shape=value.shape,
                dtype=tf.float32,
                initializer=tf.compat.v1.zeros_initializer(),
                trainable=False,
            )
        scope = ServingScope(features, combiners, variables.__getitem__)
        scope.features = receiver_features
        with tf.variable_creator_scope(refuse_keras_3):
            spec = call_model_fn(receiver_features, scope)
        signatures = _signature_defs(receiver, spec)
        model_variables = [
            v
            for v in tf.compat.v1.global_variables()
            if v is not step_variable and not any(v is t for t in variables.values())
        ]
        missing = [v.op.name for v in model_variables if v.op.name not in dense_state]
        if missing:
            raise ValueError(
                f"No trained value for the model's variables {missing}: train the model (or give "
                "checkpoint_path) before exporting it."
            )
        values = [(step_variable, np.int64(global_step))]
        values += [(v, np.asarray(dense_state[v.op.name])) for v in model_variables]
        values += [(variables[t], tables[t]) for t in variables]
        assigns = []
        for variable, value in values:
            if tuple(np.shape(value)) != tuple(variable.shape.as_list()):
                raise ValueError(
                    f"The trained value of {variable.op.name!r} has shape {list(np.shape(value))}; the "
                    f"model_fn's variable has shape {variable.shape.as_list()}."
                )
            placeholder = tf.compat.v1.placeholder(variable.dtype.base_dtype, variable.shape)
            assigns.append((placeholder, variable.assign(placeholder, read_value=False), value))
        init = tf.compat.v1.global_variables_initializer()
        main_op = tf.group(tf.compat.v1.local_variables_initializer(), tf.compat.v1.tables_initializer())
        saver = tf.compat.v1.train.Saver(sharded=True, write_version=tf.compat.v1.train.SaverDef.V2)
    export_dir = os.fspath(export_dir)
    parent = os.path.dirname(os.path.abspath(export_dir))
    temporary = os.path.join(parent, "temp-" + os.path.basename(export_dir))
    try:
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(init)
            for placeholder, assign, value in assigns:
                session.run(assign, {placeholder: value})
            builder = tf.compat.v1.saved_model.Builder(temporary)
            builder.add_meta_graph_and_variables(
                session,
                [tf.saved_model.SERVING],
                signature_def_map=signatures,
                main_op=main_op,
                saver=saver,
                strip_default_attrs=True,
            )
            builder.save(as_text=as_text)
        for destination, source in (assets_extra or {}).items():
            target = os.path.join(temporary, "assets.extra", destination)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
        os.replace(temporary, export_dir)
    finally:
        if os.path.isdir(temporary):
            shutil.rmtree(temporary, ignore_errors=True)
    return export_dir
