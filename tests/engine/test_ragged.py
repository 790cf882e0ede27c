"""to_ragged: every accepted input form, and every rejected one with its message."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from tpu_embedding_shim.engine.ragged import Ragged, hash_bucket, to_ragged
from tpu_embedding_shim.spec import FeatureSpec


class Sparse(NamedTuple):
    indices: object
    values: object
    dense_shape: object


class RaggedT(NamedTuple):
    values: object
    row_splits: object


IDENT = FeatureSpec(name="movie", table="t", num_buckets=10)
IDENT_DEFAULT = FeatureSpec(name="movie", table="t", num_buckets=10, default_value=0)
SEQ = FeatureSpec(name="clicks", table="t", num_buckets=10, max_sequence_length=3)


def vocabulary_feature(name, vocabulary, num_buckets, **kwargs):
    """A `vocabulary_list` feature of table `t`."""
    return FeatureSpec(
        name=name, table="t", num_buckets=num_buckets, id_source="vocabulary_list", vocabulary=vocabulary, **kwargs
    )


WORDS = vocabulary_feature("word", ("a", "b", "c"), 5, num_oov_buckets=2)
WORDS_NO_OOV = vocabulary_feature("word", ("a", "b", "c"), 3)
WORDS_DEFAULT = vocabulary_feature("word", ("a", "b", "c"), 3, default_value=1)
INT_VOCAB = vocabulary_feature("zip", (10, 20, 30), 3)
INT_VOCAB_OOV = vocabulary_feature("zip", (10, 20, 30), 5, num_oov_buckets=2)

# Buckets of OOV tokens, from TF's rule: len(vocab) + fingerprint64(token) % num_oov_buckets.
ZZ = 3 + hash_bucket("zz", 2)
N99 = 3 + hash_bucket(b"99", 2)


def R(values, row_splits, positions, weights=None):
    return dict(values=values, row_splits=row_splits, positions=positions, weights=weights)


# (name, ids, weights, feature, expected)
VALID = [
    ("dense_rank1", [3, 7, 5], None, IDENT, R([3, 7, 5], [0, 1, 2, 3], [0, 0, 0])),
    ("dense_rank1_padding", np.array([3, -1, 5]), None, IDENT, R([3, 5], [0, 1, 1, 2], [0, 0])),
    ("dense_rank2", [[1, 2], [3, 4]], None, IDENT, R([1, 2, 3, 4], [0, 2, 4], [0, 1, 0, 1])),
    ("dense_padding_keeps_positions", [[-1, 2], [3, -5]], None, IDENT, R([2, 3], [0, 1, 2], [1, 0])),
    (
        "dense_weights_dropped_with_padding",
        [[1, -1], [-1, 4]],
        [[0.5, 9.0], [9.0, 2.0]],
        IDENT,
        R([1, 4], [0, 1, 2], [0, 1], [0.5, 2.0]),
    ),
    ("dense_int32", np.array([[1, 2]], dtype=np.int32), None, IDENT, R([1, 2], [0, 2], [0, 1])),
    ("dense_uint8", np.array([9], dtype=np.uint8), None, IDENT, R([9], [0, 1], [0])),
    ("dense_int_weights", [[1, 2]], [[2, 3]], IDENT, R([1, 2], [0, 2], [0, 1], [2.0, 3.0])),
    ("empty_list", [], None, IDENT, R([], [0], [])),
    ("empty_rows_dense", [[], []], None, IDENT, R([], [0, 0, 0], [])),
    ("empty_columns_array", np.zeros((3, 0), np.int64), None, IDENT, R([], [0, 0, 0, 0], [])),
    (
        "ragged_lists",
        [[1, 2], [3], []],
        [[0.5, 1.0], [2.0], []],
        IDENT,
        R([1, 2, 3], [0, 2, 3, 3], [0, 1, 0], [0.5, 1.0, 2.0]),
    ),
    ("ragged_lists_negative_dropped", [[1, -1, 2], [-3]], None, IDENT, R([1, 2], [0, 2, 2], [0, 2])),
    (
        "ragged_tensor",
        RaggedT(np.array([4, 5, 6]), np.array([0, 0, 3])),
        None,
        IDENT,
        R([4, 5, 6], [0, 0, 3], [0, 1, 2]),
    ),
    (
        "ragged_tensor_weights",
        RaggedT([4, -1, 6], [0, 2, 3]),
        RaggedT([1.0, 2.0, 3.0], [0, 2, 3]),
        IDENT,
        R([4, 6], [0, 1, 2], [0, 0], [1.0, 3.0]),
    ),
    ("sparse", Sparse([[0, 0], [0, 2], [2, 1]], [1, 2, 3], [3, 4]), None, IDENT, R([1, 2, 3], [0, 2, 2, 3], [0, 2, 1])),
    (
        "sparse_unsorted_is_reordered",
        Sparse([[1, 2], [0, 3], [0, 0]], [7, 8, 9], [2, 4]),
        Sparse([[1, 2], [0, 3], [0, 0]], [0.7, 0.8, 0.9], [2, 4]),
        IDENT,
        R([9, 8, 7], [0, 2, 3], [0, 3, 2], [0.9, 0.8, 0.7]),
    ),
    (
        "sparse_negative_dropped",
        Sparse([[0, 0], [0, 1], [1, 0]], [-1, 2, -7], [3, 2]),
        None,
        IDENT,
        R([2], [0, 1, 1, 1], [1]),
    ),
    (
        "sparse_empty",
        Sparse(np.zeros((0, 2), np.int64), np.zeros(0, np.int64), [2, 5]),
        None,
        IDENT,
        R([], [0, 0, 0], []),
    ),
    ("sparse_repeated_index_pooled", Sparse([[0, 0], [0, 0]], [1, 2], [1, 1]), None, IDENT, R([1, 2], [0, 2], [0, 0])),
    # Identity with default_value: out-of-range values become the default; dense padding stays padding.
    ("identity_default_dense", [[1, -2], [30, 4]], None, IDENT_DEFAULT, R([1, 0, 4], [0, 1, 3], [0, 0, 1])),
    ("identity_default_ragged", [[1, -2], [30]], None, IDENT_DEFAULT, R([1, 0, 0], [0, 2, 3], [0, 1, 0])),
    (
        "identity_default_sparse",
        Sparse([[0, 0], [0, 1]], [-1, 12], [1, 2]),
        None,
        IDENT_DEFAULT,
        R([0, 0], [0, 2], [0, 1]),
    ),
    (
        "identity_default_uint64_huge",
        np.array([2**64 - 1, 3], dtype=np.uint64),
        None,
        IDENT_DEFAULT,
        R([0, 3], [0, 1, 2], [0, 0]),
    ),
    # Vocabularies.
    ("vocab_strings", [["a", "c"], ["b", "a"]], None, WORDS, R([0, 2, 1, 0], [0, 2, 4], [0, 1, 0, 1])),
    ("vocab_bytes", [[b"a", b"c"]], None, WORDS, R([0, 2], [0, 2], [0, 1])),
    ("vocab_oov_bucket", [["a", "zz"]], None, WORDS, R([0, ZZ], [0, 2], [0, 1])),
    ("vocab_dense_empty_string_is_padding", [["a", ""], ["", "c"]], None, WORDS, R([0, 2], [0, 1, 2], [0, 1])),
    (
        "vocab_dense_bytes_padding",
        np.array([[b"a", b""], [b"c", b"b"]]),
        None,
        WORDS,
        R([0, 2, 1], [0, 1, 3], [0, 0, 1]),
    ),
    (
        "vocab_sparse_empty_string_is_a_token",
        Sparse([[0, 0]], [""], [1, 1]),
        None,
        WORDS,
        R([3 + hash_bucket("", 2)], [0, 1], [0]),
    ),
    ("vocab_unknown_dropped", [["a", "zz"], ["q"]], None, WORDS_NO_OOV, R([0], [0, 1, 1], [0])),
    ("vocab_unknown_default", [["a", "zz"]], None, WORDS_DEFAULT, R([0, 1], [0, 2], [0, 1])),
    (
        "vocab_ragged_tensor_strings",
        RaggedT(np.array(["c", "b"]), [0, 1, 2]),
        None,
        WORDS,
        R([2, 1], [0, 1, 2], [0, 0]),
    ),
    ("vocab_empty_rows", [[], []], [[], []], WORDS, R([], [0, 0, 0], [], [])),
    ("vocab_object_array", np.array(["b", "c"], dtype=object), None, WORDS, R([1, 2], [0, 1, 2], [0, 0])),
    ("int_vocab", [[10, 30], [20, -1]], None, INT_VOCAB, R([0, 2, 1], [0, 2, 3], [0, 1, 0])),
    ("int_vocab_unknown_dropped", RaggedT([10, 99], [0, 2]), None, INT_VOCAB, R([0], [0, 1], [0])),
    (
        "int_vocab_oov_hashes_decimal_string",
        RaggedT([10, 99], [0, 2]),
        None,
        INT_VOCAB_OOV,
        R([0, N99], [0, 2], [0, 1]),
    ),
]


@pytest.mark.parametrize("name,ids,weights,feature,expected", VALID, ids=[v[0] for v in VALID])
def test_valid_inputs(name, ids, weights, feature, expected):
    r = to_ragged(ids, weights, feature=feature)
    assert isinstance(r, Ragged)
    assert r.values.dtype == np.int64 and r.row_splits.dtype == np.int64 and r.row_positions().dtype == np.int64
    assert r.values.tolist() == expected["values"]
    assert r.row_splits.tolist() == expected["row_splits"]
    assert r.row_positions().tolist() == expected["positions"]
    assert r.batch_size == len(expected["row_splits"]) - 1
    if expected["weights"] is None:
        assert r.weights is None
    else:
        assert r.weights.dtype == np.float32
        np.testing.assert_allclose(r.weights, expected["weights"])
    assert ((r.values >= 0) & (r.values < feature.num_buckets)).all()


# (name, ids, weights, feature, error type, fragments that must be in the message)
INVALID = [
    ("id_too_big_dense", [[1, 12]], None, IDENT, ValueError, ["'movie'", "12", "[0, 10)"]),
    ("id_too_big_sparse", Sparse([[0, 0]], [10], [1, 1]), None, IDENT, ValueError, ["'movie'", "10", "[0, 10)"]),
    ("id_too_big_ragged", RaggedT([3, 11], [0, 1, 2]), None, IDENT, ValueError, ["'movie'", "11", "example 1"]),
    (
        "id_too_big_uint64",
        np.array([2**63 + 5], dtype=np.uint64),
        None,
        IDENT,
        ValueError,
        ["'movie'", str(2**63 + 5), "[0, 10)"],
    ),
    ("float_ids", [1.0, 2.0], None, IDENT, TypeError, ["'movie'", "integers", "float64", "astype"]),
    ("bool_ids", [True], None, IDENT, TypeError, ["'movie'", "bool"]),
    ("string_ids_for_identity", ["a"], None, IDENT, TypeError, ["'movie'", "identity", "vocabulary"]),
    ("mixed_object_ids", np.array([1, "a"], dtype=object), None, IDENT, TypeError, ["'movie'"]),
    ("int_ids_for_string_vocab", [1], None, WORDS, TypeError, ["'word'", "strings"]),
    ("string_ids_for_int_vocab", ["10"], None, INT_VOCAB, TypeError, ["'zip'", "integers"]),
    ("float_ids_for_vocab", [1.5], None, INT_VOCAB, TypeError, ["'zip'", "tokens"]),
    ("rank3_dense", np.zeros((2, 2, 2), int), None, IDENT, ValueError, ["'movie'", "(2, 2, 2)"]),
    ("scalars_and_lists", [[1], 2], None, IDENT, ValueError, ["'movie'", "mix"]),
    ("dense_inhomogeneous", [[1, 2], [3, [4, 5]]], None, IDENT, ValueError, ["'movie'", "rectangular"]),
    ("nested_ragged_rows", [[[1]], [2, 3]], None, IDENT, ValueError, ["'movie'", "flat"]),
    ("dense_weights_shape", [1, 2], [1.0], IDENT, ValueError, ["'movie'", "weights", "(2,)", "(1,)"]),
    ("dense_ids_sparse_weights", [1, 2], Sparse([[0, 0]], [1.0], [2, 1]), IDENT, ValueError, ["'movie'", "weights"]),
    ("ragged_weights_lengths", [[1], [2, 3]], [[1.0], [2.0]], IDENT, ValueError, ["'movie'", "row lengths"]),
    ("ragged_weights_not_list", [[1], [2, 3]], np.array([1.0, 2.0, 3.0]), IDENT, ValueError, ["'movie'", "weights"]),
    (
        "sparse_weights_other_indices",
        Sparse([[0, 0], [0, 1]], [1, 2], [1, 2]),
        Sparse([[0, 0], [0, 2]], [1.0, 1.0], [1, 3]),
        IDENT,
        ValueError,
        ["'movie'", "indices"],
    ),
    ("sparse_weights_dense", Sparse([[0, 0]], [1], [1, 1]), [1.0], IDENT, ValueError, ["'movie'", "sparse"]),
    (
        "ragged_weights_other_splits",
        RaggedT([1, 2], [0, 1, 2]),
        RaggedT([1.0, 2.0], [0, 2, 2]),
        IDENT,
        ValueError,
        ["'movie'", "row_splits"],
    ),
    ("ragged_tensor_weights_dense", RaggedT([1, 2], [0, 1, 2]), [1.0, 2.0], IDENT, ValueError, ["'movie'", "ragged"]),
    ("string_weights", [1, 2], ["a", "b"], IDENT, TypeError, ["'movie'", "weights", "numbers"]),
    ("bool_weights", [1, 2], [True, False], IDENT, TypeError, ["'movie'", "weights"]),
    ("sparse_rank3", Sparse([[0, 0, 0]], [1], [1, 1, 1]), None, IDENT, ValueError, ["'movie'", "rank 2"]),
    (
        "sparse_index_outside_shape",
        Sparse([[3, 0]], [1], [2, 2]),
        None,
        IDENT,
        ValueError,
        ["'movie'", "[3, 0]", "dense_shape"],
    ),
    ("sparse_negative_index", Sparse([[0, -1]], [1], [2, 2]), None, IDENT, ValueError, ["'movie'", "[0, -1]"]),
    (
        "sparse_length_mismatch",
        Sparse([[0, 0], [0, 1]], [1], [1, 2]),
        None,
        IDENT,
        ValueError,
        ["'movie'", "2 indices", "1 values"],
    ),
    ("sparse_float_indices", Sparse([[0.0, 0.0]], [1], [1, 1]), None, IDENT, ValueError, ["'movie'", "[N, 2]"]),
    (
        "sequence_repeated_position",
        Sparse([[0, 1], [0, 1]], [1, 2], [1, 3]),
        None,
        SEQ,
        ValueError,
        ["'clicks'", "[0, 1]", "once"],
    ),
    ("ragged_splits_bad", RaggedT([1, 2], [0, 3]), None, IDENT, ValueError, ["'movie'", "row_splits"]),
    ("ragged_splits_decreasing", RaggedT([1, 2], [0, 2, 1, 2]), None, IDENT, ValueError, ["'movie'", "non-decreasing"]),
    ("ragged_rank2", RaggedT(RaggedT([1], [0, 1]), [0, 1]), None, IDENT, ValueError, ["'movie'", "one ragged"]),
]


@pytest.mark.parametrize("name,ids,weights,feature,error,fragments", INVALID, ids=[v[0] for v in INVALID])
def test_invalid_inputs(name, ids, weights, feature, error, fragments):
    with pytest.raises(error) as info:
        to_ragged(ids, weights, feature=feature)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_feature_must_be_a_feature_spec():
    with pytest.raises(TypeError, match="`feature`"):
        to_ragged([1], feature="movie")


def test_out_of_range_message_is_tf_like_and_helpful():
    with pytest.raises(ValueError) as info:
        to_ragged([[1, 2], [3, 10]], feature=IDENT)
    assert str(info.value).startswith("Feature 'movie': id 10 (example 1) is out of range [0, 10).")
    assert "default_value" in str(info.value)


def test_weights_and_ids_of_tensorflow_like_objects_with_extra_attributes():
    class SparseTensorValue:  # like tf.compat.v1.SparseTensorValue, with numpy members
        def __init__(self, indices, values, dense_shape):
            self.indices, self.values, self.dense_shape = (np.asarray(x) for x in (indices, values, dense_shape))
            self.dtype = self.values.dtype

    ids = SparseTensorValue([[0, 1], [1, 0]], [4, 5], [2, 2])
    w = SparseTensorValue([[0, 1], [1, 0]], [0.25, 4.0], [2, 2])
    r = to_ragged(ids, w, feature=IDENT)
    assert r.values.tolist() == [4, 5] and r.weights.tolist() == [0.25, 4.0]


def test_input_arrays_are_not_modified():
    ids = np.array([[3, 1], [2, -1]])
    idx = np.array([[1, 0], [0, 0]])
    before = ids.copy(), idx.copy()
    to_ragged(ids, feature=IDENT)
    to_ragged(Sparse(idx, np.array([1, 2]), [2, 1]), feature=IDENT)
    np.testing.assert_array_equal(ids, before[0])
    np.testing.assert_array_equal(idx, before[1])


def test_ragged_helpers():
    r = to_ragged([[1, 2], [], [3]], [[1.0, 2.0], [], [3.0]], feature=IDENT)
    assert r.row_lengths().tolist() == [2, 0, 1]
    assert r.row_ids().tolist() == [0, 0, 2]
    assert r.num_values == 3
    assert to_ragged([[1], [2]], feature=IDENT).weights_or_ones().tolist() == [1.0, 1.0]


def test_ragged_rejects_inconsistent_shapes():
    with pytest.raises(ValueError, match="row_splits"):
        Ragged(values=np.array([1, 2]), row_splits=np.array([0, 1]), weights=None, positions=np.array([0, 0]))
    with pytest.raises(ValueError, match="positions"):
        Ragged(values=np.array([1]), row_splits=np.array([0, 1]), weights=None, positions=np.array([0, 1]))


def test_vocabulary_with_mixed_token_types_is_rejected():
    f = vocabulary_feature("mixed", ("a", 1), 2)
    with pytest.raises(TypeError, match="'mixed'.*only strings or only ints"):
        to_ragged(["a"], feature=f)


def test_vocabulary_file_feature_maps_like_a_list():
    f = FeatureSpec(
        name="city",
        table="t",
        num_buckets=4,
        id_source="vocabulary_file",
        vocabulary=("paris", "rome", "oslo"),
        vocabulary_file="cities.txt",
        num_oov_buckets=1,
    )
    r = to_ragged([["oslo", "paris", "lima"]], feature=f)
    assert r.values.tolist() == [2, 0, 3]  # one OOV bucket: every unknown token goes to id 3


def test_oov_bucket_is_stable_and_in_range():
    tokens = [f"tok{i}" for i in range(200)]
    r = to_ragged([tokens], feature=WORDS)
    assert set(r.values.tolist()) == {3, 4}  # both buckets are used
    again = to_ragged([tokens], feature=WORDS)
    np.testing.assert_array_equal(r.values, again.values)
