"""TensorFlow's categorical feature columns: what TPU embedding columns wrap.

The classes keep TensorFlow's names, fields, `name` and `num_buckets`, so
code that inspects columns keeps working. Construction applies TensorFlow's
checks, plus the ones TensorFlow leaves to run time (a vocabulary file is
read and counted at once; a `vocabulary_size` larger than the file is
refused here, not at the first lookup).

Columns that a TPU cannot embed (hash buckets, bucketized, crossed) and the
dense columns an `EmbeddingConfigSpec` may list (numeric, plain embedding)
exist so that code naming them runs up to the point where they are refused
with a clear message.

Every column also answers TensorFlow's graph-free questions with
TensorFlow's values: `parse_example_spec` (the `tf.io.parse_example` spec,
with `VarLenFeature` / `FixedLenFeature` below standing for TensorFlow's),
`parents`, `_is_v2_column`, and for the categorical columns
`get_config()` / `from_config()`.

>>> c = categorical_column_with_identity("movie", num_buckets=1682)
>>> c
IdentityCategoricalColumn(key='movie', number_buckets=1682, default_value=None)
>>> weighted_categorical_column(c, "movie_weight").name
'movie_weighted_by_movie_weight'
>>> c.parse_example_spec
{'movie': VarLenFeature(dtype=dtype('int64'))}
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Any

import numpy as np

from ..spec.checks import check_int, check_name, fail, is_int
from . import dtypes


class VarLenFeature(collections.namedtuple("VarLenFeature", ["dtype"])):
    """`tf.io.VarLenFeature`: a variable-length feature of `dtype`, read as a sparse tensor.

    TensorFlow's is a namedtuple with the one field `dtype`; so is this one,
    with a numpy dtype (`VarLenFeature(np.dtype('int64'))` is TensorFlow's
    `VarLenFeature(tf.int64)`).
    """

    __slots__ = ()


class FixedLenFeature(collections.namedtuple("FixedLenFeature", ["shape", "dtype", "default_value"])):
    """`tf.io.FixedLenFeature`: a fixed-shape feature, `default_value` filling missing ones."""

    __slots__ = ()

    def __new__(cls, shape, dtype, default_value=None):
        return super().__new__(cls, shape, dtype, default_value)


def dtype_name(dtype: Any) -> str:
    """TensorFlow's name of a dtype, as `get_config` writes it ('string', 'int64', 'float32')."""
    return "string" if dtypes.is_string(dtype) else dtypes.as_dtype(dtype).name


class FeatureColumn:
    """Base of every feature column."""

    _is_v2_column = True  # every column here is a TF2 (`tf.feature_column`) column

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def parse_example_spec(self) -> dict[str, Any]:
        """Feature key -> `VarLenFeature` / `FixedLenFeature`: what `tf.io.parse_example` needs to read it."""
        raise NotImplementedError

    @property
    def parents(self) -> list[Any]:
        """The keys (str) and columns this column is computed from."""
        raise NotImplementedError

    def __lt__(self, other: FeatureColumn) -> bool:
        return self.name < other.name


class CategoricalColumn(FeatureColumn):
    """A column whose values become ids in `[0, num_buckets)`."""

    @property
    def num_buckets(self) -> int:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """TensorFlow's config: the fields, dtypes by name, inner columns as {'class_name', 'config'}."""
        config = {}
        for field in dataclasses.fields(self):
            if not field.repr:  # a cache, not an argument (a vocabulary file's tokens)
                continue
            value = getattr(self, field.name)
            if isinstance(value, FeatureColumn):
                value = serialize_column(value)
            elif field.name == "dtype":
                value = dtype_name(value)
            config[field.name] = value
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None, columns_by_name: Any = None):
        """The column `config` describes, built (and checked) by its constructor function."""
        if not isinstance(config, dict):
            raise fail(
                "config",
                f"a dict from {cls.__name__}.get_config()",
                config,
                error=TypeError,
                owner=f"{cls.__name__}.from_config",
            )
        kwargs = {k: deserialize_column(v) if k == "categorical_column" else v for k, v in config.items()}
        return _BUILDERS[cls.__name__](**kwargs)


