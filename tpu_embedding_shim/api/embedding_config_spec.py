"""`tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec`.

A namedtuple, as in TensorFlow, with TensorFlow's nine arguments, defaults
and check order: exactly one way of configuring (feature columns, or the
pair of config dicts), then the partition strategy, then the column types,
then the optimizer. Beyond TensorFlow, the whole configuration is lowered to
an `EmbeddingSpec` here, so every error TensorFlow would raise only when the
estimator builds its graph (a feature embedded twice, a bad combiner, a
table no feature uses) is raised by the constructor.

>>> from tpu_embedding_shim.api.feature_columns import categorical_column_with_identity
>>> from tpu_embedding_shim.api.tpu_feature_columns import embedding_column
>>> from tpu_embedding_shim.api.tpu_embedding_v1 import AdagradParameters
>>> spec = EmbeddingConfigSpec(
...     feature_columns=[embedding_column(categorical_column_with_identity("ident", 10), 4)],
...     optimization_parameters=AdagradParameters(0.1))
>>> spec.partition_strategy, spec.to_spec().tables[0].name
('div', 'tbl_ident')
"""

from __future__ import annotations

import collections
import warnings
from typing import Any

from ..spec.checks import check_bool, check_callable, check_list, check_real, fail, parse_partition_strategy
from . import lowering
from .feature_columns import EmbeddingColumn, NumericColumn
from .tpu_embedding_v1 import OPTIMIZATION_PARAMETER_CLASSES, FeatureConfig, TableConfig
from .tpu_feature_columns import TENSOR_CORE, TPU_EMBEDDING_COLUMN_CLASSES

_OWNER = "EmbeddingConfigSpec"


class EmbeddingConfigSpec(
    collections.namedtuple(
        "EmbeddingConfigSpec",
        (
            "feature_columns",
            "tensor_core_feature_columns",
            "optimization_parameters",
            "clipping_limit",
            "pipeline_execution_with_tensor_core",
            "experimental_gradient_multiplier_fn",
            "feature_to_config_dict",
            "table_to_config_dict",
            "partition_strategy",
            "profile_data_directory",
        ),
    )
):
    """The TPU embedding configuration handed to `TPUEstimator(embedding_config_spec=...)`.

    Args:
      feature_columns: TPU embedding columns (and, as TensorFlow allows,
        numeric columns, which are ignored). Columns with
        embedding_lookup_device='tpu_tensor_core' go to
        `tensor_core_feature_columns`: the model trains those tables itself.
        They must use combiner 'sum' or 'mean' and no weights (TensorFlow's
        dense TPU lookup has neither); the list may hold only them.
      optimization_parameters: one of the `*Parameters` classes; trains every
        table of `feature_columns`.
      clipping_limit: stored, never applied (TensorFlow does the same); use
        the optimizer's clip_gradient_min / clip_gradient_max.
      pipeline_execution_with_tensor_core: one-step-stale lookups, as on a TPU.
      experimental_gradient_multiplier_fn: `global_step -> multiplier` for
        every embedding gradient.
      feature_to_config_dict: feature name -> v1 `FeatureConfig` (with
        `table_to_config_dict`, instead of feature columns).
      table_to_config_dict: table name -> v1 `TableConfig`.
      partition_strategy: 'div' or 'mod'; both work on a CPU here.
      profile_data_directory: where lookup statistics are written.

    Of other keywords (`**unknown`) only `column=`, the typo of TensorFlow's
    own example, is accepted: read as `feature_columns=`, with a warning.
    """

    def __new__(
        cls,
        feature_columns=None,
        optimization_parameters=None,
        clipping_limit=None,
        pipeline_execution_with_tensor_core=False,
        experimental_gradient_multiplier_fn=None,
        feature_to_config_dict=None,
        table_to_config_dict=None,
        partition_strategy="div",
        profile_data_directory=None,
        **unknown,
    ):
        feature_columns = _accept_docs_alias(feature_columns, unknown)
        # not bool(): an array of columns has no truth value (it is refused below, naming `feature_columns`)
        by_columns = feature_columns is not None and not (
            isinstance(feature_columns, (list, tuple)) and not feature_columns
        )
        by_dicts = feature_to_config_dict is not None and table_to_config_dict is not None
        if by_columns == by_dicts or (by_columns and (feature_to_config_dict or table_to_config_dict)):
            raise ValueError(
                "EmbeddingConfigSpec: give exactly one of `feature_columns` or the pair "
                "`feature_to_config_dict` and `table_to_config_dict`. Received: "
                f"feature_columns={_describe(feature_columns)}, "
                f"feature_to_config_dict={_describe(feature_to_config_dict)}, "
                f"table_to_config_dict={_describe(table_to_config_dict)}."
            )
        parse_partition_strategy(partition_strategy, owner=_OWNER)
        tensor_core_columns = None
        if by_columns:
            feature_columns, tensor_core_columns = _split_columns(feature_columns)
            _check_optimizer(optimization_parameters, required=True)
        else:
            _check_config_dicts(feature_to_config_dict, table_to_config_dict)
            _check_optimizer(optimization_parameters, required=False)
        if clipping_limit is not None:
            check_real("clipping_limit", clipping_limit, minimum=0.0, min_open=True, owner=_OWNER)
        check_bool("pipeline_execution_with_tensor_core", pipeline_execution_with_tensor_core, owner=_OWNER)
        check_callable("experimental_gradient_multiplier_fn", experimental_gradient_multiplier_fn, owner=_OWNER)
        if profile_data_directory is not None and not isinstance(profile_data_directory, str):
            raise fail("profile_data_directory", "a str or None", profile_data_directory, error=TypeError, owner=_OWNER)
        self = super().__new__(
            cls,
            feature_columns,
            tensor_core_columns,
            optimization_parameters,
            clipping_limit,
            pipeline_execution_with_tensor_core,
            experimental_gradient_multiplier_fn,
            feature_to_config_dict,
            table_to_config_dict,
            partition_strategy,
            profile_data_directory,
        )
        self.to_spec()  # everything TensorFlow checks later is checked now
        return self

    def to_spec(self, num_shards: int = 1):
        """The `EmbeddingSpec` the engine runs (tables split into `num_shards`)."""
        return lowering.spec_from_embedding_config_spec(self, num_shards=num_shards)


