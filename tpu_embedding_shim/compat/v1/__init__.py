"""`tf.compat.v1`: the TF1 namespace."""

from ...estimator import metrics  # noqa: F401
from .. import dtypes as _dtypes
from ..initializers import constant_initializer_v1 as constant_initializer  # noqa: F401
from ..initializers import (  # noqa: F401
    ones_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    truncated_normal_initializer,
    zeros_initializer,
)
from ..tensors import RaggedTensor, SparseTensor  # noqa: F401
from ..v2 import (  # noqa: F401
    config,
    distribute,
    keras,
    train,
)
from . import estimator, feature_column, nn, tpu  # noqa: F401

float32, float64, int32, int64, string = _dtypes.float32, _dtypes.float64, _dtypes.int32, _dtypes.int64, _dtypes.string
