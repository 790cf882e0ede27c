"""Table and feature specifications.

A table is a `[vocabulary_size, dim]` float32 matrix with a combiner and an
optional optimizer of its own. A feature is one named input that looks rows
up in a table: how its raw values become row ids (identity, a vocabulary
list, a vocabulary file), whether it carries weights, and whether it is a
sequence (one row per position, padded or truncated to
`max_sequence_length`) or is pooled by the table's combiner.

>>> t = TableSpec(name="tbl_movie", vocabulary_size=1682, dim=16)
>>> t.combiner, t.initializer, t.effective_initializer().stddev
('mean', None, 0.25)
>>> f = FeatureSpec(name="movie", table="tbl_movie", num_buckets=1682)
>>> f.is_sequence
False
>>> q = QuantizationSpec(num_buckets=5, lower=-1.0, upper=1.0)
>>> [float(v) for v in q.float32_parameters()]  # lower, upper, quantum
[-1.0, 1.0, 0.5]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .checks import (
    check_bool,
    check_callable,
    check_choice,
    check_int,
    check_name,
    check_real,
    fail,
    is_int,
    parse_combiner,
)
from .initializers import default_table_initializer
from .optimizers import OptimizerSpec

ID_SOURCES = ("identity", "vocabulary_list", "vocabulary_file")
_INT32_MAX = 2**31 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuantizationSpec:
    """TensorFlow's simulated quantization of a table's looked-up rows (`QuantizationConfig`).

    On the forward pass only, every value of every gathered row is clipped
    to [lower, upper] and rounded to the nearest of `num_buckets` evenly
    spaced levels, before the combiner (TensorFlow's `SimulatedQuantization`,
    tensorflow/core/protobuf/tpu/optimization_parameters.proto), in float32
    (the proto's bounds are float32)::

        quantum = (upper - lower) / (num_buckets - 1)
        x = floor((clip(x, lower, upper) - lower) / quantum + 0.5) * quantum + lower

    The backward pass is unchanged: gradients reach the rows as if nothing
    was quantized, and the stored table stays float32.

    Attributes:
      num_buckets: the number of levels, an int in [2, 2**31 - 1] (the
        proto's int32).
      lower: the lowest level, a finite number in float32's range.
      upper: the highest level, > lower once both are float32, with a
        quantum that is a positive finite float32.
    """

    num_buckets: int
    lower: float
    upper: float

    def __post_init__(self) -> None:
        owner = "QuantizationSpec"
        check_int("num_buckets", self.num_buckets, minimum=2, owner=owner)
        if self.num_buckets > _INT32_MAX:
            raise fail(
                "num_buckets", f"an int in [2, {_INT32_MAX}] (TensorFlow's int32)", self.num_buckets, owner=owner
            )
        for name in ("lower", "upper"):
            check_real(name, getattr(self, name), minimum=-_FLOAT32_MAX, maximum=_FLOAT32_MAX, owner=owner)
        lower, upper, quantum = self.float32_parameters()
        if not upper > lower:
            raise fail("upper", f"a number > lower={self.lower!r} once both are float32", self.upper, owner=owner)
        if not 0 < quantum < np.inf:
            raise ValueError(
                f"{owner}: (upper - lower) / (num_buckets - 1) must be a positive finite float32. Received: "
                f"num_buckets={self.num_buckets!r}, lower={self.lower!r}, upper={self.upper!r}, quantum={quantum}."
            )

    def float32_parameters(self) -> tuple[np.float32, np.float32, np.float32]:
        """(lower, upper, quantum) as float32, the quantum computed in float32 as TensorFlow's config holds it."""
        with np.errstate(over="ignore", under="ignore"):  # an overflow is refused by the caller
            lower, upper = np.float32(self.lower), np.float32(self.upper)
            quantum = np.float32((upper - lower) / np.float32(self.num_buckets - 1))
        return lower, upper, quantum


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableSpec:
    """One embedding table.

    Attributes:
      name: unique table name (checkpoint and export file names use it).
      vocabulary_size: number of rows, >= 1.
      dim: width of a row, >= 1.
      initializer: `init(shape, dtype) -> array`; None means TensorFlow's
        default, truncated normal with stddev 1/sqrt(dim), resolved when used
        (`effective_initializer`), so `dataclasses.replace(table, dim=...)`
        gives the new dim's default.
      combiner: how a bag of rows is pooled: 'sum', 'mean' or 'sqrtn'.
      optimizer: this table's optimizer, overriding the embedding spec's
        (None: use the spec's).
      quantization: simulated quantization of its looked-up rows on the
        forward pass (`QuantizationSpec`), or None.
    """

    name: str
    vocabulary_size: int
    dim: int
    initializer: Callable[..., Any] | None = None
    combiner: str = "mean"
    optimizer: OptimizerSpec | None = None
    quantization: QuantizationSpec | None = None

    def __post_init__(self) -> None:
        owner = f"TableSpec {self.name!r}"
        check_name("name", self.name, owner="TableSpec")
        check_int("vocabulary_size", self.vocabulary_size, minimum=1, owner=owner)
        check_int("dim", self.dim, minimum=1, owner=owner)
        check_callable("initializer", self.initializer, owner=owner)
        parse_combiner(self.combiner, owner=owner)
        if self.optimizer is not None and not isinstance(self.optimizer, OptimizerSpec):
            raise fail("optimizer", "an OptimizerSpec or None", self.optimizer, error=TypeError, owner=owner)
        if self.quantization is not None and not isinstance(self.quantization, QuantizationSpec):
            raise fail("quantization", "a QuantizationSpec or None", self.quantization, error=TypeError, owner=owner)

    def effective_initializer(self) -> Callable[..., Any]:
        """The initializer the table is built with: the given one, else TensorFlow's default for `dim`."""
        if self.initializer is None:
            return default_table_initializer(self.dim)
        return self.initializer

    def seeded_initializer(self, rng: Any) -> Callable[..., Any]:
        """`effective_initializer()`; a built-in random one without a seed gets one drawn from `rng`
        (a numpy Generator), so a seeded engine builds the same tables every run. Other callables
        (TensorFlow's and Keras' initializer objects too, seed or none) are returned as they are, and
        draw nothing from `rng`."""
        initializer = self.effective_initializer()
        if _is_seedless_dataclass(initializer):  # the built-in random ones are dataclasses with a `seed`
            seeded: Callable[..., Any] = dataclasses.replace(initializer, seed=int(rng.integers(2**31)))  # type: ignore[type-var]
            return seeded
        return initializer


def _is_seedless_dataclass(initializer: Any) -> bool:
    """Whether `initializer` is a dataclass instance with a `seed` field that is None."""
    if not dataclasses.is_dataclass(initializer) or isinstance(initializer, type):
        return False
    values = {field.name: getattr(initializer, field.name) for field in dataclasses.fields(initializer)}
    return "seed" in values and values["seed"] is None


@dataclasses.dataclass(frozen=True, kw_only=True)
class FeatureSpec:
    """One input feature and how its values become rows of `table`.

    Attributes:
      name: the key of this feature in the features dict.
      table: name of the table it looks up.
      num_buckets: size of the id space this feature produces (must equal
        the table's vocabulary size).
      id_source: 'identity' (values are ids), 'vocabulary_list' or
        'vocabulary_file' (values are tokens mapped through `vocabulary`).
      vocabulary: the tokens, in id order (vocabulary sources only; a file's
        lines are read when the spec is built).
      vocabulary_file: the file the tokens came from, for the record.
      default_value: identity: the id for out-of-range values (None: out of
        range is an error); vocabulary: the id for unknown tokens (-1:
        dropped).
      num_oov_buckets: unknown tokens are hashed into this many extra ids.
      weight_key: key of this feature's weights in the features dict, or None.
      max_sequence_length: 0 for a pooled feature; > 0 for a sequence feature
        whose output is `[batch, max_sequence_length, dim]`.
      safe_lookup: TensorFlow's `use_safe_embedding_lookup`: prune negative
        ids (and non-positive weights for mean / sqrtn), fill empty rows.
      dense_zero_is_padding: the TPUEstimator rule for dense integer inputs:
        only non-zero entries are ids, so id 0 is padding (TensorFlow's CPU
        feature columns drop only negative entries). Sparse and ragged
        inputs are never affected.
    """

    name: str
    table: str
    num_buckets: int
    id_source: str = "identity"
    vocabulary: tuple[Any, ...] | None = None
    vocabulary_file: str | None = None
    default_value: int | None = None
    num_oov_buckets: int = 0
    weight_key: str | None = None
    max_sequence_length: int = 0
    safe_lookup: bool = True
    dense_zero_is_padding: bool = False

    def __post_init__(self) -> None:
        owner = f"FeatureSpec {self.name!r}"
        check_name("name", self.name, owner="FeatureSpec")
        check_name("table", self.table, owner=owner)
        check_int("num_buckets", self.num_buckets, minimum=1, owner=owner)
        check_choice("id_source", self.id_source, ID_SOURCES, owner=owner)
        check_int("num_oov_buckets", self.num_oov_buckets, minimum=0, owner=owner)
        check_int("max_sequence_length", self.max_sequence_length, minimum=0, owner=owner)
        check_bool("safe_lookup", self.safe_lookup, owner=owner)
        check_bool("dense_zero_is_padding", self.dense_zero_is_padding, owner=owner)
        if self.weight_key is not None:
            check_name("weight_key", self.weight_key, owner=owner)
        if self.default_value is not None and not is_int(self.default_value):
            raise fail("default_value", "an int or None", self.default_value, owner=owner)
        if self.id_source == "identity":
            self._check_identity(owner)
        else:
            self._check_vocabulary(owner)

    def _check_identity(self, owner: str) -> None:
        if self.vocabulary is not None or self.num_oov_buckets:
            raise ValueError(
                f"{owner}: an identity feature takes no `vocabulary` or `num_oov_buckets`. "
                f"Received: vocabulary={self.vocabulary!r}, num_oov_buckets={self.num_oov_buckets!r}."
            )
        if self.default_value is not None and not 0 <= self.default_value < self.num_buckets:
            raise fail("default_value", f"None or in [0, {self.num_buckets})", self.default_value, owner=owner)

    def _check_vocabulary(self, owner: str) -> None:
        if not isinstance(self.vocabulary, tuple) or not self.vocabulary:
            raise fail("vocabulary", "a non-empty tuple of tokens", self.vocabulary, owner=owner)
        if len(set(self.vocabulary)) != len(self.vocabulary):
            raise fail("vocabulary", "a tuple of distinct tokens", self.vocabulary, owner=owner)
        expected = len(self.vocabulary) + self.num_oov_buckets
        if self.num_buckets != expected:
            raise fail("num_buckets", f"len(vocabulary) + num_oov_buckets = {expected}", self.num_buckets, owner=owner)
        default = -1 if self.default_value is None else self.default_value
        if self.num_oov_buckets and default != -1:
            raise ValueError(
                f"{owner}: `default_value` and `num_oov_buckets` cannot both be set. "
                f"Received: default_value={self.default_value!r}, num_oov_buckets={self.num_oov_buckets!r}."
            )
        if default != -1 and not 0 <= default < self.num_buckets:
            raise fail("default_value", f"-1 or in [0, {self.num_buckets})", self.default_value, owner=owner)

    @property
    def is_sequence(self) -> bool:
        """True when the feature returns one row per position."""
        return self.max_sequence_length > 0