def _accept_docs_alias(feature_columns: Any, unknown: dict[str, Any]) -> Any:
    """TensorFlow's own example writes `EmbeddingConfigSpec(column=...)`; accept it, with a warning."""
    if "column" in unknown and feature_columns is None:
        warnings.warn(
            "EmbeddingConfigSpec: `column=` is not an argument of TensorFlow's EmbeddingConfigSpec "
            "(its documentation's example has this typo); it is read as `feature_columns=`.",
            UserWarning,
            stacklevel=3,
        )
        feature_columns = unknown.pop("column")
    if unknown:
        raise TypeError(f"EmbeddingConfigSpec() got an unexpected keyword argument {sorted(unknown)[0]!r}.")
    return feature_columns


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    try:
        return f"{type(value).__name__} of {len(value)}"
    except TypeError:
        return repr(value)


def _split_columns(feature_columns: Any) -> tuple[list, list]:
    hint = "Wrap a single column in a list."
    check_list("feature_columns", feature_columns, "a list of TPU embedding columns", owner=_OWNER, hint=hint)
    embedding_columns, tensor_core_columns = [], []
    for column in feature_columns:
        if isinstance(column, EmbeddingColumn):
            raise TypeError(
                f"{_OWNER}: {column.name!r} is a tf.feature_column.embedding_column, which a TPU embedding "
                "engine can't train. Use tf.tpu.experimental.embedding_column (or "
                "shared_embedding_columns) over the same categorical column."
            )
        if not isinstance(column, TPU_EMBEDDING_COLUMN_CLASSES + (NumericColumn,)):
            raise fail(
                "feature_columns",
                "a list of columns from tf.tpu.experimental.embedding_column / "
                "shared_embedding_columns (numeric columns are allowed and ignored)",
                column,
                error=TypeError,
                owner=_OWNER,
            )
        if getattr(column, "embedding_lookup_device", None) == TENSOR_CORE:
            _check_tensor_core_column(column)
            tensor_core_columns.append(column)
        else:
            embedding_columns.append(column)
    return embedding_columns, tensor_core_columns