def serialize_column(column: CategoricalColumn) -> dict[str, Any]:
    """`{'class_name': ..., 'config': column.get_config()}`, as TensorFlow nests columns in a config."""
    return {"class_name": type(column).__name__, "config": column.get_config()}


def deserialize_column(config: Any) -> CategoricalColumn:
    """The inverse of `serialize_column` (a column object is passed through)."""
    if isinstance(config, CategoricalColumn):
        return config
    name = config.get("class_name") if isinstance(config, dict) else None
    if name not in _BUILDERS:
        raise fail(
            "categorical_column",
            f"a serialized categorical column, class_name in {sorted(_BUILDERS)}",
            config,
            owner="from_config",
        )
    return _CLASSES[name].from_config(config.get("config"))


class DenseColumn(FeatureColumn):
    """A column that produces a dense tensor."""


class SequenceDenseColumn(FeatureColumn):
    """A column that produces a dense sequence tensor."""


def _check_key(key: Any, owner: str) -> str:
    if not isinstance(key, str) or not key:
        raise fail("key", "a non-empty str", key, error=ValueError, owner=owner)
    return key


class OverColumn:
    """A column built over one other column, the field `_over` names: it parses what that column parses, and
    has it as its parent (TensorFlow's `parse_example_spec` and `parents`)."""

    _over = "categorical_column"

    @property
    def parse_example_spec(self) -> dict[str, Any]:
        return getattr(self, self._over).parse_example_spec

    @property
    def parents(self) -> list[Any]:
        return [getattr(self, self._over)]


@dataclasses.dataclass(frozen=True, eq=True)
class _KeyedFeature(FeatureColumn):
    """A column read from one feature, `key`: its name (TensorFlow's) is the key, its `parents` are `[key]`."""

    key: str

    @property
    def name(self) -> str:
        return self.key

    @property
    def parents(self) -> list[Any]:
        return [self.key]


class _KeyedColumn(_KeyedFeature, CategoricalColumn):
    """A categorical column read from one feature, `key`, of dtype `dtype`: TensorFlow's
    `parse_example_spec` is `{key: VarLenFeature(dtype)}`."""

    @property
    def parse_example_spec(self) -> dict[str, Any]:
        return {self.key: VarLenFeature(self.dtype)}


@dataclasses.dataclass(frozen=True, eq=True)
class IdentityCategoricalColumn(_KeyedColumn):
    """Integer values used directly as ids."""

    number_buckets: int
    default_value: int | None = None
    dtype = dtypes.int64  # not a field: TensorFlow's identity column has no dtype argument

    @property
    def num_buckets(self) -> int:
        return self.number_buckets


@dataclasses.dataclass(frozen=True, eq=True)
class VocabularyListCategoricalColumn(_KeyedColumn):
    """Tokens mapped to their index in an in-memory vocabulary."""

    vocabulary_list: tuple[Any, ...]
    dtype: Any
    default_value: int = -1
    num_oov_buckets: int = 0

    @property
    def num_buckets(self) -> int:
        return len(self.vocabulary_list) + self.num_oov_buckets


@dataclasses.dataclass(frozen=True, eq=True)
class VocabularyFileCategoricalColumn(_KeyedColumn):
    """Tokens mapped to their line number in a vocabulary file (one token per line)."""

    vocabulary_file: str
    vocabulary_size: int
    num_oov_buckets: int
    dtype: Any
    default_value: int = -1
    file_format: str | None = None
    vocabulary: tuple[Any, ...] = dataclasses.field(default=(), repr=False, compare=False)

    @property
    def num_buckets(self) -> int:
        return self.vocabulary_size + self.num_oov_buckets


