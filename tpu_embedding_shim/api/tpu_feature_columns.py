"""TPU embedding columns: `tf.tpu.experimental.embedding_column` and `shared_embedding_columns`.

The functions take TensorFlow's arguments in TensorFlow's order, return
objects of TensorFlow's class names with TensorFlow's names
(`<key>_embedding`, `<key>_shared_embedding`, the sorted-join shared
collection name) and accessors (`get_feature_key_name()`,
`get_embedding_var_name()`, `get_embedding_table_size()`, ...).

They also have TensorFlow's graph-free attributes, with TensorFlow's values:
`variable_shape` (a tuple, `(dimension,)`, where TensorFlow has a
`TensorShape`), `parse_example_spec` (the categorical column's, made of
`feature_columns.VarLenFeature`), `parents`, `get_initializer()`,
`get_combiner()`, `is_categorical_column_weighted()`, `max_norm`,
`_is_v2_column`; the non-shared column has `ckpt_to_load_from`,
`tensor_name_in_ckpt`, `trainable` (fixed: TensorFlow's TPU column accepts
none of them) and `get_config()`. docs/api_surface.md lists which of
TensorFlow's attributes exist and why the others do not.

They are stricter than TensorFlow 2.15, which accepts several values that
fail later or never work (see docs/stricter_than_tensorflow.md): hash-bucket,
bucketized and crossed columns, unknown combiners, non-integer dimensions and
sequence lengths, an empty or duplicated shared list, and a
`tensor_core_shape` that would be ignored are all refused here.

>>> from tpu_embedding_shim.api.feature_columns import categorical_column_with_identity
>>> c = categorical_column_with_identity("movie", 1682)
>>> col = embedding_column(c, dimension=16)
>>> col.name, col.get_embedding_var_name(), col.get_embedding_table_size()
('movie_embedding', 'movie', (1682, 16))
>>> col.variable_shape, col.parse_example_spec
((16,), {'movie': VarLenFeature(dtype=dtype('int64'))})
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

from ..spec.checks import check_bool, check_callable, check_int, check_list, check_name, fail, is_int, parse_combiner
from ..spec.initializers import default_table_initializer
from .feature_columns import (
    BaseEmbeddingColumn,
    BucketizedColumn,
    CategoricalColumn,
    CrossedColumn,
    HashedCategoricalColumn,
    OverColumn,
    SequenceCategoricalColumn,
    WeightedCategoricalColumn,
    serialize_column,
)

EMBEDDING_CORE = "tpu_embedding_core"
TENSOR_CORE = "tpu_tensor_core"
CPU = "cpu"
LOOKUP_DEVICES = (CPU, TENSOR_CORE, EMBEDDING_CORE)
_UNSUPPORTED_ARGUMENTS = ("ckpt_to_load_from", "tensor_name_in_ckpt", "max_norm", "trainable")


def _read_only(attribute: str) -> property:
    """A property that returns `self.<attribute>` and cannot be set."""
    return property(operator.attrgetter(attribute))


@dataclasses.dataclass(frozen=True, eq=False)
class _Table:
    """The table of a column: the table arguments of its call, checked (one object per call)."""

    dimension: int
    initializer: Any
    combiner: str | None
    learning_rate_fn: Any


@dataclasses.dataclass(frozen=True, eq=False)
class _Lookup:
    """How a column looks its ids up: the lookup arguments of its call, checked."""

    use_safe_embedding_lookup: bool
    embedding_lookup_device: str | None
    tensor_core_shape: list[Any] | None


class _TPUBaseEmbeddingColumn(BaseEmbeddingColumn):
    """What every TPU embedding column has: the categorical column, sequence length, table and lookup."""

    def __init__(self, categorical_column: CategoricalColumn, max_sequence_length: int, table: _Table, lookup: _Lookup):
        self._categorical_column = categorical_column
        self._max_sequence_length = max_sequence_length
        self._table = table
        self._lookup = lookup

    # TensorFlow's accessors ------------------------------------------------------

    def get_max_sequence_length(self) -> int:
        return self._max_sequence_length

    def is_sequence_column(self) -> bool:
        return isinstance(self.categorical_column, SequenceCategoricalColumn)

    def get_feature_key_name(self) -> str:
        """The features-dict key holding the ids (a weighted column's inner key)."""
        column = self.categorical_column
        if isinstance(column, SequenceCategoricalColumn):
            column = column.categorical_column
        if isinstance(column, WeightedCategoricalColumn):
            column = column.categorical_column
        return column.name

    def get_weight_key_name(self) -> str | None:
        column = self.categorical_column
        if isinstance(column, WeightedCategoricalColumn):
            return column.weight_feature_key
        return None

    def get_sequence_length_feature_key_name(self) -> str:
        return self.get_feature_key_name() + "_seq_length_"

    def get_embedding_table_size(self):
        return (self.categorical_column.num_buckets, self.dimension)

    def get_learning_rate_fn(self):
        return self.learning_rate_fn

    def get_initializer(self):
        """The table's initializer (for shared columns, the same object for every column of the call)."""
        return self.initializer

    def get_combiner(self) -> str | None:
        return self.combiner

    def is_categorical_column_weighted(self) -> bool:
        return isinstance(self.categorical_column, WeightedCategoricalColumn)

    @property
    def max_norm(self) -> None:
        """Always None: TPU embedding columns do not clip embeddings by norm."""
        return None

    # The TF1 (`_FeatureColumn`) names of the same values, which TensorFlow's own tests still read.
    _variable_shape = BaseEmbeddingColumn.variable_shape
    _parse_example_spec = OverColumn.parse_example_spec

    @property
    def _var_scope_name(self) -> str:
        return self.name

    # The constructor's arguments, read-only as TensorFlow's column fields are.
    categorical_column = _read_only("_categorical_column")
    max_sequence_length = _read_only("_max_sequence_length")
    dimension = _read_only("_table.dimension")
    initializer = _read_only("_table.initializer")
    combiner = _read_only("_table.combiner")
    learning_rate_fn = _read_only("_table.learning_rate_fn")
    use_safe_embedding_lookup = _read_only("_lookup.use_safe_embedding_lookup")
    embedding_lookup_device = _read_only("_lookup.embedding_lookup_device")
    tensor_core_shape = _read_only("_lookup.tensor_core_shape")

    def __repr__(self):
        return (
            f"{type(self).__name__}(name={self.name!r}, categorical_column={self.categorical_column!r}, "
            f"dimension={self.dimension!r}, combiner={self.combiner!r}, "
            f"max_sequence_length={self._max_sequence_length!r})"
        )


class _TPUEmbeddingColumnV2(_TPUBaseEmbeddingColumn):
    """A TPU embedding column with a table of its own."""

    def get_embedding_var_name(self) -> str:
        return self.categorical_column.name

    # EmbeddingColumn's fields that TensorFlow's TPU column fixes (its constructor accepts none of them).
    ckpt_to_load_from = property(lambda self: None, doc="Always None.")
    tensor_name_in_ckpt = property(lambda self: None, doc="Always None.")
    trainable = property(lambda self: True, doc="Always True: the embedding optimizer trains the table.")

    def get_config(self) -> dict[str, Any]:
        """TensorFlow's `EmbeddingColumn.get_config()`: the categorical column nested, the initializer serialized.

        An initializer of this package (`tf.compat.v1.*_initializer`, the
        default) becomes `{'class_name', 'config'}` with `'dtype': 'float32'`,
        as TensorFlow's v1 initializers write it; a function becomes its
        name. `max_sequence_length` and `learning_rate_fn` are not in it
        (they are not in TensorFlow's either).
        """
        return {
            "categorical_column": serialize_column(self.categorical_column),
            "dimension": self.dimension,
            "combiner": self.combiner,
            "initializer": _serialize_initializer(self.initializer),
            "ckpt_to_load_from": None,
            "tensor_name_in_ckpt": None,
            "max_norm": None,
            "trainable": True,
            "use_safe_embedding_lookup": self.use_safe_embedding_lookup,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None, columns_by_name=None):
        """Raises TypeError, as TensorFlow's does: its config holds arguments a TPU column does not take."""
        raise TypeError(
            f"{cls.__name__}.__new__() got an unexpected keyword argument 'ckpt_to_load_from': a TPU embedding "
            "column can't be rebuilt from its get_config() (TensorFlow's can't either). Call "
            "tf.tpu.experimental.embedding_column(...) again."
        )


# The fields TensorFlow's v1 initializers write in get_config (before 'dtype'), by class name.
_INITIALIZER_CONFIG_FIELDS = {
    "TruncatedNormal": ("mean", "stddev", "seed"),
    "RandomNormal": ("mean", "stddev", "seed"),
    "RandomUniform": ("minval", "maxval", "seed"),
    "Constant": ("value",),
    "Zeros": (),
    "Ones": (),
}


def _serialize_initializer(initializer: Any) -> Any:
    """TensorFlow's `serialize_keras_object` of an initializer: this package's, and TensorFlow's or Keras' own
    (their class name and `get_config()`)."""
    if hasattr(initializer, "get_config") and not isinstance(initializer, type):
        return {"class_name": type(initializer).__name__, "config": initializer.get_config()}
    if not dataclasses.is_dataclass(initializer) or isinstance(initializer, type):
        return getattr(initializer, "__name__", initializer)  # a function: its name, as TensorFlow writes it
    name = type(initializer).__name__
    fields = _INITIALIZER_CONFIG_FIELDS.get(name, [f.name for f in dataclasses.fields(initializer)])
    config = {}
    for field in fields:
        value = getattr(initializer, field)
        config[field] = value.tolist() if hasattr(value, "tolist") else value
    return {"class_name": name, "config": {**config, "dtype": "float32"}}


class _TPUDeviceSpecificEmbeddingColumnV2(_TPUEmbeddingColumnV2):
    """An embedding column with an explicit `embedding_lookup_device`."""


@dataclasses.dataclass(frozen=True, eq=False)
class SharedEmbeddingColumnCreator(_Table):
    """What the columns of one `shared_embedding_columns` call share: the table, named `name` (the shared
    embedding collection name). One object per call: compared by identity."""

    name: str
    num_buckets: int


class _TPUSharedEmbeddingColumnV2(_TPUBaseEmbeddingColumn):
    """A TPU embedding column that shares its table with the other columns of its call."""

    _name_suffix = "_shared_embedding"
    shared_embedding_column_creator = _read_only("_table")

    def get_embedding_var_name(self) -> str:
        return self.shared_embedding_column_creator.name

    def get_config(self):
        """Raises NotImplementedError, as TensorFlow's shared columns do."""
        raise NotImplementedError("Must be implemented in subclasses.")

    @property
    def _variable_shape(self):
        raise ValueError(_SHARED_TF1_ERROR)

    @property
    def _parse_example_spec(self):
        raise ValueError(_SHARED_TF1_ERROR)


# TensorFlow's error for the TF1 attributes of a shared column (which TF1's input_layer would read).
_SHARED_TF1_ERROR = (
    "SharedEmbeddingColumns are not supported in `linear_model` or `input_layer`. Please use "
    "`DenseFeatures` or `LinearModel` instead."
)


class _TPUSharedDeviceSpecificEmbeddingColumnV2(_TPUSharedEmbeddingColumnV2):
    """A shared embedding column with an explicit `embedding_lookup_device`."""


TPU_EMBEDDING_COLUMN_CLASSES = (_TPUEmbeddingColumnV2, _TPUSharedEmbeddingColumnV2)


# Checks shared by both functions -----------------------------------------------------


def _check_categorical(column: Any, owner: str) -> None:
    if isinstance(column, (HashedCategoricalColumn, BucketizedColumn, CrossedColumn)):
        raise TypeError(
            f"{owner}: a TPU embedding column can't be built over {type(column).__name__} "
            f"{column.name!r}. Received: {column!r}. Map values to ids in the input function and use "
            "categorical_column_with_identity, or use a vocabulary list / file column."
        )
    if not isinstance(column, CategoricalColumn):
        raise fail(
            "categorical_column",
            "a categorical column (categorical_column_with_identity, "
            "weighted_categorical_column, categorical_column_with_vocabulary_list / _file, or a "
            "sequence_categorical_column_with_*)",
            column,
            error=TypeError,
            owner=owner,
        )


def _check_device(device: Any, shape: Any, owner: str) -> list[Any] | None:
    if device is not None and (not isinstance(device, str) or device not in LOOKUP_DEVICES):
        raise fail("embedding_lookup_device", f"None or one of {list(LOOKUP_DEVICES)}", device, owner=owner)
    if shape is not None:
        shape = list(check_list("tensor_core_shape", shape, "a list of 2 sizes [batch, ids per example]", owner=owner))
        if len(shape) != 2:
            raise fail("tensor_core_shape", "a list of 2 sizes [batch, ids per example]", shape, owner=owner)
        for size in shape:
            if size is not None and size != -1 and (not is_int(size) or size < 1):
                raise fail("tensor_core_shape", "2 sizes, each None, -1 or an int >= 1", shape, owner=owner)
        if device == TENSOR_CORE and (not is_int(shape[1]) or shape[1] < 1):
            raise fail(
                "tensor_core_shape",
                "[batch, ids per example] with ids per example an int >= 1 (each "
                "example keeps its first tensor_core_shape[1] positions; the batch may be None)",
                shape,
                owner=owner,
            )
        if device != TENSOR_CORE:
            raise ValueError(
                f"{owner}: `tensor_core_shape` only applies with embedding_lookup_device='tpu_tensor_core' and "
                f"would be ignored. Received: tensor_core_shape={shape!r}, embedding_lookup_device={device!r}. "
                "Set embedding_lookup_device='tpu_tensor_core' or drop tensor_core_shape."
            )
    if device == TENSOR_CORE and shape is None:
        raise ValueError(
            f"{owner}: embedding_lookup_device='tpu_tensor_core' requires `tensor_core_shape` "
            "(e.g. [None, <ids per example>]). Received: tensor_core_shape=None."
        )
    return shape


def _check_sequence_length(column: CategoricalColumn, max_sequence_length: Any, owner: str) -> int:
    is_sequence = isinstance(column, SequenceCategoricalColumn)
    if not is_int(max_sequence_length):
        raise fail(
            "max_sequence_length",
            "an int",
            max_sequence_length,
            owner=owner,
            error=TypeError if isinstance(max_sequence_length, str) else ValueError,
        )
    if is_sequence and max_sequence_length < 1:
        raise ValueError(
            f"{owner}: Argument `max_sequence_length` must be an int >= 1 for sequence column "
            f"{column.name!r}. Received: {max_sequence_length}."
        )
    if not is_sequence and max_sequence_length != 0:
        raise ValueError(
            f"{owner}: Argument `max_sequence_length` must be 0 for non-sequence column {column.name!r}. "
            f"Received: {max_sequence_length}. Use a sequence_categorical_column_with_* column for sequences."
        )
    return int(max_sequence_length)


def _check_unsupported(unsupported: dict, owner: str) -> None:
    if unsupported:
        name = sorted(unsupported)[0]
        known = name in _UNSUPPORTED_ARGUMENTS
        raise TypeError(
            f"{owner}() got an unexpected keyword argument {name!r}"
            + (f": TPU embedding columns do not support {', '.join(_UNSUPPORTED_ARGUMENTS)}." if known else ".")
        )


def _table(owner: str, dimension: Any, combiner: Any, initializer: Any, learning_rate_fn: Any) -> _Table:
    """The table arguments, checked; the default initializer is truncated normal, stddev 1/sqrt(dimension)."""
    dimension = check_int("dimension", dimension, minimum=1, owner=owner)
    if combiner is not None:  # None: TensorFlow's TPU embedding sums ('sum'); the column keeps None, as TF's does
        parse_combiner(combiner, owner=owner)
    check_callable("initializer", initializer, owner=owner)
    check_callable("learning_rate_fn", learning_rate_fn, owner=owner)
    if initializer is None:
        initializer = default_table_initializer(dimension)
    return _Table(dimension, initializer, combiner, learning_rate_fn)


def _lookup(owner: str, use_safe_embedding_lookup: Any, device: Any, tensor_core_shape: Any) -> _Lookup:
    """The lookup arguments, checked."""
    tensor_core_shape = _check_device(device, tensor_core_shape, owner)
    check_bool("use_safe_embedding_lookup", use_safe_embedding_lookup, owner=owner)
    return _Lookup(use_safe_embedding_lookup, device, tensor_core_shape)


def _check_tensor_core_sequence(device: str | None, column: CategoricalColumn, owner: str) -> None:
    if device == TENSOR_CORE and isinstance(column, SequenceCategoricalColumn):
        raise ValueError(
            f"{owner}: embedding_lookup_device='tpu_tensor_core' does not support sequence columns. "
            f"Received: sequence column {column.name!r}."
        )


# The functions ----------------------------------------------------------------------


def embedding_column(
    categorical_column,
    dimension: int,
    combiner: str | None = "mean",
    initializer: Callable | None = None,
    max_sequence_length: int = 0,
    learning_rate_fn: Callable[[int], float] | None = None,
    embedding_lookup_device: str | None = None,
    tensor_core_shape: Sequence | None = None,
    use_safe_embedding_lookup: bool = True,
    **unsupported,
):
    """TPU version of `tf.feature_column.embedding_column`.

    Args:
      categorical_column: identity, weighted, vocabulary list / file, or a
        sequence_* column.
      dimension: width of the table, an int >= 1.
      combiner: 'mean' (default), 'sum' or 'sqrtn'; pools a bag of ids. None
        (TensorFlow accepts it) sums, as the TPU embedding engine does;
        `get_combiner()` stays None.
      initializer: `init(shape, dtype)`; default truncated normal with
        stddev 1/sqrt(dimension).
      max_sequence_length: must be > 0 for a sequence column (output [B, L, D],
        padded with zero rows or truncated), 0 otherwise.
      learning_rate_fn: `global_step -> learning rate` for this table.
      embedding_lookup_device: None, 'cpu', 'tpu_embedding_core' or
        'tpu_tensor_core' (then `tensor_core_shape` is required).
      tensor_core_shape: [batch, ids per example] for 'tpu_tensor_core'.
      use_safe_embedding_lookup: prune negative ids and (mean / sqrtn)
        non-positive weights, and fill empty rows (default True).

    Returns:
      A `_TPUEmbeddingColumnV2` (`_TPUDeviceSpecificEmbeddingColumnV2` when a
      device is given).
    """
    owner = "embedding_column"
    _check_unsupported(unsupported, owner)
    _check_categorical(categorical_column, owner)
    table = _table(owner, dimension, combiner, initializer, learning_rate_fn)
    lookup = _lookup(owner, use_safe_embedding_lookup, embedding_lookup_device, tensor_core_shape)
    _check_tensor_core_sequence(embedding_lookup_device, categorical_column, owner)
    max_sequence_length = _check_sequence_length(categorical_column, max_sequence_length, owner)
    cls = _TPUDeviceSpecificEmbeddingColumnV2 if embedding_lookup_device else _TPUEmbeddingColumnV2
    return cls(categorical_column, max_sequence_length, table, lookup)


def shared_embedding_columns(
    categorical_columns,
    dimension: int,
    combiner: str | None = "mean",
    initializer: Callable | None = None,
    shared_embedding_collection_name: str | None = None,
    max_sequence_lengths: Sequence[int] | None = None,
    learning_rate_fn: Callable[[int], float] | None = None,
    embedding_lookup_device: str | None = None,
    tensor_core_shape: Sequence | None = None,
    use_safe_embedding_lookup: bool = True,
    **unsupported,
):
    """TPU columns that share one table, in the order given.

    All columns must have the same number of buckets and distinct feature
    keys. The table is named by `shared_embedding_collection_name`, by
    default the columns' names sorted and joined with '_' plus
    '_shared_embedding'. `max_sequence_lengths` gives one length per column
    (0 for non-sequence columns). Other arguments as in `embedding_column`.
    """
    owner = "shared_embedding_columns"
    _check_unsupported(unsupported, owner)
    hint = "Wrap a single column in a list: shared_embedding_columns([column], ...)."
    check_list("categorical_columns", categorical_columns, "a list of categorical columns", owner=owner, hint=hint)
    if not categorical_columns:
        raise fail("categorical_columns", "a non-empty list of categorical columns", categorical_columns, owner=owner)
    for column in categorical_columns:
        _check_categorical(column, owner)
    if max_sequence_lengths is not None:
        check_list(
            "max_sequence_lengths", max_sequence_lengths, "None or a list with one length per column", owner=owner
        )
    if not max_sequence_lengths:
        max_sequence_lengths = [0] * len(categorical_columns)
    if len(max_sequence_lengths) != len(categorical_columns):
        raise ValueError(
            f"{owner}: `max_sequence_lengths` needs one entry per column. Received: "
            f"len(max_sequence_lengths)={len(max_sequence_lengths)}, "
            f"len(categorical_columns)={len(categorical_columns)}."
        )
    table = _table(owner, dimension, combiner, initializer, learning_rate_fn)
    lookup = _lookup(owner, use_safe_embedding_lookup, embedding_lookup_device, tensor_core_shape)
    if shared_embedding_collection_name is not None:
        check_name("shared_embedding_collection_name", shared_embedding_collection_name, owner=owner)
    by_name = sorted(categorical_columns, key=lambda c: c.name)
    first = by_name[0]
    for column in by_name[1:]:
        if column.num_buckets != first.num_buckets:
            raise ValueError(
                f"{owner}: all columns must have the same number of buckets to share a table. "
                f"{first!r} has {first.num_buckets}, {column!r} has {column.num_buckets}."
            )
    feature_keys = [_feature_key(c) for c in categorical_columns]
    repeated = sorted({k for k in feature_keys if feature_keys.count(k) > 1})
    if repeated:
        raise ValueError(
            f"{owner}: feature keys {repeated} appear more than once. Each feature may be embedded once; "
            "list each column once (TensorFlow fails later, when the TPU configuration is built)."
        )
    lengths = [_check_sequence_length(c, n, owner) for c, n in zip(categorical_columns, max_sequence_lengths)]
    for column in categorical_columns:
        _check_tensor_core_sequence(embedding_lookup_device, column, owner)
    name = shared_embedding_collection_name or "_".join(c.name for c in by_name) + "_shared_embedding"
    creator = SharedEmbeddingColumnCreator(**vars(table), name=name, num_buckets=first.num_buckets)
    cls = _TPUSharedDeviceSpecificEmbeddingColumnV2 if embedding_lookup_device else _TPUSharedEmbeddingColumnV2
    return [cls(column, length, creator, lookup) for column, length in zip(categorical_columns, lengths)]


def _feature_key(column: CategoricalColumn) -> str:
    while isinstance(column, (SequenceCategoricalColumn, WeightedCategoricalColumn)):
        column = column.categorical_column
    return column.name
