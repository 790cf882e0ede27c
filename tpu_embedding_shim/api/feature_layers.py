"""Feature layers over TPU embedding columns: DenseFeatures, input_layer, SequenceFeatures.

As on a TPU, the layers do not look embeddings up: they read the
activations of the current step from the innermost `LookupScope`
(lookup_scope.py), which the runner (`TPUEstimator`) fills and enters
around the model_fn, and concatenate them in TensorFlow's order: columns
sorted by name (`_normalize_feature_columns`).

    net = tf.keras.layers.DenseFeatures(columns)(features)      # [B, sum D]
    seq, lengths = tf.keras.experimental.SequenceFeatures(seq_columns)(features)
    net = tf.compat.v1.feature_column.input_layer(features, columns)

A layer returns an `EmbeddingActivations`; the model_fn hands back
`embedding_gradients={net: d_net}` and the scope splits `d_net` per feature.

Outside a running step there is nothing to read, and a layer raises a
`RuntimeError` saying so -- unless a scope is entered explicitly, e.g. an
inference lookup on an engine you hold:

>>> import numpy as np
>>> import tpu_embedding_shim as tf
>>> from tpu_embedding_shim.engine.engine import Engine
>>> cols = [tf.tpu.experimental.embedding_column(
...     tf.feature_column.categorical_column_with_identity(k, 5), 2,
...     initializer=tf.constant_initializer(1.0)) for k in ("b", "a")]
>>> spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
...     feature_columns=cols, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1))
>>> engine = Engine(spec.to_spec())
>>> features = {"a": np.array([[1], [2]]), "b": np.array([[3], [-1]])}
>>> with LookupScope.from_engine(engine, features):
...     net = DenseFeatures(cols)(features)
>>> net.shape, net.tolist()   # columns sorted by name: a_embedding, then b_embedding
((2, 4), [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])

Numeric columns may be mixed in (their values are read from `features` and
get no gradient; TensorFlow's own `numeric_column` is read as this
project's); any other column kind is refused with TensorFlow's error.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .feature_columns import (
    DenseColumn,
    EmbeddingColumn,
    FeatureColumn,
    NumericColumn,
    SequenceCategoricalColumn,
    SequenceDenseColumn,
    numeric_column,
)
from .lookup_scope import EmbeddingActivations, LookupScope, current_scope
from .tpu_feature_columns import TPU_EMBEDDING_COLUMN_CLASSES, _TPUSharedEmbeddingColumnV2

__all__ = [
    "DenseFeatures",
    "DenseFeature",
    "SequenceFeatures",
    "input_layer",
]


# The scope the layers read -------------------------------------------------------------


def _layer_name(name: str | None, base: str) -> str:
    """`name`, or TensorFlow's default: `base` made unique within the running step (one graph per step)."""
    if name:
        return name
    scope = current_scope()
    return scope.unique_layer_name(base) if scope is not None else base


def _scope(owner: str) -> LookupScope:
    scope = current_scope()
    if scope is None:
        raise RuntimeError(
            f"{owner} over TPU embedding columns reads the activations of the current step, and no step is "
            "running. Call it inside a model_fn run by TPUEstimator (train / evaluate / predict), or enter "
            "a scope explicitly: `with LookupScope.from_engine(engine, features): ...`."
        )
    return scope


# Column checks (TensorFlow's order and wording) ------------------------------------------------


def normalize_feature_columns(feature_columns: Any) -> list[FeatureColumn]:
    """TensorFlow's `_normalize_feature_columns`: a list, checked, sorted by name."""
    if isinstance(feature_columns, FeatureColumn):
        feature_columns = [feature_columns]
    if isinstance(feature_columns, dict):
        raise ValueError("Expected feature_columns to be iterable, found dict.")
    if isinstance(feature_columns, Iterable) and not isinstance(feature_columns, (list, tuple)):
        feature_columns = list(feature_columns)
    feature_columns = [_from_tensorflow(column) for column in feature_columns]
    for column in feature_columns:
        if not isinstance(column, FeatureColumn):
            raise ValueError(
                f"Items of feature_columns must be a FeatureColumn. Given (type {type(column)}): {column}."
            )
    if not feature_columns:
        raise ValueError("feature_columns must not be empty.")
    by_name: dict[str, FeatureColumn] = {}
    for column in feature_columns:
        if column.name in by_name:
            raise ValueError(
                f"Duplicate feature column name found for columns: {column} and {by_name[column.name]}. "
                "This usually means that these columns refer to same base feature. Either one must be "
                "discarded or a duplicated but renamed item must be inserted in features dict."
            )
        by_name[column.name] = column
    return sorted(feature_columns, key=lambda c: c.name)


