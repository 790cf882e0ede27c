"""The one place TensorFlow-shaped objects become specs.

TPU embedding columns, v1 config dicts and v2 `FeatureConfig` nests become
an `EmbeddingSpec`; the optimizer objects in them become `OptimizerSpec`s
through `optimizer_lowering.py` (re-exported here). Nothing else in
`api/` builds specs or knows the engine.

Naming follows TensorFlow: a column's table is `'tbl_' +
column.get_embedding_var_name()`, its feature is
`column.get_feature_key_name()`.

An `EmbeddingConfigSpec` configures TPUEstimator, whose TPU input path keeps
only the non-zero entries of a dense integer input: its features get
`dense_zero_is_padding=True` (id 0 of a dense input is padding, with a
warning), as on a TPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..spec import EmbeddingSpec, FeatureSpec, OptimizerSpec, QuantizationSpec, TableSpec
from ..spec.initializers import Constant
from . import initializers
from . import tpu_embedding_v2_utils as v2
from .feature_columns import (
    CategoricalColumn,
    IdentityCategoricalColumn,
    NumericColumn,
    SequenceCategoricalColumn,
    VocabularyFileCategoricalColumn,
    VocabularyListCategoricalColumn,
    WeightedCategoricalColumn,
)
from .nest import flatten_with_paths, path_string
from .optimizer_lowering import LearningRateMemo, ZeroArgumentLearningRate, build, optimizer_spec  # noqa: F401
from .tpu_feature_columns import TPU_EMBEDDING_COLUMN_CLASSES


def with_learning_rate(optimizer: OptimizerSpec | None, learning_rate: Any) -> OptimizerSpec | None:
    """`optimizer` with its learning rate replaced (None stays None)."""
    if optimizer is None or learning_rate is None:
        return optimizer
    return dataclasses.replace(optimizer, learning_rate=learning_rate)


def _table_spec(
    where: str,
    name: str,
    size: tuple[int, int],
    config: Any,
    optimizer: OptimizerSpec | None,
    quantization: QuantizationSpec | None = None,
) -> TableSpec:
    """The TableSpec `name` of `size` (vocabulary size, dim), with the initializer and combiner of `config`
    (a TPU embedding column, or a v1 or v2 `TableConfig`; v1's combiner None is 'sum', as on a TPU). A
    TensorFlow / Keras initializer object becomes this package's (`initializers.from_framework`)."""
    combiner = "sum" if config.combiner is None else config.combiner
    spec: TableSpec = build(
        TableSpec,
        where,
        name=name,
        vocabulary_size=size[0],
        dim=size[1],
        initializer=initializers.from_framework(config.initializer),
        combiner=combiner,
        optimizer=optimizer,
        quantization=quantization,
    )
    return spec


def _quantization_spec(where: str, config: Any) -> QuantizationSpec | None:
    """A v2 `TableConfig`'s `quantization_config` as a QuantizationSpec (None for none); errors name
    the config (float32 bounds that collapse or overflow are refused here, TensorFlow checks none)."""
    if config is None:
        return None
    spec: QuantizationSpec = build(
        QuantizationSpec,
        f"QuantizationConfig of {where}",
        num_buckets=config.num_buckets,
        lower=config.lower,
        upper=config.upper,
    )
    return spec


def _feature_spec(where: str, name: str, table: TableSpec, **fields: Any) -> FeatureSpec:
    """The FeatureSpec `name`, looked up in `table` (its ids are in [0, table.vocabulary_size))."""
    spec: FeatureSpec = build(
        FeatureSpec, where, name=name, table=table.name, num_buckets=table.vocabulary_size, **fields
    )
    return spec


# Feature columns ----------------------------------------------------------------


def _inner_column(column: CategoricalColumn) -> CategoricalColumn:
    while isinstance(column, (SequenceCategoricalColumn, WeightedCategoricalColumn)):
        column = column.categorical_column
    return column


def _id_mapping(column: CategoricalColumn) -> dict[str, Any]:
    """FeatureSpec fields describing how a categorical column's values become ids."""
    inner = _inner_column(column)
    if isinstance(inner, IdentityCategoricalColumn):
        return {"id_source": "identity", "default_value": inner.default_value}
    if isinstance(inner, VocabularyListCategoricalColumn):
        return {
            "id_source": "vocabulary_list",
            "vocabulary": tuple(inner.vocabulary_list),
            "default_value": inner.default_value,
            "num_oov_buckets": inner.num_oov_buckets,
        }
    if isinstance(inner, VocabularyFileCategoricalColumn):
        return {
            "id_source": "vocabulary_file",
            "vocabulary": tuple(inner.vocabulary),
            "vocabulary_file": inner.vocabulary_file,
            "default_value": -1 if inner.default_value is None else inner.default_value,
            "num_oov_buckets": inner.num_oov_buckets,
        }
    raise TypeError(f"Can't embed {type(inner).__name__} {inner.name!r} on a TPU embedding engine.")


def specs_from_feature_columns(
    feature_columns: list[Any], optimizer: OptimizerSpec | None, *, dense_zero_is_padding: bool = False
) -> tuple[tuple[TableSpec, ...], tuple[FeatureSpec, ...]]:
    """Tables and features of a list of TPU embedding columns (numeric columns are skipped).

    `dense_zero_is_padding`: the TPU embedding engine's input rule under
    TPUEstimator (see the module docstring); tensor-core columns keep TF's
    feature-column rule (only negative entries are padding).
    """
    tables: dict[str, TableSpec] = {}
    features: dict[str, FeatureSpec] = {}
    for column in feature_columns:
        if isinstance(column, NumericColumn):
            continue
        if not isinstance(column, TPU_EMBEDDING_COLUMN_CLASSES):
            raise TypeError(
                f"Unsupported feature column {column!r}: expected columns from "
                "tf.tpu.experimental.embedding_column or shared_embedding_columns."
            )
        key = column.get_feature_key_name()
        if key in features:
            raise ValueError(
                f"Feature {key!r} is embedded by more than one column ({column.name!r} and another). "
                "Each feature may be embedded once; to look two features up in one table use "
                "shared_embedding_columns."
            )
        where = f"embedding column {column.name!r}"
        table_name = "tbl_" + column.get_embedding_var_name()
        if table_name not in tables:
            own = with_learning_rate(optimizer, column.learning_rate_fn) if column.learning_rate_fn else None
            tables[table_name] = _table_spec(where, table_name, column.get_embedding_table_size(), column, own)
        features[key] = _feature_spec(
            where,
            key,
            tables[table_name],
            weight_key=column.get_weight_key_name(),
            max_sequence_length=column.get_max_sequence_length(),
            safe_lookup=column.use_safe_embedding_lookup,
            dense_zero_is_padding=dense_zero_is_padding,
            **_id_mapping(column.categorical_column),
        )
    return tuple(tables.values()), tuple(features.values())


def specs_from_config_dicts(
    table_to_config_dict: dict[str, Any], feature_to_config_dict: dict[str, Any], optimizer: OptimizerSpec | None
) -> tuple[tuple[TableSpec, ...], tuple[FeatureSpec, ...]]:
    """Tables and features of v1 `TableConfig` / `FeatureConfig` dicts (features are identity ids)."""
    tables = []
    for name, config in sorted(table_to_config_dict.items()):
        own = optimizer_spec(config.optimization_parameters) if config.optimization_parameters else optimizer
        learning_rate = config.learning_rate if config.learning_rate is not None else config.learning_rate_fn
        table_optimizer = with_learning_rate(own, learning_rate)
        table_optimizer = None if table_optimizer is optimizer else table_optimizer
        size = (config.vocabulary_size, config.dimension)
        tables.append(_table_spec(f"TableConfig {name!r}", name, size, config, table_optimizer))
    by_name = {table.name: table for table in tables}
    features = [
        _feature_spec(
            f"FeatureConfig {name!r}",
            name,
            by_name[config.table_id],
            weight_key=config.weight_key,
            max_sequence_length=config.max_sequence_length,
            dense_zero_is_padding=True,
        )
        for name, config in sorted(feature_to_config_dict.items())
    ]
    return tuple(tables), tuple(features)


def spec_from_embedding_config_spec(config: Any, num_shards: int = 1) -> EmbeddingSpec:
    """The `EmbeddingSpec` of an `EmbeddingConfigSpec`."""
    optimizer = optimizer_spec(config.optimization_parameters) if config.optimization_parameters else None
    if config.table_to_config_dict is None:
        tables, features = specs_from_feature_columns(
            list(config.feature_columns), optimizer, dense_zero_is_padding=True
        )
    else:
        tables, features = specs_from_config_dicts(
            config.table_to_config_dict, config.feature_to_config_dict, optimizer
        )
    return build(
        EmbeddingSpec,
        "EmbeddingConfigSpec",
        tables=tables,
        features=features,
        optimizer=optimizer,
        partition_strategy=config.partition_strategy,
        num_shards=num_shards,
        pipeline_execution_with_tensor_core=config.pipeline_execution_with_tensor_core,
        gradient_multiplier_fn=config.experimental_gradient_multiplier_fn,
        clipping_limit=config.clipping_limit,
        profile_data_directory=config.profile_data_directory,
    )


# v2 FeatureConfig nests -------------------------------------------------------------


def feature_name(path: tuple[Any, ...], config: Any) -> str:
    """A v2 feature's name: its `name`, else its path in the nest ('a/0')."""
    return config.name or path_string(path) or "feature"


def spec_from_feature_config(
    feature_config: Any,
    optimizer: Any = None,
    *,
    pipeline_execution_with_tensor_core: bool = False,
    num_shards: int = 1,
    partition_strategy: str = "div",
    learning_rate_memo: LearningRateMemo | None = None,
    simulate_quantization: bool = True,
) -> EmbeddingSpec:
    """The `EmbeddingSpec` of a v2 `FeatureConfig` nest and optional global optimizer.

    Tables are ordered by first appearance; unnamed ones are called
    `table_<i>` (TensorFlow renames them the same way). A table's own
    `optimizer` overrides the global one. Callable learning rates read
    their values through `learning_rate_memo` when one is given. A table's
    `quantization_config` becomes its `QuantizationSpec` (the TPU's
    forward pass), or is left out with `simulate_quantization=False`
    (TensorFlow's CPU serving lookups ignore it).
    """
    global_optimizer = (
        optimizer_spec(optimizer, learning_rate_memo=learning_rate_memo) if optimizer is not None else None
    )
    tables: dict[int, TableSpec] = {}  # by the id of the TableConfig, in order of first appearance
    # One spec per optimizer object: tables sharing one (TensorFlow gives every table without its own the
    # global one) share one spec object, which the engine's small step updates in one call.
    optimizers: dict[int, tuple[Any, OptimizerSpec]] = {}
    features: list[FeatureSpec] = []
    for path, config in flatten_with_paths(feature_config):
        if not isinstance(config, v2.FeatureConfig):
            raise TypeError(
                f"feature_config holds {config!r} at {'/'.join(map(str, path)) or 'the top'}; every leaf "
                "must be a tf.tpu.experimental.embedding.FeatureConfig."
            )
        table = config.table
        if id(table) not in tables:
            name = table.name or f"table_{len(tables)}"
            own = None
            if table.optimizer is not None:
                if id(table.optimizer) not in optimizers:
                    lowered = optimizer_spec(table.optimizer, learning_rate_memo=learning_rate_memo)
                    optimizers[id(table.optimizer)] = (table.optimizer, lowered)
                own = optimizers[id(table.optimizer)][1]
            where = f"TableConfig {name!r}"
            quantization = _quantization_spec(where, table.quantization_config) if simulate_quantization else None
            tables[id(table)] = _table_spec(where, name, (table.vocabulary_size, table.dim), table, own, quantization)
        features.append(
            _feature_spec(
                f"FeatureConfig at {'/'.join(map(str, path))!r}",
                feature_name(path, config),
                tables[id(table)],
                max_sequence_length=config.max_sequence_length,
                safe_lookup=config.validate_weights_and_indices,
            )
        )
    return build(
        EmbeddingSpec,
        "TPUEmbedding",
        tables=tuple(tables.values()),
        features=tuple(features),
        optimizer=global_optimizer,
        num_shards=num_shards,
        partition_strategy=partition_strategy,
        pipeline_execution_with_tensor_core=pipeline_execution_with_tensor_core,
    )


def slot_names(optimizer: Any) -> list[str]:
    """A v2 optimizer's slot names in TensorFlow's order (the order it creates them).

    >>> slot_names(v2.Adam(0.1))
    ['momenta', 'velocities']
    """
    return list(optimizer_spec(optimizer).slot_initial_values())


def slot_names_and_initializers(optimizer: Any) -> tuple[list[str], list[Callable[..., Any]]]:
    """A v2 optimizer's slot names in TensorFlow's order and their initializers.

    What TensorFlow passes to a `slot_variable_creation_fn` as
    `slot_names` and `slot_initializers`: each initializer is a callable
    `init(shape, dtype) -> array` filling the slot with its start value.

    >>> slot_names_and_initializers(v2.Adagrad(0.1, initial_accumulator_value=0.5))
    (['accumulators'], [Constant(value=0.5)])
    """
    values = optimizer_spec(optimizer).slot_initial_values()
    return list(values), [Constant(float(value)) for value in values.values()]
