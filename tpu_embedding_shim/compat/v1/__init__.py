"""`tf.compat.v1`: the TF1 namespace."""

from ...api import dtypes as _dtypes
from ...api.initializers import constant_initializer_v1 as constant_initializer  # noqa: F401
from ...api.initializers import (  # noqa: F401
    ones_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    truncated_normal_initializer,
    zeros_initializer,
)
from ...api.tensors import RaggedTensor, SparseTensor  # noqa: F401
from ...runner import metrics  # noqa: F401
from .. import namespaces as _namespaces
from .. import v2 as _v2
from . import estimator, feature_column, nn, tpu  # noqa: F401

float32, float64, int32, int64, string = _dtypes.float32, _dtypes.float64, _dtypes.int32, _dtypes.int64, _dtypes.string

# TensorFlow 2's names at their TF1 paths, each its own module (a missing name is reported as tf.compat.v1.<...>)
config = _namespaces.alias(_v2.config, f"{__name__}.config")
distribute = _namespaces.alias(_v2.distribute, f"{__name__}.distribute")
keras = _namespaces.alias(_v2.keras, f"{__name__}.keras")
train = _namespaces.alias(_v2.train, f"{__name__}.train")

__getattr__ = _namespaces.missing_names(__name__)
