"""`tf.feature_column` (TF2 argument order)."""

from ...api.feature_columns import (  # noqa: F401
    bucketized_column,
    categorical_column_with_hash_bucket,
    categorical_column_with_identity,
    categorical_column_with_vocabulary_file,
    categorical_column_with_vocabulary_list,
    crossed_column,
    embedding_column,
    numeric_column,
    sequence_categorical_column_with_identity,
    sequence_categorical_column_with_vocabulary_file,
    sequence_categorical_column_with_vocabulary_list,
    weighted_categorical_column,
)
from .. import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
