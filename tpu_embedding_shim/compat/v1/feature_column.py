"""`tf.compat.v1.feature_column` (TF1 argument order for the vocabulary-file column)."""

from ..feature_columns import (  # noqa: F401
    bucketized_column,
    categorical_column_with_hash_bucket,
    categorical_column_with_identity,
    categorical_column_with_vocabulary_list,
    crossed_column,
    embedding_column,
    numeric_column,
    sequence_categorical_column_with_identity,
    sequence_categorical_column_with_vocabulary_file,
    sequence_categorical_column_with_vocabulary_list,
    weighted_categorical_column,
)
from ..feature_columns import categorical_column_with_vocabulary_file_v1 as categorical_column_with_vocabulary_file  # noqa: F401
from ..feature_layers import input_layer  # noqa: F401