def _from_tensorflow(column: Any) -> Any:
    """TensorFlow's own `numeric_column` (a TensorFlow program mixes it in) as this project's; others as given."""
    kind = type(column)
    if kind.__name__ == "NumericColumn" and kind.__module__.startswith("tensorflow"):
        return numeric_column(column.key, column.shape, column.default_value, column.dtype.name, column.normalizer_fn)
    return column


def _check_type(columns: Sequence[FeatureColumn], expected: type) -> None:
    for column in columns:
        if not isinstance(column, expected):
            raise ValueError(
                f"Items of feature_columns must be a {expected}. You can wrap a categorical column "
                f"with an embedding_column or indicator_column. Given: {column}"
            )


def _check_embeddable(column: FeatureColumn, owner: str) -> None:
    if isinstance(column, EmbeddingColumn):
        raise ValueError(
            f"{owner}: {column.name!r} is a tf.feature_column.embedding_column, which has no table here: only TPU "
            "embedding columns are looked up (by the engine, or as tensor-core variables). Use "
            "tf.tpu.experimental.embedding_column over the same categorical column and list it in the "
            "EmbeddingConfigSpec."
        )


def _dense_sequence_error(column: Any, kind: str) -> ValueError:
    v1 = kind == "input_layer"
    return ValueError(
        f"In embedding_column: {column.name}. categorical_column must not be of type "
        f"{'_' if v1 else ''}SequenceCategoricalColumn. Suggested fix A: If you wish to use DenseFeatures, use a "
        "non-sequence categorical_column_with_*. Suggested fix B: If you wish to create sequence input, use "
        f"SequenceFeatures instead of DenseFeatures. Given (type {type(column.categorical_column)}): "
        f"{column.categorical_column}"
    )


def _numeric_input(column: NumericColumn, features: Mapping[str, Any], owner: str) -> np.ndarray:
    if column.key not in features:
        raise ValueError(
            f"{owner}: numeric column {column.key!r} is missing from the features. Received keys: {sorted(features)}."
        )
    value = features[column.key]
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    value = np.asarray(value)
    if column.normalizer_fn is not None:
        value = np.asarray(column.normalizer_fn(value))
    width = int(np.prod(column.shape))
    try:
        return value.astype(np.float32).reshape(value.shape[0], width)
    except ValueError:
        raise ValueError(
            f"{owner}: numeric column {column.key!r} has shape {list(column.shape)}, so each example "
            f"needs {width} values. Received an array of shape {list(value.shape)}."
        ) from None


def _dense_output(
    columns: Sequence[FeatureColumn], features: Any, owner: str, layer: str, cols_to_output_tensors: dict | None
) -> EmbeddingActivations:
    """The layer's [B, sum D] output; `cols_to_output_tensors` (if a dict) gets each column's slice of it."""
    if not isinstance(features, Mapping):
        raise TypeError(
            f"{owner}: `features` must be a dict of feature name -> values. Received: {type(features).__name__}."
        )
    scope = _scope(owner)
    if scope.builds_graph:  # a TensorFlow model_fn: the output is a graph tensor (runner/tf_bridge.py)
        output = scope.dense_output(columns, features, owner, layer)
    else:
        pieces: list[tuple[str | None, np.ndarray]] = []
        for column in columns:
            if isinstance(column, NumericColumn):
                pieces.append((None, _numeric_input(column, features, owner)))
            else:
                key = column.get_feature_key_name()
                pieces.append((key, scope.activation(column, owner, key)))
        output = scope.record(pieces, layer)
    if cols_to_output_tensors is not None:
        start = 0
        for column in columns:
            width = int(np.prod(column.shape)) if isinstance(column, NumericColumn) else column.dimension
            cols_to_output_tensors[column] = output[:, start : start + width]
            start += width
    return output


# Columns checked once ------------------------------------------------------------------------

_CHECKED: dict[tuple, tuple[tuple, list[FeatureColumn]]] = {}
_CHECKED_SIZE = 64


