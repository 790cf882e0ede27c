"""TensorFlow's initializer names, as numpy initializers (`tf.zeros_initializer()`, ...).

Each returns an object of `spec.initializers`, a callable
`init(shape, dtype) -> np.ndarray`.
"""

from ..spec.checks import check_bool
from ..spec.initializers import Constant, Ones, RandomNormal, RandomUniform, TruncatedNormal, Zeros


def zeros_initializer(dtype=None):
    return Zeros()


def ones_initializer(dtype=None):
    return Ones()


def constant_initializer(value=0, support_partition=False):
    """`tf.constant_initializer`: a number fills any shape; an array (any rank) or nested list of N values
    fills a variable of N entries, read in row-major order; another size is a `TypeError` when called.

    >>> constant_initializer([[0, 1], [2, 3], [4, 5]])((2, 3)).tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    check_bool("support_partition", support_partition, owner="constant_initializer")
    return Constant(value)


def constant_initializer_v1(value=0, dtype=None, verify_shape=False):
    """`tf.compat.v1.constant_initializer`: as `constant_initializer`; with `verify_shape=True` an array must
    already have the variable's shape. `dtype` is accepted: the engine always asks for float32."""
    return Constant(value, verify_shape=check_bool("verify_shape", verify_shape, owner="constant_initializer"))


def random_normal_initializer(mean=0.0, stddev=0.05, seed=None, dtype=None):
    return RandomNormal(float(mean), float(stddev), seed)


def random_uniform_initializer(minval=-0.05, maxval=0.05, seed=None, dtype=None):
    return RandomUniform(float(minval), float(maxval), seed)


def truncated_normal_initializer(mean=0.0, stddev=1.0, seed=None, dtype=None):
    """`tf.compat.v1.truncated_normal_initializer` (default stddev 1.0)."""
    return TruncatedNormal(float(mean), float(stddev), seed)


# Keras' initializer classes (`tf.initializers.*`, `tf.keras.initializers.*`), with TensorFlow 2's arguments.


def keras_truncated_normal(mean=0.0, stddev=0.05, seed=None):
    """`tf.keras.initializers.TruncatedNormal`: normal, re-drawn beyond two stddevs.

    >>> keras_truncated_normal(stddev=0.1, seed=1)((2, 3)).shape
    (2, 3)
    """
    return TruncatedNormal(float(mean), float(stddev), seed)


def keras_random_normal(mean=0.0, stddev=0.05, seed=None):
    """`tf.keras.initializers.RandomNormal`."""
    return RandomNormal(float(mean), float(stddev), seed)


def keras_random_uniform(minval=-0.05, maxval=0.05, seed=None):
    """`tf.keras.initializers.RandomUniform`: uniform on [minval, maxval)."""
    return RandomUniform(float(minval), float(maxval), seed)


def keras_constant(value=0):
    """`tf.keras.initializers.Constant`: `value` everywhere (a number, or an array of the variable's size)."""
    return Constant(value)


def keras_zeros():
    """`tf.keras.initializers.Zeros`."""
    return Zeros()


def keras_ones():
    """`tf.keras.initializers.Ones`."""
    return Ones()


# TensorFlow's and Keras' initializer objects, read as this package's ------------------------------------

_FRAMEWORK_MODULES = ("tensorflow.", "keras.", "tf_keras.")

_FROM_CONFIG = {
    "RandomNormal": lambda c: RandomNormal(float(c["mean"]), float(c["stddev"]), c.get("seed")),
    "TruncatedNormal": lambda c: TruncatedNormal(float(c["mean"]), float(c["stddev"]), c.get("seed")),
    "RandomUniform": lambda c: RandomUniform(float(c["minval"]), float(c["maxval"]), c.get("seed")),
    "Constant": lambda c: Constant(c.get("value", 0)),
    "Zeros": lambda c: Zeros(),
    "Ones": lambda c: Ones(),
}


def from_framework(initializer):
    """A TensorFlow / Keras initializer object as the equal initializer of this package; anything else as it is.

    `tf.random_normal_initializer(0., 0.01)`, `tf.keras.initializers.TruncatedNormal(...)`,
    `tf.compat.v1.truncated_normal_initializer(...)`, the uniform, constant,
    zeros and ones ones, v1, v2 and Keras alike, are read from their
    `get_config()`: the same distribution and the same seed, drawn by numpy
    (so a seedless one takes the engine's seed, as the built-in ones do, and
    no TensorFlow op runs). Other initializers (Glorot, variance scaling,
    orthogonal, a function `(shape, dtype)`) are kept and called when the
    table is built.

    >>> class RandomNormal:  # stands in for tf.random_normal_initializer(0., 0.01)
    ...     __module__ = "tensorflow.python.ops.init_ops_v2"
    ...     def get_config(self):
    ...         return {"mean": 0.0, "stddev": 0.01, "seed": None}
    >>> from_framework(RandomNormal())
    RandomNormal(mean=0.0, stddev=0.01, seed=None)
    """
    kind = type(initializer)
    build = _FROM_CONFIG.get(kind.__name__)
    if build is None or not kind.__module__.startswith(_FRAMEWORK_MODULES) or not hasattr(initializer, "get_config"):
        return initializer
    return build(initializer.get_config())
