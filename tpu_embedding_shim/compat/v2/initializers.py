"""`tf.initializers` (and `tf.keras.initializers`): Keras' initializer classes, as the engine's numpy initializers.

TensorFlow's arguments and defaults; each returns a callable
`init(shape, dtype=np.float32) -> np.ndarray` that a `TableConfig` takes as
its `initializer`. The lower-case names are Keras' aliases.
"""

from ...api.initializers import keras_constant as constant
from ...api.initializers import keras_ones as ones
from ...api.initializers import keras_random_normal as random_normal
from ...api.initializers import keras_random_uniform as random_uniform
from ...api.initializers import keras_truncated_normal as truncated_normal
from ...api.initializers import keras_zeros as zeros
from .. import namespaces as _namespaces

Constant, Ones, RandomNormal, RandomUniform, TruncatedNormal, Zeros = (
    constant,
    ones,
    random_normal,
    random_uniform,
    truncated_normal,
    zeros,
)

__all__ = [
    "Constant",
    "Ones",
    "RandomNormal",
    "RandomUniform",
    "TruncatedNormal",
    "Zeros",
    "constant",
    "ones",
    "random_normal",
    "random_uniform",
    "truncated_normal",
    "zeros",
]

__getattr__ = _namespaces.missing_names(__name__)