@dataclasses.dataclass(frozen=True, eq=True)
class WeightedCategoricalColumn(CategoricalColumn):
    """A categorical column whose ids come with weights under `weight_feature_key`."""

    categorical_column: CategoricalColumn
    weight_feature_key: str
    dtype: Any = dtypes.float32

    @property
    def name(self) -> str:
        return f"{self.categorical_column.name}_weighted_by_{self.weight_feature_key}"

    @property
    def num_buckets(self) -> int:
        return self.categorical_column.num_buckets

    @property
    def parse_example_spec(self) -> dict[str, Any]:
        config = self.categorical_column.parse_example_spec
        if self.weight_feature_key in config:
            raise ValueError(
                f"Parse config {config[self.weight_feature_key]} already exists for {self.weight_feature_key}."
            )
        config[self.weight_feature_key] = VarLenFeature(self.dtype)
        return config

    @property
    def parents(self) -> list[Any]:
        return [self.categorical_column, self.weight_feature_key]


@dataclasses.dataclass(frozen=True, eq=True)
class SequenceCategoricalColumn(OverColumn, CategoricalColumn):
    """A categorical column read as a sequence: one id per position, never pooled."""

    categorical_column: CategoricalColumn

    @property
    def name(self) -> str:
        return self.categorical_column.name

    @property
    def num_buckets(self) -> int:
        return self.categorical_column.num_buckets


@dataclasses.dataclass(frozen=True, eq=True)
class HashedCategoricalColumn(_KeyedColumn):
    """Hash buckets. Exists to be refused by TPU embedding columns."""

    hash_bucket_size: int
    dtype: Any = dtypes.string

    @property
    def num_buckets(self) -> int:
        return self.hash_bucket_size


@dataclasses.dataclass(frozen=True, eq=True)
class NumericColumn(_KeyedFeature, DenseColumn):
    """A dense numeric input. `EmbeddingConfigSpec` accepts (and ignores) these."""

    shape: tuple[int, ...] = (1,)
    default_value: Any = None
    dtype: Any = dtypes.float32
    normalizer_fn: Any = None

    @property
    def variable_shape(self) -> tuple[int, ...]:
        """The shape of one example's values (TensorFlow's `TensorShape(shape)`)."""
        return tuple(self.shape)

    @property
    def parse_example_spec(self) -> dict[str, Any]:
        default = _default_tuple(self.shape, self.default_value)
        return {self.key: FixedLenFeature(tuple(self.shape), self.dtype, default)}


def _default_tuple(shape: tuple[int, ...], value: Any) -> Any:
    """TensorFlow's form of a numeric default: a scalar repeated to `shape`, as nested tuples (None stays)."""
    if value is None:
        return None
    if np.ndim(value) == 0:
        value = np.full(tuple(shape), value).tolist()
    else:
        value = np.asarray(value).tolist()

    def nested(v):
        return tuple(nested(x) for x in v) if isinstance(v, list) else v

    return nested(value)


@dataclasses.dataclass(frozen=True, eq=True)
class BucketizedColumn(OverColumn, DenseColumn, CategoricalColumn):
    """Buckets of a numeric column. Exists to be refused by TPU embedding columns."""

    source_column: NumericColumn
    boundaries: tuple[float, ...]
    _over = "source_column"  # not a field

    @property
    def name(self) -> str:
        return f"{self.source_column.name}_bucketized"

    @property
    def num_buckets(self) -> int:
        return len(self.boundaries) + 1

    @property
    def variable_shape(self) -> tuple[int, ...]:
        return tuple(self.source_column.shape) + (self.num_buckets,)


