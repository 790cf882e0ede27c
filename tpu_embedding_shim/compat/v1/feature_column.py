"""`tf.compat.v1.feature_column`: `tf.feature_column`'s columns with TF1's argument order for the vocabulary-file
column, and `input_layer`."""

from ...api.feature_columns import categorical_column_with_vocabulary_file_v1 as _vocabulary_file_v1
from ...api.feature_layers import input_layer  # noqa: F401
from .. import namespaces as _namespaces
from ..v2.feature_column import *  # noqa: F403  (the same columns as TensorFlow 2's)

# TF1's arguments (num_oov_buckets before default_value and dtype, no file_format): another signature than TF2's
categorical_column_with_vocabulary_file = _vocabulary_file_v1  # type: ignore[assignment]

__getattr__ = _namespaces.missing_names(__name__)
