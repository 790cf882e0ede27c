"""`tf.compat.v2`, which is also the top-level `tf` namespace of TensorFlow 2."""

from ...api import dtypes as _dtypes
from ...api.control_flow import function, range  # noqa: F401
from ...api.initializers import (  # noqa: F401
    constant_initializer,
    ones_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    zeros_initializer,
)
from ...api.tensors import RaggedTensor, SparseTensor  # noqa: F401
from .. import namespaces as _namespaces
from . import (  # noqa: F401
    config,
    distribute,
    estimator,
    feature_column,
    initializers,
    keras,
    nn,
    ragged,
    tpu,
    train,
)

float32, float64, int32, int64, string = _dtypes.float32, _dtypes.float64, _dtypes.int32, _dtypes.int64, _dtypes.string

__getattr__ = _namespaces.missing_names(__name__)