@dataclasses.dataclass(frozen=True, eq=True)
class CrossedColumn(CategoricalColumn):
    """A hashed cross of columns. Exists to be refused by TPU embedding columns."""

    keys: tuple[Any, ...]
    hash_bucket_size: int
    hash_key: int | None = None

    @property
    def name(self) -> str:
        return "_X_".join(sorted(k if isinstance(k, str) else k.name for k in self.keys))

    @property
    def num_buckets(self) -> int:
        return self.hash_bucket_size

    @property
    def parse_example_spec(self) -> dict[str, Any]:
        config: dict[str, Any] = {}
        for key in self.keys:
            config.update(
                key.parse_example_spec if isinstance(key, FeatureColumn) else {key: VarLenFeature(dtypes.string)}
            )
        return config

    @property
    def parents(self) -> list[Any]:
        return list(self.keys)


class BaseEmbeddingColumn(OverColumn, DenseColumn, SequenceDenseColumn):
    """What every embedding column has, TPU or not: the name `<categorical column's name>_embedding` (a
    shared TPU column's suffix is `_shared_embedding`) and one example's shape, `(dimension,)` (TensorFlow:
    `TensorShape([dimension])`)."""

    _name_suffix = "_embedding"

    @property
    def name(self) -> str:
        return f"{self.categorical_column.name}{self._name_suffix}"

    @property
    def variable_shape(self) -> tuple[int, ...]:
        return (self.dimension,)


@dataclasses.dataclass(frozen=True, eq=True)
class EmbeddingColumn(BaseEmbeddingColumn):
    """`tf.feature_column.embedding_column`: NOT a TPU column.

    `EmbeddingConfigSpec` refuses it here (TensorFlow fails later); use
    `tf.tpu.experimental.embedding_column` instead.
    """

    categorical_column: CategoricalColumn
    dimension: int
    combiner: str = "mean"
    initializer: Any = None
    ckpt_to_load_from: Any = None
    tensor_name_in_ckpt: Any = None
    max_norm: Any = None
    trainable: bool = True


# Constructors ------------------------------------------------------------------


def categorical_column_with_identity(key: str, num_buckets: int, default_value: int | None = None):
    """Integer ids in `[0, num_buckets)`; out-of-range values become `default_value` if set."""
    owner = "categorical_column_with_identity"
    _check_key(key, owner)
    check_int("num_buckets", num_buckets, minimum=1, owner=owner)
    if default_value is not None:
        if not is_int(default_value) or not 0 <= default_value < num_buckets:
            raise fail("default_value", f"None or an int in [0, {num_buckets})", default_value, owner=owner)
        default_value = int(default_value)
    return IdentityCategoricalColumn(key=key, number_buckets=int(num_buckets), default_value=default_value)


def _vocabulary_dtype(tokens: tuple[Any, ...], dtype: Any, owner: str):
    if any(isinstance(t, (list, tuple, dict, set, np.ndarray)) for t in tokens):  # TF: "unhashable type"
        raise fail("vocabulary_list", "a flat list of strings or integers", list(tokens), error=TypeError, owner=owner)
    kinds = {np.asarray(t).dtype.kind for t in tokens}
    if kinds <= {"U", "S"}:
        vocab_dtype = dtypes.string
    elif kinds <= {"i", "u"}:
        vocab_dtype = dtypes.int64
    else:
        raise fail("vocabulary_list", "all strings or all integers", list(tokens), owner=owner)
    if dtype is not None:
        given = dtypes.as_dtype(dtype)
        if dtypes.is_integer(given) != dtypes.is_integer(vocab_dtype) or not (
            dtypes.is_integer(given) or dtypes.is_string(given)
        ):
            raise fail("dtype", f"a dtype matching the vocabulary ({vocab_dtype})", dtype, owner=owner)
        return given
    return vocab_dtype


def _check_oov(default_value: Any, num_oov_buckets: Any, none_default: Any, owner: str) -> None:
    check_int("num_oov_buckets", num_oov_buckets, minimum=0, owner=owner)
    if num_oov_buckets and default_value != none_default:
        raise ValueError(
            f"{owner}: can't specify both `default_value` and `num_oov_buckets`: unknown tokens "
            f"go either to one id or to hash buckets. Received: default_value={default_value!r}, "
            f"num_oov_buckets={num_oov_buckets!r}."
        )


