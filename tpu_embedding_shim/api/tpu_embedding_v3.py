"""`tf.tpu.experimental.embedding.TPUEmbeddingV2` (the SparseCore mid-level API) on a CPU.

A lookup returns the activations and "preserved outputs"; the update takes
the gradients and those preserved outputs back:

    activations, preserved = embedding(features)  # embedding_lookup(...)
    ... dense model, d loss / d activations ...
    embedding.apply_gradients(gradients, preserved)

On a TPU the preserved outputs are, per table, the partitioned CSR form of
the batch (`PartitionedCsrFormatTensor`) that the SparseCore update kernel
reads. Here they hold the same CSR form for inspection (one partition; ids
sorted; the gain of each entry is its weight times the combiner's scale)
and the engine's record of the lookup, which is what the update uses.

Tables are stored as the SparseCores store them: split `mod` over four
shards per replica (TensorFlow's `4 * num_replicas_in_sync`: four SparseCores
on each emulated chip; `embedding_table_shards`). The numbers do not depend
on it. Under `mpiexec -n N` each process is one replica and one chip: it
holds four of the 4N shards, takes per-replica batches, and `build`,
`enqueue`, `dequeue`, `embedding_lookup`, `apply_gradients` and the table
properties are collective: every replica calls them, in the same order
(docs/distributed.md). TensorFlow's table stacking and per-table
shard rotation are layout only and are not emulated.

>>> import numpy as np
>>> import tpu_embedding_shim as tf
>>> table = tf.tpu.experimental.embedding.TableConfig(
...     vocabulary_size=8, dim=2, combiner="sum", name="t",
...     initializer=tf.tpu.experimental.embedding.RowIdInitializer())
>>> with tf.distribute.TPUStrategy().scope():      # as in TensorFlow: outside one, RuntimeError
...     embedding = TPUEmbeddingV2(
...         feature_config=tf.tpu.experimental.embedding.FeatureConfig(table=table),
...         optimizer=tf.tpu.experimental.embedding.SGD(learning_rate=0.5))
>>> activations, preserved = embedding(tf.ragged.constant([[1, 2], [5]]))
>>> activations.tolist()
[[3.0, 3.0], [5.0, 5.0]]
>>> preserved["t"].sorted_token_ids.tolist(), preserved["t"].sorted_sample_ids.tolist()
([1, 2, 5], [0, 0, 1])
>>> embedding.apply_gradients(np.ones((2, 2), np.float32), preserved)
>>> embedding.embedding_tables[table][[1, 2, 5], 0].tolist()
[0.5, 1.5, 4.5]
>>> [shard[:, 0].tolist() for shard in embedding.embedding_table_shards[table]]
[[0.0, 4.0], [0.5, 4.5], [1.5, 6.0], [3.0, 7.0]]
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
import math
import warnings
from typing import Any

import numpy as np

from ..engine import LookupResult, Ragged, check_batch, pooled_coefficients, split_table, to_ragged
from ..spec.checks import check_bool, check_int
from . import distribute
from . import sparse_core_limits as limits
from . import tpu_embedding_v2_utils as v2_utils
from .midlevel_base import MidLevelBase
from .midlevel_inputs import ConvertedInput
from .nest import flatten_up_to, flatten_with_paths, pack_as

__all__ = ["TPUEmbeddingV2", "PartitionedCsrFormatTensor", "SparseCoreEmbeddingConfig"]

SPARSE_CORES_PER_CHIP = 4

PartitionedCsrFormatTensor = collections.namedtuple(
    "PartitionedCsrFormatTensor",
    [
        "row_pointers",
        "sorted_sample_ids",
        "sorted_token_ids",
        "sorted_gains",
        "sample_count",
        "num_minibatches_per_physical_sparse_core",
    ],
)
PartitionedCsrFormatTensor.__doc__ = """One table's batch in CSR form, as the SparseCore update reads it.