def checked_columns(feature_columns: Any, owner: Any, check) -> list[FeatureColumn]:
    """`check(feature_columns)` (the columns normalized and checked, or the error), once per layer kind and
    list of column objects.

    TensorFlow builds a model_fn's layers once per graph; here a model_fn runs at every step and builds its
    layers again, so the checked, sorted columns are kept (keyed by `owner`, the layer's kind, and the
    columns' `id()`s: the entry holds the columns, so the ids stay theirs) and a layer over the same columns
    is built without checking them again. Columns are immutable; a refused list is never kept.
    """
    if isinstance(feature_columns, FeatureColumn):
        given: tuple = (feature_columns,)
    elif isinstance(feature_columns, (list, tuple)):
        given = tuple(feature_columns)
    else:  # a dict (refused by the check) or another iterable (read once): checked every time
        return check(feature_columns)
    key = (owner, *map(id, given))
    hit = _CHECKED.get(key)
    if hit is not None:
        return list(hit[1])
    columns = check(list(given))
    if len(_CHECKED) >= _CHECKED_SIZE:
        _CHECKED.pop(next(iter(_CHECKED)))
    _CHECKED[key] = (given, columns)
    return list(columns)


# The layers ------------------------------------------------------------------------------


class _FeatureLayer:
    """What DenseFeatures and SequenceFeatures share: their columns, checked, `trainable` and a `name`.

    The columns are normalized (a sorted list), each must be a `_column_type` and a TPU embedding or numeric
    column, then pass the layer's own `_check_columns`; only then is a default name taken (unique in the
    step), so a refused layer changes nothing. The checks run once per list of columns (`checked_columns`).
    """

    _owner = "layer"  # the name errors give
    _column_type: type = FeatureColumn
    _default_name = "layer"

    def __init__(self, feature_columns: Any, trainable: bool, name: str | None):
        self._feature_columns = checked_columns(feature_columns, type(self), self._checked)
        self.trainable = trainable
        self.name = _layer_name(name, self._default_name)

    def _checked(self, feature_columns: Any) -> list[FeatureColumn]:
        columns = normalize_feature_columns(feature_columns)
        _check_type(columns, self._column_type)
        for column in columns:
            _check_embeddable(column, self._owner)
        self._check_columns(columns)
        return columns

    def _check_columns(self, columns: list[FeatureColumn]) -> None:
        """Raises what this layer refuses in `columns` (checked and sorted already)."""

    @property
    def feature_columns(self) -> list[FeatureColumn]:
        return list(self._feature_columns)


class DenseFeatures(_FeatureLayer):
    """`tf.keras.layers.DenseFeatures`: the concatenated [B, sum D] activations of its columns.

    Args:
      feature_columns: TPU embedding columns (non-sequence) and numeric
        columns; concatenated in name order, as TensorFlow does.
      trainable: accepted for compatibility.
      name: accepted for compatibility.
      partitioner: accepted for compatibility.

    Calling it with the step's `features` returns an
    `EmbeddingActivations`; pass `{output: d(loss)/d(output)}` back as the
    spec's `embedding_gradients`. A sequence column raises TensorFlow's
    "Suggested fix A / B" error when the layer is built (TensorFlow raises it
    at the first call).
    """

    _owner = "DenseFeatures"
    _column_type = DenseColumn
    _default_name = "dense_features"

    def __init__(
        self,
        feature_columns: Any,
        trainable: bool = True,
        name: str | None = None,
        partitioner: Any = None,
        **kwargs: Any,
    ):
        super().__init__(feature_columns, trainable, name)

    def _check_columns(self, columns: list[FeatureColumn]) -> None:
        for column in columns:
            if isinstance(column, TPU_EMBEDDING_COLUMN_CLASSES) and isinstance(
                column.categorical_column, SequenceCategoricalColumn
            ):
                raise _dense_sequence_error(column, "DenseFeatures")

    def __call__(
        self, features: Mapping[str, Any], cols_to_output_tensors: dict | None = None, training: Any = None
    ) -> EmbeddingActivations:
        return _dense_output(self._feature_columns, features, self._owner, self.name, cols_to_output_tensors)


class DenseFeature(DenseFeatures):
    """TensorFlow's own TPU-embedding docs write `tf.keras.layers.DenseFeature`; it means DenseFeatures."""

    def __init__(self, feature_columns: Any, *args: Any, **kwargs: Any):
        warnings.warn(
            "tf.keras.layers.DenseFeature is not a TensorFlow name (the TPU embedding documentation's "
            "example has this typo); it is read as DenseFeatures.",
            UserWarning,
            stacklevel=2,
        )
        super().__init__(feature_columns, *args, **kwargs)