def categorical_column_with_vocabulary_list(
    key: str, vocabulary_list: Any, dtype: Any = None, default_value: int = -1, num_oov_buckets: int = 0
):
    """Tokens mapped to their index in `vocabulary_list`.

    Unknown tokens get `default_value` (-1: dropped) or, with
    `num_oov_buckets`, one of that many hash buckets after the vocabulary.
    """
    owner = "categorical_column_with_vocabulary_list"
    _check_key(key, owner)
    if vocabulary_list is not None and (
        not hasattr(vocabulary_list, "__len__")
        or (isinstance(vocabulary_list, np.ndarray) and vocabulary_list.ndim != 1)
    ):  # TF: Python's own TypeError
        raise fail("vocabulary_list", "a non-empty list of tokens", vocabulary_list, error=TypeError, owner=owner)
    if vocabulary_list is None or isinstance(vocabulary_list, (str, bytes)) or len(vocabulary_list) == 0:
        raise fail("vocabulary_list", "a non-empty list of tokens", vocabulary_list, owner=owner)
    tokens = tuple(t.item() if isinstance(t, np.generic) else t for t in vocabulary_list)
    duplicates = sorted({t for t in tokens if tokens.count(t) > 1}, key=str)
    if duplicates:
        raise fail(
            "vocabulary_list", "a list of distinct tokens", list(tokens), owner=owner, hint=f"Duplicates: {duplicates}."
        )
    vocab_dtype = _vocabulary_dtype(tokens, dtype, owner)
    _check_oov(default_value, num_oov_buckets, -1, owner)
    if not is_int(default_value) or not (default_value == -1 or 0 <= default_value < len(tokens)):
        raise fail("default_value", f"-1 or an int in [0, {len(tokens)})", default_value, owner=owner)
    return VocabularyListCategoricalColumn(
        key=key,
        vocabulary_list=tokens,
        dtype=vocab_dtype,
        default_value=int(default_value),
        num_oov_buckets=int(num_oov_buckets),
    )


def read_vocabulary_file(path: str, vocabulary_size: int | None, owner: str) -> tuple[str, ...]:
    """The file's tokens, one per line, first `vocabulary_size` lines (all if None)."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise fail("vocabulary_file", "a non-empty file path", path, owner=owner)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{owner}: vocabulary_file {str(path)!r} does not exist.")
    try:
        with open(path, encoding="utf-8") as handle:
            tokens = tuple(line.rstrip("\r\n") for line in handle)
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{owner}: vocabulary_file {str(path)!r} is not UTF-8 text (one token per line): byte "
            f"{error.start} is {error.object[error.start : error.start + 1]!r}."
        ) from None
    if vocabulary_size is not None and vocabulary_size > len(tokens):
        raise ValueError(
            f"{owner}: Argument `vocabulary_size` must be <= the number of lines in "
            f"{str(path)!r} ({len(tokens)}). Received: {vocabulary_size}."
        )
    tokens = tokens if vocabulary_size is None else tokens[:vocabulary_size]
    if not tokens:
        raise ValueError(f"{owner}: vocabulary_file {str(path)!r} is empty.")
    return tokens


def categorical_column_with_vocabulary_file(
    key,
    vocabulary_file,
    vocabulary_size=None,
    dtype=dtypes.string,
    default_value=None,
    num_oov_buckets=0,
    file_format=None,
):
    """TF2 argument order. Tokens mapped to their 0-based line number in the file."""
    owner = "categorical_column_with_vocabulary_file"
    _check_key(key, owner)
    if vocabulary_size is not None:
        check_int("vocabulary_size", vocabulary_size, minimum=1, owner=owner)
    _check_oov(default_value, num_oov_buckets, None, owner)
    if dtype is None or not (dtypes.is_string(dtype) or dtypes.is_integer(dtype)):
        raise fail("dtype", "a string or integer dtype", dtype, owner=owner)
    if file_format not in (None, "text"):
        raise fail(
            "file_format",
            "None or 'text'",
            file_format,
            owner=owner,
            hint="Only one-token-per-line text files are read.",
        )
    tokens = read_vocabulary_file(vocabulary_file, vocabulary_size, owner)
    if dtypes.is_integer(dtype):
        try:
            tokens = tuple(int(t) for t in tokens)
        except ValueError as error:
            raise ValueError(
                f"{owner}: dtype is integer but {str(vocabulary_file)!r} holds a non-integer line ({error})."
            ) from None
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"{owner}: {str(vocabulary_file)!r} holds duplicate tokens; each line must be unique.")
    size = len(tokens)
    if default_value is not None and (
        not is_int(default_value) or not (default_value == -1 or 0 <= default_value < size)
    ):
        raise fail("default_value", f"None, -1 or an int in [0, {size})", default_value, owner=owner)
    return VocabularyFileCategoricalColumn(
        key=key,
        vocabulary_file=str(vocabulary_file),
        vocabulary_size=size,
        num_oov_buckets=int(num_oov_buckets),
        dtype=dtypes.as_dtype(dtype),
        default_value=-1 if default_value is None else int(default_value),
        file_format=file_format,
        vocabulary=tokens,
    )


def categorical_column_with_vocabulary_file_v1(
    key,
    vocabulary_file,
    vocabulary_size=None,
    num_oov_buckets=0,
    default_value=None,
    dtype=dtypes.string,
):
    """TF1 argument order (`tf.compat.v1.feature_column`), without TF2's `file_format`."""
    return categorical_column_with_vocabulary_file(
        key, vocabulary_file, vocabulary_size, dtype=dtype, default_value=default_value, num_oov_buckets=num_oov_buckets
    )