Fields (one partition here): `row_pointers` [0, N]; per entry, sorted by
token id then sample id: `sorted_sample_ids` (the output sample: the
feature's offset in the table plus the example, or example * L + position
for a sequence feature), `sorted_token_ids` (the table row), `sorted_gains`
(weight times the combiner scale: 1 for sum, 1 / sum w for mean, 1 / sqrt(sum
w^2) for sqrtn); `sample_count` (prod(output_shape) summed over the features of the table);
`num_minibatches_per_physical_sparse_core` (1).
"""


def _check_limit_table(name: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise TypeError(
            f"Argument `{name}` of SparseCoreEmbeddingConfig must be None or a dict {{table name: int >= 1}}. "
            f"Received: {value!r}."
        )
    for table, limit in value.items():
        check_int(f"{name}[{table!r}]", limit, minimum=1, owner="SparseCoreEmbeddingConfig")


@dataclasses.dataclass(frozen=True)
class SparseCoreEmbeddingConfig:
    """`tf.tpu.experimental.embedding.SparseCoreEmbeddingConfig` (TensorFlow 2.21's fields and defaults).

    Attributes:
      disable_table_stacking: every table its own stack. Stacking changes no
        number, but it decides which tables share the limits below (keyed by
        stacked table name, e.g. "a_b") and how their ids spread over the
        partitions (`sparse_core_limits.stack_tables`).
      max_ids_per_chip_per_sample: the chip's id buffer per table is this
        times the table's samples per replica (padding included; see
        docs/sparsecore.md).
      max_ids_per_table: `{stacked table name: limit}` on the (sample, id)
        pairs one SparseCore sends to one partition; a stack not named gets
        256.
      max_unique_ids_per_table: the same for distinct ids (default 256).
      allow_id_dropping: what no room in the buffer does: drop the ids that
        do not fit (True) or raise (False). It does not apply to the two
        per-partition limits, which always raise.
      initialize_tables_on_host, enable_fast_table_initialization: where
        TensorFlow runs the initializers; the same numbers here.

    TensorFlow checks none of the fields; here a bool must be a bool
    (TypeError) and a limit an int >= 1 (ValueError), when built.
    """

    disable_table_stacking: bool = False
    max_ids_per_chip_per_sample: int = 64
    max_ids_per_table: dict[str, int] | None = None
    max_unique_ids_per_table: dict[str, int] | None = None
    allow_id_dropping: bool = False
    initialize_tables_on_host: bool = True
    enable_fast_table_initialization: bool = False

    def __post_init__(self):
        owner = "SparseCoreEmbeddingConfig"
        for name in (
            "disable_table_stacking",
            "allow_id_dropping",
            "initialize_tables_on_host",
            "enable_fast_table_initialization",
        ):
            check_bool(name, getattr(self, name), owner=owner)
        check_int("max_ids_per_chip_per_sample", self.max_ids_per_chip_per_sample, minimum=1, owner=owner)
        _check_limit_table("max_ids_per_table", self.max_ids_per_table)
        _check_limit_table("max_unique_ids_per_table", self.max_unique_ids_per_table)


@dataclasses.dataclass(frozen=True)
class PreprocessedFeatures:
    """What `enqueue` / `preprocess_features` return and `dequeue` takes: a checked batch."""

    converted: tuple[ConvertedInput, ...]
    owner_id: int
    scales: tuple[np.ndarray | None, ...] = ()


class PreservedOutputs(dict):
    """`{table name: PartitionedCsrFormatTensor}`, plus the engine's record of the lookup.

    Pass it, unchanged, to `apply_gradients` of the object that returned it.
    """

    def __init__(
        self,
        tables: dict[str, PartitionedCsrFormatTensor],
        lookup: LookupResult,
        converted: tuple[ConvertedInput, ...],
        owner_id: int,
        scales: tuple[np.ndarray | None, ...] = (),
    ):
        super().__init__(tables)
        self.lookup = lookup
        self.converted = converted
        self.owner_id = owner_id
        self.scales = scales


def _tables_of(feature_config: Any) -> list[v2_utils.TableConfig]:
    """The distinct `TableConfig`s of a `FeatureConfig` nest (anything else is left to the base class to refuse)."""
    tables: list[v2_utils.TableConfig] = []
    for _, config in flatten_with_paths(feature_config):
        table = getattr(config, "table", None) if isinstance(config, v2_utils.FeatureConfig) else None
        if isinstance(table, v2_utils.TableConfig) and not any(table is t for t in tables):
            tables.append(table)
    return tables


def _clone_feature_config(feature_config: Any) -> Any:
    """TensorFlow's `_clone_feature_config`: the nest with copies of its features and tables (one copy per table)."""
    copies: dict[int, v2_utils.TableConfig] = {}
    features = []
    for _, feature in flatten_with_paths(feature_config):
        feature = copy.copy(feature)
        feature.table = copies.setdefault(id(feature.table), copy.copy(feature.table))
        features.append(feature)
    return pack_as(feature_config, features)


