"""Each defect the public-API fuzzer (test_public_api_fuzz.py) found, pinned by the input that found it.

Before the fixes these raised numpy's or Python's own errors (a truth value
of an array, `len()` of a bool, UnicodeDecodeError, MemoryError) or a
message that did not name the argument. TensorFlow 2.15 (checked with the
oracle) raises Python's own text for the same inputs, or an
InvalidArgumentError for the ragged ones.
"""

import numpy as np
import pytest

import tpu_embedding_shim as tf


def _spec_kwargs():
    return {"optimization_parameters": tf.tpu.experimental.AdagradParameters(0.1)}


def test_an_array_of_feature_columns_is_named():
    with pytest.raises(TypeError, match="Argument `feature_columns` of EmbeddingConfigSpec must be a list"):
        tf.estimator.tpu.experimental.EmbeddingConfigSpec(feature_columns=np.array([[1, 2], [3, 4]]), **_spec_kwargs())


def test_row_lengths_that_do_not_add_up_are_named():
    with pytest.raises(
        ValueError,
        match=r"Argument `row_lengths` of RaggedTensor must be lengths adding up to the "
        r"number of values \(3\)\. Received: \[\]",
    ):
        tf.RaggedTensor.from_row_lengths([1, 2, 3], [])


def test_value_rowids_of_another_length_are_named():
    with pytest.raises(ValueError, match=r"Argument `value_rowids` of RaggedTensor must be one row id per value"):
        tf.RaggedTensor.from_value_rowids([1, 2, 3], [0, 1])


def test_a_row_count_that_does_not_fit_in_memory_is_a_value_error_naming_nrows():
    with pytest.raises(ValueError, match="Argument `nrows` of RaggedTensor"):
        tf.RaggedTensor.from_value_rowids([1, 2], [0, 1], nrows=2**40)


def test_row_splits_that_do_not_end_at_the_values_are_shown():
    with pytest.raises(ValueError, match=r"last row split \(0\) .* Received: row_splits=\[0\]"):
        tf.RaggedTensor.from_row_splits([1, 2, 3], [0])


@pytest.mark.parametrize("device", [np.array([1, 2]), 3, ["cpu"]])
def test_an_embedding_lookup_device_that_is_not_a_name_is_named(device):
    column = tf.feature_column.categorical_column_with_identity("f", 10)
    with pytest.raises(ValueError, match="Argument `embedding_lookup_device` of embedding_column"):
        tf.tpu.experimental.embedding_column(column, 4, embedding_lookup_device=device)


@pytest.mark.parametrize("vocabulary", [False, 5, np.array(3), np.array([["a", "b"]])])
def test_a_vocabulary_list_that_is_not_a_list_is_named(vocabulary):
    with pytest.raises(TypeError, match="Argument `vocabulary_list` of categorical_column_with_vocabulary_list"):
        tf.feature_column.categorical_column_with_vocabulary_list("v", vocabulary)


def _model_fn(features, labels, mode, params):
    raise AssertionError("not called")


def _estimator(tmp_path, **kwargs):
    return tf.estimator.tpu.TPUEstimator(
        model_fn=_model_fn, config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path)), train_batch_size=8, **kwargs
    )


def test_params_that_are_not_a_dict_are_named(tmp_path):
    with pytest.raises(TypeError, match="Argument `params` of TPUEstimator must be a dict or None. Received: False"):
        _estimator(tmp_path, params=False)


def test_a_use_tpu_without_a_truth_value_is_named(tmp_path):
    with pytest.raises(ValueError, match="Argument `use_tpu` of TPUEstimator must be a bool"):
        _estimator(tmp_path, use_tpu=np.array([1, 2]))


def test_an_embedding_config_spec_array_is_named(tmp_path):
    with pytest.raises(TypeError, match="embedding_config_spec must be an EmbeddingConfigSpec"):
        _estimator(tmp_path, embedding_config_spec=np.array([[1, 2], [3, 4]]))


def test_a_warm_start_path_in_bytes_that_are_not_utf8_is_named(tmp_path):
    with pytest.raises(ValueError, match="Argument `ckpt_to_initialize_from` \\(warm_start_from\\) must be a path"):
        _estimator(tmp_path, warm_start_from=b"\xff\xfe")
    assert _estimator(tmp_path, warm_start_from=b"4") is not None  # UTF-8 bytes are a path, as in TensorFlow


@pytest.mark.parametrize("vocabulary", [[[1]], [[1], [1, 2]], [np.array([1])]])
def test_a_vocabulary_list_of_lists_is_refused(vocabulary):
    # It was accepted, with tokens such as [1] (TensorFlow: TypeError, unhashable type).
    with pytest.raises(TypeError, match="vocabulary_list` of categorical_column_with_vocabulary_list must be a flat"):
        tf.feature_column.categorical_column_with_vocabulary_list("v", vocabulary)
