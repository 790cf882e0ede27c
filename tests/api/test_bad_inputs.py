"""Bad inputs found by fuzzing get the project's own message, naming the argument or the file
(they raised numpy's or Python's own errors, or were silently accepted)."""

import numpy as np
import pytest

import tpu_embedding_shim as tf


@pytest.mark.parametrize(
    "nrows, error",
    [(2.5, ValueError), ("2", TypeError), (-1, ValueError), (True, ValueError), (np.float64(2.0), ValueError)],
)
def test_from_value_rowids_refuses_an_nrows_that_is_not_a_count(nrows, error):
    with pytest.raises(error, match=r"Argument `nrows` of RaggedTensor must be an int >= 0\. Received: "):
        tf.RaggedTensor.from_value_rowids([1, 2], [0, 1], nrows=nrows)


def test_from_value_rowids_takes_numpy_integers_and_empty_trailing_rows():
    ragged = tf.RaggedTensor.from_value_rowids([1, 2], [0, 1], nrows=np.int64(4))
    assert ragged.row_splits.tolist() == [0, 1, 2, 2, 2]


def test_a_binary_vocabulary_file_names_the_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"comedy\n\xff\xfe\x00drama\n")
    with pytest.raises(ValueError, match=r"vocabulary_file '.*vocab\.txt' is not UTF-8 text .* byte 7 is b'\\xff'"):
        tf.feature_column.categorical_column_with_vocabulary_file("genre", str(path))


def test_a_tpu_embedding_that_raises_leaves_the_table_configs_as_they_were():
    embedding = tf.tpu.experimental.embedding
    first = embedding.TableConfig(vocabulary_size=8, dim=2)
    second = embedding.TableConfig(vocabulary_size=8, dim=2, name="table_0")  # the name TF gives `first`
    features = {"a": embedding.FeatureConfig(table=first), "b": embedding.FeatureConfig(table=second)}
    with pytest.raises(ValueError, match="Tables must have a unique name"):
        embedding.TPUEmbedding(feature_config=features, optimizer=embedding.SGD(0.1))
    assert first.name is None and first.optimizer is None  # TensorFlow had renamed it and set its optimizer
    collapsed = embedding.QuantizationConfig(num_buckets=4, lower=1.0, upper=1.0 + 1e-12)  # one float32
    quantized = embedding.TableConfig(vocabulary_size=8, dim=2, quantization_config=collapsed)
    # refused when lowered, after the tables were named
    features = {"a": embedding.FeatureConfig(table=first), "b": embedding.FeatureConfig(table=quantized)}
    with pytest.raises(ValueError, match="QuantizationConfig of TableConfig .table_1.*float32"):
        embedding.TPUEmbedding(feature_config=features, optimizer=embedding.SGD(0.1))
    assert first.name is None and first.optimizer is None and quantized.name is None and quantized.optimizer is None