def input_layer(
    features: Mapping[str, Any],
    feature_columns: Any,
    weight_collections: Any = None,
    trainable: bool = True,
    cols_to_vars: dict | None = None,
    cols_to_output_tensors: dict | None = None,
) -> EmbeddingActivations:
    """`tf.compat.v1.feature_column.input_layer`: like DenseFeatures, with TF1's rules.

    Shared embedding columns are refused with TensorFlow's error (use
    DenseFeatures); sequence columns with the "Suggested fix A / B" error.
    """
    owner = "input_layer"
    columns = checked_columns(feature_columns, owner, _input_layer_columns)
    return _dense_output(columns, features, owner, _layer_name(None, "input_layer"), cols_to_output_tensors)


def _input_layer_columns(feature_columns: Any) -> list[FeatureColumn]:
    """input_layer's columns, normalized and checked with TF1's rules."""
    columns = normalize_feature_columns(feature_columns)
    for column in columns:
        if not isinstance(column, DenseColumn):
            raise ValueError(
                "Items of feature_columns must be a _DenseColumn. You can wrap a categorical column "
                f"with an embedding_column or indicator_column. Given: {column}"
            )
        _check_embeddable(column, "input_layer")
        if isinstance(column, _TPUSharedEmbeddingColumnV2):
            raise ValueError(
                "SharedEmbeddingColumns are not supported in `linear_model` or `input_layer`. "
                "Please use `DenseFeatures` or `LinearModel` instead."
            )
        if isinstance(column, TPU_EMBEDDING_COLUMN_CLASSES) and isinstance(
            column.categorical_column, SequenceCategoricalColumn
        ):
            raise _dense_sequence_error(column, "input_layer")
    return columns


class SequenceFeatures(_FeatureLayer):
    """`tf.keras.experimental.SequenceFeatures`: ([B, L, sum D] activations, [B] lengths).

    Every column must be a TPU embedding column over a
    `sequence_categorical_column_with_*`, all with the same
    `max_sequence_length`. As on a TPU, the sequence is padded with zero rows
    or truncated to `max_sequence_length`, and lengths are capped at it.
    TensorFlow asserts at run time that all columns give the same lengths;
    this layer raises a ValueError if they don't.
    """

    _owner = "SequenceFeatures"
    _column_type = SequenceDenseColumn
    _default_name = "sequence_features"

    def __init__(self, feature_columns: Any, trainable: bool = True, name: str | None = None, **kwargs: Any):
        super().__init__(feature_columns, trainable, name)

    def _check_columns(self, columns: list[FeatureColumn]) -> None:
        for column in columns:
            if not isinstance(column.categorical_column, SequenceCategoricalColumn):
                raise ValueError(
                    f"In embedding_column: {column.name}. categorical_column must be of type "
                    "SequenceCategoricalColumn to use SequenceFeatures. Suggested fix: Use one of "
                    f"sequence_categorical_column_with_*. Given (type {type(column.categorical_column)}): "
                    f"{column.categorical_column}"
                )
        lengths = {c.name: c.get_max_sequence_length() for c in columns}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"{self._owner}: all columns must have the same max_sequence_length to be concatenated "
                f"along the last axis. Received: {lengths}."
            )

    def __call__(self, features: Mapping[str, Any], training: Any = None) -> tuple[EmbeddingActivations, np.ndarray]:
        if not isinstance(features, Mapping):
            raise TypeError(
                f"{self._owner}: `features` must be a dict of feature name -> values. "
                f"Received: {type(features).__name__}."
            )
        scope = _scope(self._owner)
        if scope.builds_graph:  # a TensorFlow model_fn: graph tensors (runner/tf_bridge.py)
            return scope.sequence_output(self._feature_columns, self._owner, self.name)
        pieces, lengths = [], None
        for column in self._feature_columns:
            key = column.get_feature_key_name()
            pieces.append((key, scope.activation(column, self._owner, key)))
            these = np.asarray(scope.sequence_lengths[key])
            if lengths is None:
                lengths, first = these, column
            elif not np.array_equal(lengths, these):
                raise ValueError(
                    f"{self._owner}: the columns' sequence lengths differ ({first.name}: "
                    f"{lengths.tolist()}, {column.name}: {these.tolist()}); TensorFlow requires them "
                    "equal (it raises InvalidArgumentError at run time)."
                )
        assert lengths is not None  # a layer has at least one column (checked when it is made)
        return scope.record(pieces, self.name), lengths.copy()
