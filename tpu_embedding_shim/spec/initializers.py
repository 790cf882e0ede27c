"""Table initializers: framework-neutral numpy callables.

An initializer is any callable `init(shape, dtype=np.float32) -> np.ndarray`,
the same protocol as TensorFlow's and Keras' initializers. These are the ones
TensorFlow users name most; each is a frozen dataclass, so two initializers
with the same arguments compare equal (and a spec holding one round-trips).

TensorFlow can call them too, as it calls its own: `shape` may be a
`tf.TensorShape` and `dtype` a `tf.DType` (anything with `as_numpy_dtype`),
and the numpy array they return is a value `tf.Variable` takes.

>>> import numpy as np
>>> RowIdInitializer(offset=10)((3, 2)).tolist()
[[10.0, 10.0], [11.0, 11.0], [12.0, 12.0]]
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .checks import check_int, check_real, fail


def _rng(seed: int | None) -> np.random.Generator:
    return np.random.default_rng(seed)


def _shape(shape: Sequence[Any]) -> tuple[int, ...]:
    """A shape as ints: a tuple, a list or a `tf.TensorShape` (whose entries may be `Dimension`s)."""
    return tuple(int(size) for size in shape)


def _dtype(dtype: Any) -> Any:
    """A numpy dtype: a `tf.DType` is read through its `as_numpy_dtype`, None is float32."""
    if dtype is None:
        return np.float32
    return getattr(dtype, "as_numpy_dtype", dtype)


@dataclasses.dataclass(frozen=True)
class TruncatedNormal:
    """Normal(mean, stddev) re-drawn until within two stddevs of the mean.

    This is TensorFlow's truncated normal, and (with stddev 1/sqrt(dim)) the
    default initializer of every TPU embedding table. With `seed=None` each
    call draws fresh values, as in TensorFlow.
    """

    mean: float = 0.0
    stddev: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        check_real("mean", self.mean, owner="TruncatedNormal")
        check_real("stddev", self.stddev, minimum=0.0, owner="TruncatedNormal")

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        shape, dtype = _shape(shape), _dtype(dtype)
        rng = _rng(self.seed)
        out = rng.standard_normal(tuple(shape))
        bad = np.abs(out) > 2.0
        while bad.any():
            out[bad] = rng.standard_normal(int(bad.sum()))
            bad = np.abs(out) > 2.0
        return (self.mean + self.stddev * out).astype(dtype)


@dataclasses.dataclass(frozen=True)
class RandomNormal:
    """Normal(mean, stddev)."""

    mean: float = 0.0
    stddev: float = 0.05
    seed: int | None = None

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        shape, dtype = _shape(shape), _dtype(dtype)
        return (self.mean + self.stddev * _rng(self.seed).standard_normal(shape)).astype(dtype)


@dataclasses.dataclass(frozen=True)
class RandomUniform:
    """Uniform on [minval, maxval)."""

    minval: float = -0.05
    maxval: float = 0.05
    seed: int | None = None

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        shape, dtype = _shape(shape), _dtype(dtype)
        return _rng(self.seed).uniform(self.minval, self.maxval, shape).astype(dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class Constant:
    """Every entry equal to a number, or the entries of an array read in row-major order.

    TensorFlow's `tf.constant_initializer`: a number (or an array of one
    value) fills any shape; an array or nested list of N values gives any
    shape of N entries (`np.arange(32)` sets an [8, 4] table to rows
    `[0, 1, 2, 3], [4, 5, 6, 7], ...`); another size is a `TypeError`, as
    in TensorFlow. An array is kept as a read-only copy (float64, or its own
    float type), so the spec stays frozen; two initializers are equal, and
    hash equally, when their values and shapes are.

    >>> Constant(np.arange(6))((2, 3)).tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]

    Attributes:
      value: a float, or a read-only array of any shape.
      verify_shape: `tf.compat.v1.constant_initializer`'s flag: the array's
        own shape must be the requested one.
    """

    value: float | np.ndarray = 0.0
    verify_shape: bool = False

    def __post_init__(self) -> None:
        value = self.value
        if isinstance(value, numbers.Real):
            object.__setattr__(self, "value", float(value))  # nan and inf pass, as in TensorFlow
            return
        expected = "a number, or an array or nested list of numbers"
        if value is None or isinstance(value, (str, bytes, dict)):
            raise fail("value", expected, value, error=TypeError, owner="Constant")
        try:
            array = np.array(value)
        except ValueError:
            raise fail("value", expected + " (rectangular)", value, owner="Constant") from None
        if array.dtype.kind not in "biuf":
            raise fail("value", expected, value, error=TypeError, owner="Constant")
        if array.ndim == 0:
            object.__setattr__(self, "value", float(array))
            return
        if array.dtype.kind != "f":
            array = array.astype(np.float64)
        array.setflags(write=False)
        object.__setattr__(self, "value", array)

    def check_shape(self, shape: Sequence[int]) -> None:
        """Raise TypeError unless these values can fill a variable of `shape` (nothing is allocated)."""
        shape = tuple(int(s) for s in shape)
        value = self.value
        if self.verify_shape and np.shape(value) != shape:
            raise TypeError(
                f"Argument `value` of Constant (verify_shape=True): expected an array with "
                f"shape {shape}, but got shape {np.shape(value)}."
            )
        # A number, a one-element vector (TensorFlow fills from [x], not from [[x]]) or as many values as entries.
        if isinstance(value, float) or value.shape == (1,) or value.size == _size(shape):
            return
        raise TypeError(
            f"Argument `value` of Constant has {value.size} elements, but got `shape` {shape} with "
            f"{_size(shape)} elements. An array fills a variable of as many elements (read in row-major order); "
            "a single number fills any shape."
        )

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        shape, dtype = _shape(shape), _dtype(dtype)
        self.check_shape(shape)
        value = self.value
        if isinstance(value, float):
            return np.full(shape, value, dtype=dtype)
        if value.size == _size(shape):
            return value.reshape(shape).astype(dtype)
        return np.full(shape, value[0], dtype=dtype)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        if self.verify_shape != other.verify_shape or np.shape(self.value) != np.shape(other.value):
            return False
        if isinstance(self.value, float):
            return self.value == other.value
        return bool(np.array_equal(self.value, other.value))

    def __hash__(self) -> int:
        if isinstance(self.value, float):
            return hash((self.value, self.verify_shape))
        values = (self.value.astype(np.float64) + 0.0).tobytes()  # + 0.0: -0.0 hashes as 0.0, which it equals
        return hash((values, self.value.shape, self.verify_shape))

    def __repr__(self) -> str:
        flag = ", verify_shape=True" if self.verify_shape else ""
        if isinstance(self.value, float):
            return f"Constant(value={self.value!r}{flag})"
        flat = self.value.reshape(-1).tolist()
        if len(flat) <= 8:
            return f"Constant(value={self.value.tolist()!r}{flag})"
        head = ", ".join(repr(v) for v in flat[:4])
        return (
            f"Constant(value=<{self.value.dtype} array of shape {self.value.shape}: {head}, ..., {flat[-1]!r}>{flag})"
        )


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


@dataclasses.dataclass(frozen=True)
class Zeros:
    """All zeros."""

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        return np.zeros(_shape(shape), dtype=_dtype(dtype))


@dataclasses.dataclass(frozen=True)
class Ones:
    """All ones."""

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        return np.ones(_shape(shape), dtype=_dtype(dtype))


@dataclasses.dataclass(frozen=True)
class RowIdInitializer:
    """Row i is filled with `offset + i` in every column.

    TensorFlow's `tf.tpu.experimental.embedding.RowIdInitializer`: with it,
    any lookup result can be read by eye (a sum of ids, a mean of ids).
    """

    offset: int = 0

    def __post_init__(self) -> None:
        check_int("offset", self.offset, minimum=-(2**62), owner="RowIdInitializer")

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        shape, dtype = _shape(shape), _dtype(dtype)
        rows = np.arange(shape[0], dtype=np.float64) + self.offset
        return np.broadcast_to(rows.reshape((-1,) + (1,) * (len(shape) - 1)), shape).astype(dtype)


def default_table_initializer(dim: int) -> TruncatedNormal:
    """TensorFlow's default: truncated normal, mean 0, stddev 1/sqrt(dim)."""
    return TruncatedNormal(mean=0.0, stddev=1.0 / float(np.sqrt(dim)))