def weighted_categorical_column(categorical_column, weight_feature_key, dtype=dtypes.float32):
    """Pairs each id with a weight read from `weight_feature_key`."""
    owner = "weighted_categorical_column"
    if not isinstance(categorical_column, CategoricalColumn) or isinstance(
        categorical_column, (WeightedCategoricalColumn, SequenceCategoricalColumn)
    ):
        raise fail(
            "categorical_column",
            "a categorical column (not weighted, not sequence)",
            categorical_column,
            error=TypeError,
            owner=owner,
        )
    check_name("weight_feature_key", weight_feature_key, owner=owner)
    if dtype is None or not (dtypes.is_floating(dtype) or dtypes.is_integer(dtype)):
        raise fail("dtype", "a float or integer dtype", dtype, owner=owner)
    return WeightedCategoricalColumn(categorical_column, weight_feature_key, dtypes.as_dtype(dtype))


def sequence_categorical_column_with_identity(key, num_buckets, default_value=None):
    """A sequence of integer ids."""
    return SequenceCategoricalColumn(categorical_column_with_identity(key, num_buckets, default_value))


def sequence_categorical_column_with_vocabulary_list(
    key, vocabulary_list, dtype=None, default_value=-1, num_oov_buckets=0
):
    """A sequence of tokens from an in-memory vocabulary."""
    return SequenceCategoricalColumn(
        categorical_column_with_vocabulary_list(key, vocabulary_list, dtype, default_value, num_oov_buckets)
    )


def sequence_categorical_column_with_vocabulary_file(
    key, vocabulary_file, vocabulary_size=None, num_oov_buckets=0, default_value=None, dtype=dtypes.string
):
    """A sequence of tokens from a vocabulary file."""
    return SequenceCategoricalColumn(
        categorical_column_with_vocabulary_file_v1(
            key, vocabulary_file, vocabulary_size, num_oov_buckets, default_value, dtype
        )
    )