def _check_tensor_core_column(column: Any) -> None:
    """What a TPU's dense (tensor-core) lookup can't do, refused now rather than at the first step.

    TensorFlow raises the combiner error when the feature layer is built in
    the model_fn; a weighted column fails its input pipeline (which reads
    `categorical_column.key`, a field weighted columns lack), and its
    lookup would ignore the weights anyway.
    """
    if column.combiner not in ("sum", "mean"):
        raise ValueError(
            "Dense TPU Embedding does not support combiner other than sum and mean. "
            f"{_OWNER}: column {column.name!r} has embedding_lookup_device='tpu_tensor_core' and "
            f"combiner={column.combiner!r}. Use combiner='sum' or 'mean', or look it up on the embedding "
            "core (embedding_lookup_device=None)."
        )
    if column.is_categorical_column_weighted():
        raise ValueError(
            f"{_OWNER}: column {column.name!r} has embedding_lookup_device='tpu_tensor_core' over a "
            "weighted_categorical_column. A tensor-core lookup has no weights (TensorFlow's TPU input pipeline "
            "fails on it, and its lookup counts every id once). Drop the weights, or look it up on the "
            "embedding core (embedding_lookup_device=None)."
        )


def _check_optimizer(optimization_parameters: Any, *, required: bool) -> None:
    if optimization_parameters is None and not required:
        return
    if not isinstance(optimization_parameters, OPTIMIZATION_PARAMETER_CLASSES):
        names = ", ".join(c.__name__ for c in OPTIMIZATION_PARAMETER_CLASSES)
        hint = None
        if isinstance(optimization_parameters, type):
            hint = f"Pass an instance, e.g. {optimization_parameters.__name__}(learning_rate=0.1), not the class."
        raise fail(
            "optimization_parameters",
            f"an instance of one of {names}",
            optimization_parameters,
            owner=_OWNER,
            hint=hint
            or "TPU embeddings train with these optimizers only; the model's optimizer never trains embedding tables.",
        )


def _check_config_dicts(feature_to_config_dict: dict, table_to_config_dict: dict) -> None:
    for name, value in (
        ("feature_to_config_dict", feature_to_config_dict),
        ("table_to_config_dict", table_to_config_dict),
    ):
        if not isinstance(value, dict) or not value:
            raise fail(name, "a non-empty dict", value, error=TypeError, owner=_OWNER)
    for feature, config in feature_to_config_dict.items():
        if not isinstance(config, FeatureConfig):
            raise TypeError(
                f"{_OWNER}: the config of feature {feature!r} must be a v1 FeatureConfig. "
                f"Received: {config!r} of type {type(config).__name__}."
            )
        if config.table_id not in table_to_config_dict:
            raise ValueError(
                f"{_OWNER}: feature {feature!r} refers to table {config.table_id!r}, which is not in "
                f"table_to_config_dict (tables: {sorted(table_to_config_dict)})."
            )
    for table, config in table_to_config_dict.items():
        if not isinstance(config, TableConfig):
            raise TypeError(
                f"{_OWNER}: the config of table {table!r} must be a v1 TableConfig. "
                f"Received: {config!r} of type {type(config).__name__}."
            )


def get_configs_from_feature_columns(feature_columns):
    """TensorFlow's v1 view of TPU columns: (table_to_config_dict, feature_to_config_dict).

    Tables are keyed `'tbl_' + column.get_embedding_var_name()`, features by
    feature key, with TensorFlow's duplicate-feature check.
    """
    tables, features = lowering.specs_from_feature_columns(list(feature_columns), optimizer=None)
    columns_by_table = {}
    for column in feature_columns:
        if isinstance(column, TPU_EMBEDDING_COLUMN_CLASSES):
            columns_by_table.setdefault("tbl_" + column.get_embedding_var_name(), column)
    table_to_config_dict = {
        t.name: TableConfig(
            vocabulary_size=t.vocabulary_size,
            dimension=t.dim,
            initializer=columns_by_table[t.name].get_initializer(),  # the column's own object
            combiner=columns_by_table[t.name].get_combiner(),
            learning_rate_fn=columns_by_table[t.name].learning_rate_fn,
        )
        for t in tables
    }
    feature_to_config_dict = {
        f.name: FeatureConfig(table_id=f.table, max_sequence_length=f.max_sequence_length, weight_key=f.weight_key)
        for f in features
    }
    return table_to_config_dict, feature_to_config_dict