def _refuse_what_sparse_core_cannot_run(feature_config: Any, optimizer: Any) -> None:
    """TensorFlow 2.21 accepts these configurations but cannot run them on its SparseCore path; refused at once.

    Raises:
      ValueError: a `CustomOptimizer` (TensorFlow's `apply_gradients` raises
        "Unsupported optimizer in minibatching mode.").
      TypeError: a `CustomCombiner` (TensorFlow's preprocessing takes the
        combiner as a string attribute and raises at `enqueue`).
      NotImplementedError: a table with `dtype=int32` (TensorFlow creates
        every SparseCore table as float32).
    """
    optimizers = [("the `optimizer` argument", optimizer)]
    for table in _tables_of(feature_config):
        optimizers.append((f"table {table.name!r}", table.optimizer))
        if isinstance(table.combiner, v2_utils.CustomCombiner):
            raise TypeError(
                f"Expected string for argument 'combiner' not {table.combiner!r}. Table {table.name!r} has a "
                "CustomCombiner: TensorFlow 2.21's SparseCore preprocessing (ConvertToListOfSparseCoreCooTensors) "
                "takes the combiner as a string, so TPUEmbeddingV2 cannot run it; use 'sum', 'mean' or 'sqrtn'."
            )
        if table.dtype != np.float32:
            raise NotImplementedError(
                f"Table {table.name!r} has dtype={table.dtype}: TensorFlow 2.21's TPUEmbeddingV2 creates every table "
                "variable as float32 and the CPU engine stores float32 rows; use dtype=tf.float32."
            )
    for where, table_optimizer in optimizers:
        if isinstance(table_optimizer, v2_utils.CustomOptimizer):
            raise ValueError(
                f"Unsupported optimizer in minibatching mode. ({where} is a CustomOptimizer: TensorFlow 2.21's "
                "TPUEmbeddingV2 accepts it when built and raises this at apply_gradients, as it has no update "
                "for it; use SGD, Adagrad, AdagradMomentum, Adam or FTRL.)"
            )


@dataclasses.dataclass(frozen=True)
class _RaggedView:
    """A RaggedTensor-like pair (`values`, `row_splits`) for `check_batch`."""

    values: np.ndarray
    row_splits: np.ndarray


def _without(batch: Ragged, samples: np.ndarray, keep: np.ndarray) -> Ragged:
    """`batch` without the entries where `keep` is False (every sample stays, possibly empty)."""
    lengths = np.bincount(samples[keep], minlength=batch.batch_size)
    return Ragged(
        values=batch.values[keep],
        row_splits=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        weights=None if batch.weights is None else batch.weights[keep],
        positions=None if batch.positions is None else batch.positions[keep],
    )


def _denominator(batch: Ragged, combiner: str, safe: bool) -> np.ndarray:
    """Per sample, the combiner's denominator as the engine computes it (`pooled_coefficients`): `mean` sum w,
    `sqrtn` sqrt(sum w^2), non-positive weights left out by a safe lookup."""
    w = batch.weights_or_ones().astype(np.float64)
    example = batch.row_ids()
    if safe:
        example, w = example[w > 0], w[w > 0]
    if combiner == "mean":
        return np.bincount(example, weights=w, minlength=batch.batch_size)
    return np.sqrt(np.bincount(example, weights=w * w, minlength=batch.batch_size))


def _scale(full: Ragged, kept: Ragged, combiner: str, safe: bool) -> np.ndarray:
    """Per sample, the engine's denominator of `kept` over that of `full` (1 where either is 0)."""
    a, b = _denominator(kept, combiner, safe), _denominator(full, combiner, safe)
    ratio = np.ones(full.batch_size)
    ok = (a != 0) & (b != 0)
    ratio[ok] = a[ok] / b[ok]
    return ratio