def categorical_column_with_hash_bucket(key, hash_bucket_size, dtype=dtypes.string):
    """Hash buckets (for code that names them; TPU embedding columns refuse them)."""
    owner = "categorical_column_with_hash_bucket"
    _check_key(key, owner)
    check_int("hash_bucket_size", hash_bucket_size, minimum=2, owner=owner)
    return HashedCategoricalColumn(key, int(hash_bucket_size), dtypes.as_dtype(dtype))


def numeric_column(key, shape=(1,), default_value=None, dtype=dtypes.float32, normalizer_fn=None):
    """A dense numeric input."""
    _check_key(key, "numeric_column")
    shape = (int(shape),) if is_int(shape) else tuple(int(s) for s in shape)
    return NumericColumn(key, shape, default_value, dtypes.as_dtype(dtype), normalizer_fn)


def bucketized_column(source_column, boundaries):
    """Buckets of a numeric column (TPU embedding columns refuse these)."""
    if not isinstance(source_column, NumericColumn):
        raise fail("source_column", "a numeric_column", source_column, error=ValueError, owner="bucketized_column")
    boundaries = tuple(float(b) for b in boundaries)
    if list(boundaries) != sorted(set(boundaries)):
        raise fail("boundaries", "a sorted list of distinct numbers", boundaries, owner="bucketized_column")
    return BucketizedColumn(source_column, boundaries)


def crossed_column(keys, hash_bucket_size, hash_key=None):
    """A hashed cross (TPU embedding columns refuse these)."""
    if len(keys) < 2:
        raise fail("keys", "a list of at least 2 keys or columns", keys, owner="crossed_column")
    check_int("hash_bucket_size", hash_bucket_size, minimum=1, owner="crossed_column")
    return CrossedColumn(tuple(keys), int(hash_bucket_size), hash_key)


def embedding_column(
    categorical_column,
    dimension,
    combiner="mean",
    initializer=None,
    ckpt_to_load_from=None,
    tensor_name_in_ckpt=None,
    max_norm=None,
    trainable=True,
    use_safe_embedding_lookup=True,
):
    """The NON-TPU embedding column (for code that names it; EmbeddingConfigSpec refuses it)."""
    if not isinstance(categorical_column, CategoricalColumn):
        raise fail(
            "categorical_column", "a categorical column", categorical_column, error=TypeError, owner="embedding_column"
        )
    check_int("dimension", dimension, minimum=1, owner="embedding_column")
    return EmbeddingColumn(
        categorical_column,
        int(dimension),
        combiner,
        initializer,
        ckpt_to_load_from,
        tensor_name_in_ckpt,
        max_norm,
        trainable,
    )


def _vocabulary_file_from_config(
    key, vocabulary_file, vocabulary_size=None, num_oov_buckets=0, dtype="string", default_value=None, file_format=None
):
    # A stored -1 is the "no default" TensorFlow writes for None; None is what the constructor takes with OOV buckets.
    return categorical_column_with_vocabulary_file(
        key,
        vocabulary_file,
        vocabulary_size,
        dtype,
        None if default_value == -1 else default_value,
        num_oov_buckets,
        file_format,
    )


# class name -> the constructor function `from_config` builds with (config keys are its argument names).
_BUILDERS = {
    "IdentityCategoricalColumn": lambda key, number_buckets, default_value=None: categorical_column_with_identity(
        key, number_buckets, default_value
    ),
    "VocabularyListCategoricalColumn": categorical_column_with_vocabulary_list,
    "VocabularyFileCategoricalColumn": _vocabulary_file_from_config,
    "WeightedCategoricalColumn": weighted_categorical_column,
    "SequenceCategoricalColumn": SequenceCategoricalColumn,
    "HashedCategoricalColumn": categorical_column_with_hash_bucket,
}
_CLASSES = {
    cls.__name__: cls
    for cls in (
        IdentityCategoricalColumn,
        VocabularyListCategoricalColumn,
        VocabularyFileCategoricalColumn,
        WeightedCategoricalColumn,
        SequenceCategoricalColumn,
        HashedCategoricalColumn,
    )
}
