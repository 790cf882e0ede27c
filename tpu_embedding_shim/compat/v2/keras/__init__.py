"""`tf.keras`: only what a TPUEstimator model_fn or a mid-level table uses.

`tf.keras.layers.DenseFeatures` and `tf.keras.experimental.SequenceFeatures`
(see `tpu_embedding_shim.api.feature_layers`), and the initializers of
`tf.keras.initializers` (the same as `tf.initializers`). The rest of Keras
is not provided: the dense part of a model is numpy or torch here (a Keras
model wants `import tpu_embedding_shim.tensorflow as tf`).
"""

from ... import namespaces as _namespaces
from .. import initializers as _initializers
from . import experimental, layers  # noqa: F401

initializers = _namespaces.alias(_initializers, f"{__name__}.initializers")

__getattr__ = _namespaces.missing_names(__name__)