class TPUEmbeddingV2(MidLevelBase):
    """The SparseCore mid-level API, running on the CPU engine.

    Args:
      feature_config: a nest (dict, list, tuple) of `FeatureConfig`.
      optimizer: `SGD`, `Adagrad`, `AdagradMomentum`, `Adam` or `FTRL`, the
        optimizer of every table without its own (None only if every table
        has its own).
      pipeline_execution_with_tensor_core: one-step-stale lookups, as on a TPU.
      sparse_core_embedding_config: SparseCore's limits, applied at
        `enqueue` as TensorFlow 2.21 applies them (docs/sparsecore.md).

    Raises:
      ValueError: an optimizer that is not one of the classes above (or None
        under a TPUStrategy); two tables with one name.
      RuntimeError: created outside a `tf.distribute.TPUStrategy` scope (here
        the in-process stand-in), as in TensorFlow.
      NotImplementedError: a table optimizer with `weight_decay_factor` or
        `multiply_weight_decay_factor_by_learning_rate` set (not None), as in
        TensorFlow's SparseCore code.

    The checks run in TensorFlow's order (configuration, strategy, weight
    decay); a failed construction leaves the `TableConfig`s as they were
    (TensorFlow works on a copy of them).
    """

    tensorflow_class_name = "TPUEmbeddingV2"

    def __init__(
        self,
        feature_config: Any,
        optimizer: Any = None,
        pipeline_execution_with_tensor_core: bool = False,
        sparse_core_embedding_config: SparseCoreEmbeddingConfig | None = None,
    ):
        _refuse_what_sparse_core_cannot_run(feature_config, optimizer)
        if sparse_core_embedding_config is not None and not isinstance(
            sparse_core_embedding_config, SparseCoreEmbeddingConfig
        ):
            raise TypeError(
                "Argument `sparse_core_embedding_config` of TPUEmbeddingV2 must be None or a "
                f"tf.tpu.experimental.embedding.SparseCoreEmbeddingConfig. Received: {sparse_core_embedding_config!r}."
            )
        saved = [(table, table.name, table.optimizer) for table in _tables_of(feature_config)]
        try:
            super().__init__(
                feature_config,
                optimizer,
                pipeline_execution_with_tensor_core,
                num_shards=SPARSE_CORES_PER_CHIP * distribute.get_strategy().num_replicas_in_sync,
                partition_strategy="mod",
            )
            self._check_strategy_and_weight_decay()
        except Exception:
            for table, name, table_optimizer in saved:  # naming and optimizer defaulting are undone
                table.name, table.optimizer = name, table_optimizer
            raise
        self._sparse_core_embedding_config = sparse_core_embedding_config or SparseCoreEmbeddingConfig()
        self._last_statistics: dict[str, limits.TableStatistics] = {}
        self._dropped_ids: list[dict[str, int]] = []
        self._warn_about_unstacked_limit_keys()

    def _warn_about_unstacked_limit_keys(self) -> None:
        """TensorFlow keys the limits by stacked table name and silently uses 256 for a stack not named: a key
        naming a table that is stacked with others is almost surely a mistake, so say so."""
        stacks = {t: s for s in self._stacks(self._replicas) for t in s.tables}
        config = self._sparse_core_embedding_config
        for field in ("max_ids_per_table", "max_unique_ids_per_table"):
            for key in getattr(config, field) or {}:
                if key in stacks and stacks[key].name != key:
                    warnings.warn(
                        f"SparseCoreEmbeddingConfig.{field} names table {key!r}, which TensorFlow stacks into "
                        f"{stacks[key].name!r}: the limits are keyed by stacked table name, so {stacks[key].name!r} "
                        "gets the default 256 (as on a TPU). Key it by the stacked name, or set "
                        "disable_table_stacking=True.",
                        stacklevel=3,
                    )

    def _check_strategy_and_weight_decay(self) -> None:
        if not self._using_tpu:
            raise RuntimeError(
                f"TPUEmbeddingV2 should be created under TPUStrategy but found {self._strategy}. Create it in the "
                "scope of the TPUStrategy stand-in (an in-process CPU emulation): strategy = "
                "tf.distribute.TPUStrategy(); with strategy.scope(): embedding = "
                "tf.tpu.experimental.embedding.TPUEmbeddingV2(...)."
            )
        for table in self._table_config:
            decay = table.optimizer.weight_decay_factor
            by_rate = table.optimizer.multiply_weight_decay_factor_by_learning_rate
            if decay is not None or by_rate is not None:
                raise NotImplementedError(
                    "weight_decay_factor and multiply_weight_decay_factor_by_learning_rate are not supported yet. "
                    f"But found in table {table.name} setting: {type(table.optimizer).__name__}(weight_decay_factor="
                    f"{decay!r}, multiply_weight_decay_factor_by_learning_rate={by_rate!r}). TensorFlow's "
                    "SparseCore TPUEmbeddingV2 has no weight decay: leave both None, or use TPUEmbedding, "
                    "which applies it."
                )

    def build(self) -> None:
        """Creates the tables and slot variables (`embedding_lookup` calls it). A second call does nothing."""
        self._build_engine()
        self._built = True

    @property
    def embedding_table_shards(self) -> dict[v2_utils.TableConfig, list[np.ndarray]]:
        """`{TableConfig: [shard arrays]}`: row r on shard r % S, S = 4 * num_replicas_in_sync (copies; under
        mpiexec every shard on every replica, a collective gather)."""
        self.build()
        spec = self._engine_spec
        return {
            table: split_table(self._engine.table(table.name), spec.num_shards, spec.partition_strategy)
            for table in self._table_config
        }

    @property
    def embedding_tables(self) -> dict[v2_utils.TableConfig, np.ndarray]:
        """`{TableConfig: full table [vocabulary_size, dim]}` in id order (copies; under mpiexec on every
        replica, a collective gather)."""
        self.build()
        return super().embedding_tables

    @property
    def variables(self) -> dict[v2_utils.TableConfig, dict[str, np.ndarray]]:
        """`{TableConfig: {'parameters': table, <slot name>: slot}}` (copies)."""
        self.build()
        return super().variables

    def preprocess_features(self, features: Any = None, weights: Any = None, **kwargs: Any) -> PreprocessedFeatures:
        """Checks and converts one batch on the host (TensorFlow's `flat_inputs=` / `flat_weights=` also work).

        Collective when replicated (a bad input on one replica raises on every one)."""
        return self._preprocessed("preprocess_features", features, weights, None, kwargs)

    def _converted(self, features: Any, weights: Any, device: Any, kwargs: dict[str, Any]) -> list[ConvertedInput]:
        """The checks and conversion of `enqueue` / `preprocess_features` (local: no collective)."""
        if device is not None and "TPU" not in str(device).upper():
            raise ValueError(f"Non-TPU device {device} passed to enqueue.")
        if features is None and "flat_inputs" in kwargs:
            flat_inputs = list(kwargs["flat_inputs"])
            flat_weights = kwargs.get("flat_weights")
            features = pack_as(self._feature_config, flat_inputs)
            weights = None if flat_weights is None else pack_as(self._feature_config, list(flat_weights))
        return self._convert(features, weights)

    def enqueue(self, features: Any, weights: Any = None, device: str | None = None) -> PreprocessedFeatures:
        """Preprocesses the features on the host: checks them and returns the batch for `dequeue`.

        Raises:
          ValueError: a non-TPU `device`; a structure that differs in nesting,
            length or keys; an input of an unknown type or rank; weights of
            another type than their ids, or for a dense input; a batch over
            a SparseCore limit of `sparse_core_embedding_config`
            (TensorFlow's `InvalidArgumentError`, docs/sparsecore.md).
          TypeError: a sequence type that differs from `feature_config`'s.
        """
        return self._preprocessed("enqueue", features, weights, device, {})

    def _preprocessed(
        self, call: str, features: Any, weights: Any, device: Any, kwargs: dict[str, Any]
    ) -> PreprocessedFeatures:
        """The checks, conversion and SparseCore limits of one batch (agreed by every replica), then recorded."""
        converted, scales, statistics = self._agreed(call, self._within_limits, features, weights, device, kwargs)
        self._check_output_shapes(converted)
        self._last_statistics = statistics
        self._dropped_ids.append({name: stats.dropped for name, stats in statistics.items()})
        return PreprocessedFeatures(tuple(converted), id(self), scales)

    def dequeue(self, partitioned_tensors: PreprocessedFeatures) -> tuple[Any, PreservedOutputs]:
        """Looks a preprocessed batch up: `(activations, preserved_outputs)`.

        Raises:
          ValueError: `partitioned_tensors` did not come from this object's
            `enqueue` or `preprocess_features`.
        """
        if not isinstance(partitioned_tensors, PreprocessedFeatures) or partitioned_tensors.owner_id != id(self):
            raise ValueError(
                "Expect the output of this object's enqueue() or preprocess_features() but got "
                f"{type(partitioned_tensors)}."
            )
        self.build()
        converted = list(partitioned_tensors.converted)
        result, activations = self._lookup(converted, training=True)
        scales = partitioned_tensors.scales or (None,) * len(converted)
        activations = [
            a if k is None else a * k.reshape(a.shape[:-1] + (1,)).astype(a.dtype) for a, k in zip(activations, scales)
        ]
        preserved = PreservedOutputs(
            self._csr(result, converted, scales), result, partitioned_tensors.converted, id(self), scales
        )
        return pack_as(self._feature_config, activations), preserved

    def embedding_lookup(self, features: Any, weights: Any = None) -> tuple[Any, PreservedOutputs]:
        """Looks one batch up: `(activations, preserved_outputs)`.

        `activations` has the structure of `feature_config`: float32
        `output_shape + [dim]` per feature (`[B, dim]`, `[B, max_sequence_length,
        dim]` for a sequence feature, `[B, T, dim]` for a `[B, T, N]` sparse
        input...; see `docs/mid_level_api.md`). Builds the object first if
        needed.

        Raises:
          ValueError: an input that is not a dense array, `SparseTensor` or
            `RaggedTensor` (or has a bad rank, or weights of another type); a
            structure that differs in nesting, length or keys; an output
            shape that differs from the configured or first batch's one.
          TypeError: a sequence type that differs from `feature_config`'s.
        """
        self.build()
        return self.dequeue(self.enqueue(features, weights))

    def __call__(self, features: Any, weights: Any = None) -> tuple[Any, PreservedOutputs]:
        """`embedding_lookup(features, weights)`."""
        return self.embedding_lookup(features, weights)

    def apply_gradients(self, gradients: Any, preserved_outputs: PreservedOutputs) -> None:
        """Applies d loss / d activations of one lookup: one update per touched row.

        A `None` gradient is a zero gradient, with a warning (an update for
        Adam and momentum-like optimizers). Callable learning rates are
        evaluated once per call.

        Raises:
          RuntimeError: not built; the lookup was already applied or is older
            than the last update.
          ValueError: a gradient that is not an array or has the wrong shape;
            a structure that differs in nesting, length or keys;
            `preserved_outputs` not from this object's lookup. (Every table
            has an optimizer: construction refuses None, so TensorFlow's
            "Unsupported optimizer in minibatching mode" cannot happen.)
          TypeError: a sequence type that differs from `feature_config`'s.
        """
        self._apply(*self._agreed("apply_gradients", self._checked_update, gradients, preserved_outputs))

    def _checked_update(self, gradients: Any, preserved_outputs: Any) -> tuple[LookupResult, dict[str, np.ndarray]]:
        """`apply_gradients`' checks of its arguments and the engine's gradients (local: no collective)."""
        if not self._built:
            raise RuntimeError(
                "apply_gradients called on unbuilt TPUEmbeddingV2 object. Please either call the "
                "embedding lookup method first or manually call the build method."
            )
        flatten_up_to(self._feature_config, gradients, "gradients")
        if not isinstance(preserved_outputs, PreservedOutputs) or preserved_outputs.owner_id != id(self):
            raise ValueError(
                "Argument `preserved_outputs` must be the second output of this object's "
                f"embedding_lookup() or dequeue(). Received: {type(preserved_outputs)}."
            )
        lookup = preserved_outputs.lookup
        if lookup.step != self._engine.global_step:
            raise RuntimeError(
                f"This lookup was made at step {lookup.step} but the engine is at step "
                f"{self._engine.global_step}: apply each lookup's gradients once, in order."
            )
        engine_gradients = self._engine_gradients(gradients, list(preserved_outputs.converted))
        for feature, scale in zip(self._features, preserved_outputs.scales):
            if scale is not None:  # a dropped id's gain is gone, the kept ones keep the whole sample's scale
                name = feature.spec.name
                engine_gradients[name] = (engine_gradients[name] * scale[:, None]).astype(np.float32)
        return lookup, engine_gradients

    # SparseCore's limits ------------------------------------------------------------------------

    def _stacking_input(self) -> list[tuple[str, int, int, str, int]]:
        """What TensorFlow's stacker is given per table: name, rows, dim, group, activation rows a step."""
        samples: dict[str, int] = {}
        for feature in self._features:
            shape = feature.output_shape
            samples[feature.spec.table] = samples.get(feature.spec.table, 0) + (math.prod(shape) if shape else 0)
        return [
            (str(t.name), t.vocabulary_size, t.dim, _stacking_group(t), samples.get(str(t.name), 0))
            for t in self._table_config
        ]

    def _stacks(self, replicas: int) -> list[limits.Stack]:
        """TensorFlow 2.21's table stacks (by padded width, optimizer and quantization; see `stack_tables`)."""
        disabled = self._sparse_core_embedding_config.disable_table_stacking
        return limits.stack_tables(self._stacking_input(), num_replicas=replicas, disabled=disabled)

    @property
    def embedding_layouts(self) -> dict[str, Any]:
        """TensorFlow 2.21's: table name -> how SparseCore lays the table out in its stacked table (a
        `TableLayout` with the fields of TensorFlow's `SparseCoreTableLayout`: stacked table, padded shape, row
        offset and rotation in each shard; `engine/sparsecore_layout.py`). Layout only: the numbers do not
        depend on it. Known once every feature's output shape is (after `build` or the first batch)."""
        disabled = self._sparse_core_embedding_config.disable_table_stacking
        layouts = limits.stack_layouts(self._stacking_input(), num_replicas=self._replicas, disabled=disabled)
        return {layout.table_name: layout for layout in layouts}

    def _table_statistics(
        self, converted: list[ConvertedInput], replicas: int | None = None
    ) -> dict[str, limits.TableStatistics]:
        """Per stacked table, this replica's batch on its chip's SparseCores (`sparse_core_limits`)."""
        replicas = replicas or self._replicas
        stacks = self._stacks(replicas)
        place = {table: (stack.name, k, stack.rotations[k]) for stack in stacks for k, table in enumerate(stack.tables)}
        entries: dict[str, list[limits.FeatureEntries]] = {stack.name: [] for stack in stacks}
        for feature, c in zip(self._features, converted):
            batch = c.checked.batch if c.checked is not None else to_ragged(c.ids, None, feature=feature.spec)
            stack, position, rotation = place[feature.spec.table]
            entries[stack].append((batch.row_ids(), batch.values, batch.batch_size, position, rotation))
        config = self._sparse_core_embedding_config
        return {
            name: limits.table_statistics(
                name,
                features,
                num_replicas=replicas,
                max_ids_per_chip_per_sample=config.max_ids_per_chip_per_sample,
            )
            for name, features in entries.items()
        }

    def _within_limits(
        self, features: Any, weights: Any, device: Any, kwargs: dict[str, Any]
    ) -> tuple[list[ConvertedInput], tuple[np.ndarray | None, ...], dict[str, limits.TableStatistics]]:
        """One batch checked and converted, with TensorFlow 2.21's SparseCore limits: TensorFlow's errors raised,
        the ids that do not fit dropped (with `allow_id_dropping`), and the statistics (local: no collective)."""
        converted = self._converted(features, weights, device, kwargs)
        config = self._sparse_core_embedding_config
        statistics = self._table_statistics(converted)
        for name, stats in statistics.items():
            limits.check_limits(
                stats,
                max_ids=(config.max_ids_per_table or {}).get(name, limits.DEFAULT_MAX_IDS_PER_TABLE),
                max_unique_ids=(config.max_unique_ids_per_table or {}).get(
                    name, limits.DEFAULT_MAX_UNIQUE_IDS_PER_TABLE
                ),
                allow_id_dropping=config.allow_id_dropping,
            )
        if not any(stats.dropped for stats in statistics.values()):
            return converted, (), statistics
        return (*self._drop(converted, statistics), statistics)

    def _drop(
        self, converted: list[ConvertedInput], statistics: dict[str, limits.TableStatistics]
    ) -> tuple[list[ConvertedInput], tuple[np.ndarray | None, ...]]:
        """The batch without the dropped (sample, id) entries, and per feature the samples' scales.

        TensorFlow drops an entry after the combiner's scale was computed from
        the whole sample, so a kept entry keeps its gain (`mean`: w / sum of
        every w in the sample). The engine computes the scale from what it is
        given; `scale[s]` (its denominator without / with the dropped entries)
        turns its answer into TensorFlow's, for activations and gradients.
        """
        replicas = self._replicas
        stack_of = {table: stack.name for stack in self._stacks(replicas) for table in stack.tables}
        index_in_stack: dict[str, int] = {}
        out: list[ConvertedInput] = []
        scales: list[np.ndarray | None] = []
        for feature, c in zip(self._features, converted):
            stack = stack_of[feature.spec.table]
            k = index_in_stack[stack] = index_in_stack.get(stack, -1) + 1
            gone = statistics[stack].dropped_entries
            gone = gone[gone[:, 0] == k]
            if gone.size == 0:
                out.append(c)
                scales.append(None)
                continue
            batch = c.checked.batch if c.checked is not None else to_ragged(c.ids, None, feature=feature.spec)
            samples = batch.row_ids()
            dropped = {(int(s), int(i)) for _, s, i in gone}
            keep = np.array([(int(s), int(i)) not in dropped for s, i in zip(samples, batch.values)], bool)
            kept = _without(batch, samples, keep)
            if c.checked is not None:
                view = _RaggedView(kept.values, kept.row_splits)
                weights = None if kept.weights is None else _RaggedView(kept.weights, kept.row_splits)
                c = dataclasses.replace(
                    c, ids=view, weights=weights, checked=check_batch(view, weights, feature=feature.spec)
                )
            else:
                c = dataclasses.replace(c, ids=kept)
            out.append(c)
            combiner = feature.config.table.combiner
            scales.append(
                None if c.positions or combiner == "sum" else _scale(batch, kept, combiner, feature.spec.safe_lookup)
            )
        return out, tuple(scales)

    @classmethod
    def compute_sparse_core_stats(
        cls,
        features: Any,
        feature_config: Any,
        num_tpu_chips: int,
        num_sc_per_chip: int = 4,
        optimizer: Any = None,
        sparse_core_embedding_config: SparseCoreEmbeddingConfig | None = None,
    ) -> tuple[dict[str, int], dict[str, int]]:
        """TensorFlow 2.21's sizing helper: `({table: max ids per partition}, {table: max unique ids})` of one
        replica's batch `features` on `num_tpu_chips` chips: the smallest `max_ids_per_table` and
        `max_unique_ids_per_table` that batch fits, keyed by stacked table name (TensorFlow returns tensors, here
        ints). `feature_config` is not changed.

        Raises:
          ValueError: `num_tpu_chips` not an int >= 1; `num_sc_per_chip` not 4 (the SparseCores of the chips
            TensorFlow 2.21 targets, and the only count emulated); a batch the feature config refuses.
        """
        check_int("num_tpu_chips", num_tpu_chips, minimum=1, owner="compute_sparse_core_stats")
        if num_sc_per_chip != limits.SPARSE_CORES_PER_CHIP:
            raise ValueError(
                "Argument `num_sc_per_chip` of compute_sparse_core_stats must be 4 (the emulated chips' "
                f"SparseCores). Received: {num_sc_per_chip!r}."
            )
        clone = _clone_feature_config(feature_config)
        for table in _tables_of(clone):
            table.optimizer = table.optimizer or optimizer or v2_utils.SGD()
        with distribute.TPUStrategy().scope():
            probe = cls(clone, optimizer, sparse_core_embedding_config=sparse_core_embedding_config)
        converted = probe._converted(features, None, None, {})
        probe._check_output_shapes(converted)
        statistics = probe._table_statistics(converted, replicas=num_tpu_chips)
        return (
            {name: stats.max_ids for name, stats in statistics.items()},
            {name: stats.max_unique_ids for name, stats in statistics.items()},
        )

    @property
    def sparse_core_statistics(self) -> dict[str, limits.TableStatistics]:
        """`{table name: TableStatistics}` of the last batch enqueued: per SparseCore and partition, the ids and
        unique ids, the buffer, what was dropped (not a TensorFlow attribute; TensorFlow logs the drops)."""
        return dict(self._last_statistics)

    @property
    def dropped_ids(self) -> list[dict[str, int]]:
        """Per batch enqueued, in order, `{table name: ids dropped}` (not a TensorFlow attribute)."""
        return [dict(step) for step in self._dropped_ids]

    # The CSR form of a lookup --------------------------------------------------------------------

    def _csr(
        self, result: LookupResult, converted: list[ConvertedInput], scales: tuple[np.ndarray | None, ...] = ()
    ) -> dict[str, PartitionedCsrFormatTensor]:
        samples: dict[str, list[np.ndarray]] = {t.name: [] for t in self._table_config}
        tokens: dict[str, list[np.ndarray]] = {t.name: [] for t in self._table_config}
        gains: dict[str, list[np.ndarray]] = {t.name: [] for t in self._table_config}
        counts = {t.name: 0 for t in self._table_config}
        for index, feature in enumerate(self._features):
            spec, config = feature.spec, feature.config
            # The engine's samples are TensorFlow's: prod(output_shape) per feature, row-major (a sequence or
            # per-position input: example * k + position, one id each, gain 1).
            batch = result.batches[spec.name]
            sample, ids, gain, _ = pooled_coefficients(batch, config.table.combiner, safe=spec.safe_lookup)
            scale = scales[index] if scales else None
            if scale is not None:  # the dropped entries' gains are gone, the kept keep theirs
                gain = gain * scale[sample]
            samples[spec.table].append(sample + counts[spec.table])
            tokens[spec.table].append(ids)
            gains[spec.table].append(gain)
            counts[spec.table] += batch.batch_size
        out = {}
        for table in self._table_config:
            name = table.name
            sample = np.concatenate(samples[name]).astype(np.int32)
            token = np.concatenate(tokens[name]).astype(np.int32)
            gain = np.concatenate(gains[name]).astype(np.float32)
            order = np.lexsort((sample, token))
            out[name] = PartitionedCsrFormatTensor(
                row_pointers=np.array([0, order.size], np.int32),
                sorted_sample_ids=sample[order],
                sorted_token_ids=token[order],
                sorted_gains=gain[order],
                sample_count=counts[name],
                num_minibatches_per_physical_sparse_core=1,
            )
        return out


def _stacking_group(table: Any) -> str:
    """The key of the tables that may share a stack: TensorFlow's, a SHA-1 of (the optimizer's hash, the
    quantization config's repr)."""
    key = (hash(table.optimizer), repr(table.quantization_config))
    return hashlib.sha1(repr(key).encode(), usedforsecurity=False).hexdigest()
