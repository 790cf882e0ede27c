"""CPU serving lookups: `TPUEmbeddingForServing` and `serving_embedding_lookup`.

Both give exactly the training path's lookups (`TPUEmbedding.dequeue`; the
one exception, quantized tables, is below): the
same input rules, the same combiners and safe-lookup rule, and sequence
features padded or truncated to `max_sequence_length`. TensorFlow's own
serving lookup differs from its TPU lookup in places; ours does not:

- a sequence feature's `RaggedTensor` or `SparseTensor` is padded or
  truncated to `[B, max_sequence_length, dim]` (TensorFlow's serving
  lookup honours `max_sequence_length` for some inputs only);
- a dense input `[B, 1]` gives `[B, dim]`, as in training (TensorFlow's
  serving `tf.nn.embedding_lookup` gives `[B, 1, dim]`), and a dense input
  with several ids per example is a `ValueError`, as in training;
- multi-dimensional output shapes (inputs of rank >= 3,
  `FeatureConfig.output_shape`) are the training path's: TensorFlow's
  serving lookup applies `output_shape` to ragged inputs only, and keeps
  a dense input's trailing 1 (`[B, T, 1, dim]`);
- a rank-0 dense input and a rank-1 `SparseTensor` are `ValueError`s, as
  in training (TensorFlow's serving lookup gives one `[dim]` vector for
  each: the id, or all the tensor's ids combined);
- negative ids are dropped on every input type (and, with
  `validate_weights_and_indices=True`, non-positive weights for `mean` and
  `sqrtn`), as in training; TensorFlow's serving ragged path keeps them.

One difference is TensorFlow's, and kept: a table's `quantization_config`
(simulated quantization, a TPU lookup's forward pass) is not applied here,
as TensorFlow's CPU lookups (`cpu_embedding_lookup`, behind its
`TPUEmbeddingForServing` and `serving_embedding_lookup`) do not apply it: serving reads the float32 table as it is
stored. To serve quantized values, quantize the table first
(`engine.lookup.quantize`), as TensorFlow's `QuantizationConfig` docstring
advises.

TensorFlow's serving-only checks are kept, with its messages: weights for
a dense input, weights of another type than their ids, and weights for a
sequence feature are `ValueError`s, checked before anything else
(`check_serving_input`), and so is a dense input for a sequence feature.

Serving is not replicated: under `mpiexec` each process holds its own
`TPUEmbeddingForServing` with the full tables on a one-process engine (it is
refused under a `TPUStrategy`, the only strategy that spans processes), and
its lookups are local. Restoring a checkpoint is collective, as every
`tf.train.Checkpoint` call under mpiexec (train.py): every process reads the
full tables, so all serve the same numbers. Before a restore, tables drawn
from an initializer without a seed differ from process to process.

>>> import numpy as np
>>> import tpu_embedding_shim as tf
>>> table = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=5, dim=1, combiner="sum")
>>> config = {"seq": tf.tpu.experimental.embedding.FeatureConfig(table=table, max_sequence_length=2)}
>>> tables = {table: np.arange(5, dtype=np.float32)[:, None]}
>>> out = serving_embedding_lookup({"seq": tf.ragged.constant([[4, 3, 2], [1]])}, None, tables, config)
>>> out["seq"][..., 0].tolist()
[[4.0, 3.0], [1.0, 0.0]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..engine import is_ragged_tensor, is_sparse, lookup, to_ragged
from . import lowering
from . import tpu_embedding_v2_utils as v2_utils
from .midlevel_base import MidLevelBase, under_tpu_strategy
from .midlevel_inputs import convert_input
from .nest import Path, flatten_up_to, flatten_with_paths, pack_as, path_string

__all__ = ["TPUEmbeddingForServing", "serving_embedding_lookup", "check_serving_input", "input_kind", "table_of"]


def input_kind(value: Any) -> str | None:
    """'dense', 'sparse' or 'ragged' for a value of that TensorFlow input type; None for anything else (None,
    Python lists, which `convert_input` reads later)."""
    if value is None or isinstance(value, (list, tuple)):
        return None
    if is_sparse(value):
        return "sparse"
    if is_ragged_tensor(value):
        return "ragged"
    return "dense" if hasattr(value, "shape") else None


def check_serving_input(
    kind: str | None, weight_kind: str | None, types: tuple[Any, Any], config: Any, path: Path, batch: int | None
) -> None:
    """TensorFlow's serving checks of one feature, in its order and with its messages, before the input rules.

    Args:
      kind, weight_kind: `input_kind` of the ids and of the weights.
      types: the types of the ids and of the weights, as the messages name them.
      config: the feature's `FeatureConfig`.
      path: where the feature sits in `feature_config`.
      batch: the number of examples of a ragged or rank-2 sparse input, when known.
    """
    where = path_string(path) or "(the only feature)"
    if weight_kind is not None and kind is not None:
        if kind == "dense":
            raise ValueError(
                f"Weight specified for {where}, but input is dense. A dense input has one id per output, whose "
                "weight would always be 1: pass the ids as a SparseTensor or a RaggedTensor to weight them."
            )
        if weight_kind != kind:
            raise ValueError(
                f"Weight for {where} is of type {types[1]} but it does not match type of the input which is {types[0]}."
            )
        if config.max_sequence_length > 0:
            raise ValueError(
                f"Weight specified for {where}, but this is a sequence feature (max_sequence_length="
                f"{config.max_sequence_length}); sequence features take no weights."
            )
    if kind == "ragged" and config.output_shape is not None and batch:
        count = int(np.prod(config.output_shape, dtype=np.int64))
        if count != batch and count % batch:
            raise ValueError(
                "Output shape set in the FeatureConfig should be the factor of the input data batch size. But "
                f"instead got output shape {list(config.output_shape)}, input data batch size {batch} (feature "
                f"{where}: {count} outputs are one combined output per example when equal to the batch size, or k "
                "outputs per example, one per position, when a multiple of it)."
            )


class TPUEmbeddingForServing(MidLevelBase):
    """The mid-level API for CPU serving: tables (restored from a checkpoint) and lookups.

    Args:
      feature_config: a nest of `FeatureConfig`, as in training.
      optimizer: the training optimizer, so a training checkpoint's slots have
        a home; None creates no slots (a restore then reads only the tables).

    Raises:
      RuntimeError: created under a `TPUStrategy` scope (as in TensorFlow).
      ValueError: an unsupported optimizer; two tables with one name.
    """

    tensorflow_class_name = "TPUEmbeddingForServing"
    simulates_quantization = False  # TensorFlow's CPU lookup (`cpu_embedding_lookup`) reads the float32 tables

    def __init__(self, feature_config: Any, optimizer: Any, experimental_sparsecore_restore_info: Any = None):
        if under_tpu_strategy():
            raise RuntimeError("Serving on TPU is not yet supported.")
        super().__init__(feature_config, optimizer)

    def build(self) -> None:
        """Creates the tables (and slots). A second call does nothing."""
        self._build_engine()
        self._built = True

    def embedding_lookup(self, features: Any, weights: Any = None) -> Any:
        """Looks `features` up: a nest like `feature_config` of float32 `output_shape + [dim]` arrays.

        The same numbers as `TPUEmbedding.dequeue` on the same tables. Changes
        nothing (an inference lookup).

        Raises:
          ValueError: a structure that differs in nesting, length or keys; a
            bad input; weights for a dense input or a sequence feature; a dense
            input for a sequence feature.
          TypeError: a sequence type that differs from `feature_config`'s.
        """
        self.build()
        _check_serving_inputs(self._feature_config, features, weights)
        converted = self._convert(features, weights, serving=True)
        _, activations = self._lookup(converted, training=False)
        return pack_as(self._feature_config, activations)

    def __call__(self, features: Any, weights: Any = None) -> Any:
        """`embedding_lookup(features, weights)`."""
        return self.embedding_lookup(features, weights)


def serving_embedding_lookup(inputs: Any, weights: Any | None, tables: Mapping[Any, Any], feature_config: Any) -> Any:
    """`tf.tpu.experimental.embedding.serving_embedding_lookup`: a lookup on given tables.

    Args:
      inputs: a nest like `feature_config` of dense arrays, `SparseTensor`s or
        `RaggedTensor`s.
      weights: None, or a nest like `inputs` of weights (None leaves allowed).
      tables: `{TableConfig: [vocabulary_size, dim] array}` (e.g.
        `embedding.embedding_tables`).
      feature_config: a nest of `FeatureConfig`.

    Returns:
      A nest like `feature_config` of float32 activations, exactly the
      training path's (module docstring).

    Raises:
      ValueError: structures that differ in nesting, length or keys; a table
        missing from `tables` or of the wrong shape; an input rule broken
        (see `TPUEmbeddingForServing.embedding_lookup`).
      TypeError: a sequence type that differs from `feature_config`'s.
    """
    flat_configs = flatten_with_paths(feature_config)
    flat_inputs = flatten_up_to(feature_config, inputs, "inputs")
    flat_weights = [None] * len(flat_inputs)
    if weights is not None:
        flat_weights = flatten_up_to(feature_config, weights, "weights")
    if not isinstance(tables, Mapping):
        raise ValueError(f"Argument `tables` must be a dict of TableConfig -> table. Received: {type(tables)}.")
    spec = lowering.spec_from_feature_config(feature_config, None)
    for ids, weight, (path, config) in zip(flat_inputs, flat_weights, flat_configs):
        if not isinstance(config, v2_utils.FeatureConfig):
            raise ValueError(f"Argument `feature_config` must be a nest of FeatureConfig. Received {config!r}.")
        check_serving_input(input_kind(ids), input_kind(weight), (type(ids), type(weight)), config, path, _batch(ids))
    outputs = []
    for ids, weight, (path, config), feature in zip(flat_inputs, flat_weights, flat_configs, spec.features):
        table = np.asarray(table_of(tables, config.table), dtype=np.float32)
        pooled = dataclasses.replace(feature, max_sequence_length=0)  # as the mid-level classes' engine sees it
        converted = convert_input(ids, weight, config, path, feature=pooled, serving=True)
        batch = to_ragged(converted.ids, converted.weights, feature=pooled)
        activation = lookup.pooled_lookup(table, batch, config.table.combiner, safe=feature.safe_lookup)
        outputs.append(activation.reshape(converted.output_shape + (config.table.dim,)))
    return pack_as(feature_config, outputs)


def _batch(ids: Any) -> int | None:
    """The number of examples of a ragged input (what `check_serving_input` compares an output shape with)."""
    return int(np.asarray(ids.row_splits).reshape(-1).shape[0]) - 1 if input_kind(ids) == "ragged" else None


def _check_serving_inputs(feature_config: Any, features: Any, weights: Any) -> None:
    flat_inputs = flatten_up_to(feature_config, features, "features")
    flat_weights = [None] * len(flat_inputs) if weights is None else flatten_up_to(feature_config, weights, "weights")
    for ids, weight, (path, config) in zip(flat_inputs, flat_weights, flatten_with_paths(feature_config)):
        check_serving_input(input_kind(ids), input_kind(weight), (type(ids), type(weight)), config, path, _batch(ids))


def table_of(tables: Mapping[Any, Any], config: v2_utils.TableConfig) -> Any:
    """The table of `config` in `tables` (keyed by TableConfig, or by table name), checked to be
    `[vocabulary_size, dim]`; returned as it is (an array, or a TensorFlow variable under the bridge)."""
    if config in tables:
        value = tables[config]
    elif config.name is not None and config.name in tables:
        value = tables[config.name]
    else:
        raise ValueError(
            f"Argument `tables` has no table for {config.name or 'an unnamed TableConfig'!r}; it must be "
            "keyed by the TableConfig objects of `feature_config` (e.g. embedding.embedding_tables)."
        )
    shape = tuple(getattr(value, "shape", None) or np.shape(value))
    if shape != (config.vocabulary_size, config.dim):
        raise ValueError(
            f"Table {config.name!r} has shape {list(shape)}; its TableConfig says "
            f"[{config.vocabulary_size}, {config.dim}]."
        )
    return value
