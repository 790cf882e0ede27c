"""CPU serving lookups: `TPUEmbeddingForServing` and `serving_embedding_lookup`.

Both give exactly the training path's lookups (`TPUEmbedding.dequeue`): the
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

TensorFlow's serving-only checks are kept: weights for a sequence feature
and a dense input for a sequence feature are `ValueError`s.

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

from ..engine import lookup, to_ragged
from . import lowering
from . import tpu_embedding_v2_utils as v2_utils
from .midlevel_base import MidLevelBase, under_tpu_strategy
from .midlevel_inputs import convert_input
from .nest import flatten_up_to, flatten_with_paths, pack_as

__all__ = ["TPUEmbeddingForServing", "serving_embedding_lookup"]


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

    _class_name = "TPUEmbeddingForServing"

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
    outputs = []
    for ids, weight, (path, config), feature in zip(flat_inputs, flat_weights, flat_configs, spec.features):
        if not isinstance(config, v2_utils.FeatureConfig):
            raise ValueError(f"Argument `feature_config` must be a nest of FeatureConfig. Received {config!r}.")
        table = _table(tables, config.table)
        pooled = dataclasses.replace(feature, max_sequence_length=0)  # as the mid-level classes' engine sees it
        converted = convert_input(ids, weight, config, path, feature=pooled, serving=True)
        batch = to_ragged(converted.ids, converted.weights, feature=pooled)
        activation = lookup.pooled_lookup(table, batch, config.table.combiner, safe=feature.safe_lookup)
        outputs.append(activation.reshape(converted.output_shape + (config.table.dim,)))
    return pack_as(feature_config, outputs)


def _table(tables: Mapping[Any, Any], config: v2_utils.TableConfig) -> np.ndarray:
    if config in tables:
        value = tables[config]
    elif config.name is not None and config.name in tables:
        value = tables[config.name]
    else:
        raise ValueError(
            f"Argument `tables` has no table for {config.name or 'an unnamed TableConfig'!r}; it must be "
            "keyed by the TableConfig objects of `feature_config` (e.g. embedding.embedding_tables)."
        )
    array = np.asarray(value, dtype=np.float32)
    if array.shape != (config.vocabulary_size, config.dim):
        raise ValueError(
            f"Table {config.name!r} has shape {list(array.shape)}; its TableConfig says "
            f"[{config.vocabulary_size}, {config.dim}]."
        )
    return array
