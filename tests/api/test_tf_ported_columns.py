"""TensorFlow's own TPU feature-column tests, ported, plus the attribute values the oracle reported.

Sources: tensorflow/python/tpu/feature_column_v2_test.py and
feature_column_test.py (TensorFlow 2.15). Their graph-mode parts (variable
collections, sessions, scope validation) have no numpy counterpart and are
left out; what a user program can read without a graph is kept. Expected
values are TensorFlow 2.15.1's (run on the oracle venv); where TensorFlow
has a `TensorShape` or `tf.io.VarLenFeature`, the numpy-side equivalent is a
tuple and `feature_columns.VarLenFeature` with a numpy dtype.

Two places differ from TensorFlow's tests on purpose
(docs/stricter_than_tensorflow.md): `combiner='my_combiner'` is refused, so
the "all constructor args" ports use 'sum'; the tensor-core combiner check
happens when the EmbeddingConfigSpec is built, not at the first lookup.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.api.embedding_config_spec import EmbeddingConfigSpec
from tpu_embedding_shim.api.feature_columns import FixedLenFeature, VarLenFeature
from tpu_embedding_shim.api.feature_layers import DenseFeatures
from tpu_embedding_shim.api.lookup_scope import LookupScope
from tpu_embedding_shim.runner.context import TensorCoreColumns, first_positions

fc = tf.feature_column
tpu = tf.tpu.experimental
ADAGRAD = tf.tpu.experimental.AdagradParameters(0.1)
INT64, STRING, FLOAT32 = np.dtype("int64"), np.dtype(np.str_), np.dtype("float32")
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

# The tables of TensorFlow's tests: row i of `EMBEDDING_VALUES` is id i.
EMBEDDING_VALUES = ((1.0, 2.0), (3.0, 5.0), (7.0, 11.0))


def table_initializer(values=EMBEDDING_VALUES):
    """An initializer giving `values`, checking the shape and dtype it is asked for (as TF's tests do)."""

    def init(shape, dtype=np.float32):
        assert tuple(shape) == (len(values), len(values[0]))
        assert np.dtype(dtype) == np.float32
        return np.array(values, np.float32)

    return init


# 7. Attributes: feature_column_v2_test.EmbeddingColumnTestV2 / SharedEmbeddingColumnTestV2 -------------------


def test_embedding_column_defaults():
    categorical = fc.categorical_column_with_identity(key="aaa", num_buckets=3)
    column = tpu.embedding_column(categorical, dimension=2)
    assert column.categorical_column is categorical
    assert (column.dimension, column.combiner, column.name) == (2, "mean", "aaa_embedding")
    assert column.variable_shape == (2,)
    assert column._variable_shape == (2,) and column._var_scope_name == "aaa_embedding"  # feature_column_test
    assert column.parse_example_spec == {"aaa": VarLenFeature(INT64)}


def test_embedding_column_all_constructor_args():
    categorical = fc.categorical_column_with_identity(key="aaa", num_buckets=3)
    column = tpu.embedding_column(categorical, dimension=2, combiner="sum", initializer=lambda: "my_initializer")
    assert column.categorical_column is categorical
    assert (column.dimension, column.combiner, column.name) == (2, "sum", "aaa_embedding")
    assert column.initializer() == "my_initializer"
    assert column.get_initializer()() == "my_initializer"
    assert column.variable_shape == (2,)
    assert column._parse_example_spec == {"aaa": VarLenFeature(INT64)}


def test_embedding_column_deepcopy():
    column = tpu.embedding_column(fc.categorical_column_with_identity(key="aaa", num_buckets=3), dimension=2)
    duplicate = copy.deepcopy(column)
    assert duplicate.dimension == column.dimension
    assert duplicate._max_sequence_length == column._max_sequence_length


def test_shared_embedding_columns_defaults():
    a = fc.categorical_column_with_identity(key="aaa", num_buckets=3)
    b = fc.categorical_column_with_identity(key="bbb", num_buckets=3)
    column_b, column_a = tpu.shared_embedding_columns([b, a], dimension=2)
    assert column_a.categorical_column is a and column_b.categorical_column is b
    for column in (column_a, column_b):
        assert column.get_embedding_table_size() == (3, 2)
        assert column.combiner == "mean"
        assert column.get_initializer() is not None
        assert column.get_embedding_var_name() == "aaa_bbb_shared_embedding"
        assert column.variable_shape == (2,)
    assert column_a.get_initializer() is column_b.get_initializer()  # one table, one initializer
    assert (column_a.name, column_b.name) == ("aaa_shared_embedding", "bbb_shared_embedding")
    assert (column_a.parse_example_spec, column_b.parse_example_spec) == (
        {"aaa": VarLenFeature(INT64)},
        {"bbb": VarLenFeature(INT64)},
    )


def test_shared_embedding_columns_all_constructor_args():
    a = fc.categorical_column_with_identity(key="aaa", num_buckets=3)
    b = fc.categorical_column_with_identity(key="bbb", num_buckets=3)
    column_a, column_b = tpu.shared_embedding_columns(
        [a, b],
        dimension=2,
        combiner="sum",
        initializer=lambda: "my_initializer",
        shared_embedding_collection_name="var_scope_name",
    )
    for column in (column_a, column_b):
        assert column.get_embedding_table_size() == (3, 2)
        assert column.combiner == "sum"
        assert column.get_initializer()() == "my_initializer"
        assert column.get_embedding_var_name() == "var_scope_name"
        assert column.variable_shape == (2,)
    assert (column_a.name, column_b.name) == ("aaa_shared_embedding", "bbb_shared_embedding")


def test_shared_embedding_columns_deepcopy():
    columns = tpu.shared_embedding_columns(
        [fc.categorical_column_with_identity("bbb", 3), fc.categorical_column_with_identity("aaa", 3)], dimension=2
    )
    duplicates = copy.deepcopy(columns)
    assert [c.get_embedding_var_name() for c in duplicates] == [c.get_embedding_var_name() for c in columns]
    assert duplicates[0].shared_embedding_column_creator is duplicates[1].shared_embedding_column_creator


# 7. Attribute values the oracle reported ------------------------------------------------------------------


IDENT = fc.categorical_column_with_identity("ident", 10)
B = fc.categorical_column_with_identity("b", 10)


def _columns():
    """(kind, column): one column of each TPU class, as the oracle built them."""
    return [
        ("plain", tpu.embedding_column(IDENT, 4)),
        (
            "device",
            tpu.embedding_column(IDENT, 4, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3]),
        ),
        ("shared", tpu.shared_embedding_columns([IDENT, B], 4)[0]),
        (
            "shared-device",
            tpu.shared_embedding_columns(
                [IDENT, B], 4, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3]
            )[0],
        ),
    ]


@pytest.mark.parametrize("kind,column", _columns(), ids=[k for k, _ in _columns()])
def test_attributes_every_tpu_column_has(kind, column):
    assert column.variable_shape == (4,)
    assert column.parse_example_spec == {"ident": VarLenFeature(INT64)}
    assert column.parents == [IDENT]
    assert column._is_v2_column is True
    assert (column.combiner, column.get_combiner()) == ("mean", "mean")
    assert column.max_norm is None
    assert column.use_safe_embedding_lookup is True
    assert column.is_categorical_column_weighted() is False
    assert column.get_learning_rate_fn() is None
    assert (column.get_max_sequence_length(), column.is_sequence_column()) == (0, False)
    assert column.get_sequence_length_feature_key_name() == "ident_seq_length_"
    assert column._var_scope_name == column.name


@pytest.mark.parametrize("kind,column", _columns()[:2], ids=["plain", "device"])
def test_non_shared_columns_fix_embedding_column_fields(kind, column):
    assert (column.ckpt_to_load_from, column.tensor_name_in_ckpt, column.trainable) == (None, None, True)
    assert column.get_initializer() is column.initializer
    with pytest.raises(AttributeError):
        column.trainable = False  # TensorFlow's column is a namedtuple: read-only
    assert column.get_config() == {  # the oracle's value, default initializer stddev 1/sqrt(4)
        "categorical_column": {
            "class_name": "IdentityCategoricalColumn",
            "config": {"key": "ident", "number_buckets": 10, "default_value": None},
        },
        "dimension": 4,
        "combiner": "mean",
        "initializer": {
            "class_name": "TruncatedNormal",
            "config": {"mean": 0.0, "stddev": 0.5, "seed": None, "dtype": "float32"},
        },
        "ckpt_to_load_from": None,
        "tensor_name_in_ckpt": None,
        "max_norm": None,
        "trainable": True,
        "use_safe_embedding_lookup": True,
    }
    with pytest.raises(TypeError, match="ckpt_to_load_from"):  # TensorFlow: __new__() got an unexpected keyword
        type(column).from_config(column.get_config())


def test_get_config_serializes_initializers_as_tensorflow_v1_does():
    def my_init(shape, dtype=None):
        return np.zeros(shape, np.float32)

    expected = [  # the oracle's get_config()['initializer'] for tf.compat.v1.*_initializer and a function
        (tf.compat.v1.constant_initializer(2), {"class_name": "Constant", "config": {"value": 2, "dtype": "float32"}}),
        (tf.zeros_initializer(), {"class_name": "Zeros", "config": {"dtype": "float32"}}),
        (
            tf.compat.v1.truncated_normal_initializer(0, 2, seed=1),
            {"class_name": "TruncatedNormal", "config": {"mean": 0, "stddev": 2, "seed": 1, "dtype": "float32"}},
        ),
        (
            tf.random_uniform_initializer(-1, 1, seed=3),
            {"class_name": "RandomUniform", "config": {"minval": -1, "maxval": 1, "seed": 3, "dtype": "float32"}},
        ),
        (my_init, "my_init"),
    ]
    for initializer, config in expected:
        assert tpu.embedding_column(IDENT, 4, initializer=initializer).get_config()["initializer"] == config


@pytest.mark.parametrize("kind,column", _columns()[2:], ids=["shared", "shared-device"])
def test_shared_columns_have_what_tensorflow_s_have(kind, column):
    creator = column.shared_embedding_column_creator
    assert creator.dimension == 4
    assert column.get_initializer() is creator.initializer
    assert column.get_embedding_var_name() == "b_ident_shared_embedding"
    for missing in ("ckpt_to_load_from", "tensor_name_in_ckpt", "trainable"):
        assert not hasattr(column, missing)  # TensorFlow's shared column has none of these
    with pytest.raises(NotImplementedError, match="Must be implemented in subclasses"):
        column.get_config()
    for tf1_name in ("_variable_shape", "_parse_example_spec"):
        with pytest.raises(ValueError, match="SharedEmbeddingColumns are not supported in `linear_model`"):
            getattr(column, tf1_name)


def test_weighted_and_sequence_tpu_columns():
    weighted = fc.weighted_categorical_column(IDENT, "w")
    column = tpu.embedding_column(weighted, 4)
    assert column.is_categorical_column_weighted() is True
    assert column.parse_example_spec == {"ident": VarLenFeature(INT64), "w": VarLenFeature(FLOAT32)}
    assert column.parents == [weighted]
    sequence = fc.sequence_categorical_column_with_vocabulary_list("sv", ["a"])
    seq_column = tpu.embedding_column(sequence, 4, max_sequence_length=3)
    assert seq_column.parse_example_spec == {"sv": VarLenFeature(STRING)}
    assert seq_column.parents == [sequence] and seq_column.variable_shape == (4,)


# 7. Categorical columns: parse_example_spec, parents, get_config / from_config -------------------------------


def _categorical(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\nc\n")
    ints = tmp_path / "ints.txt"
    ints.write_text("7\n8\n9\n")
    identity = fc.categorical_column_with_identity("ident", 10, default_value=3)
    # (column, parse_example_spec, parents, get_config): the oracle's values.
    return [
        (
            identity,
            {"ident": VarLenFeature(INT64)},
            ["ident"],
            {"key": "ident", "number_buckets": 10, "default_value": 3},
        ),
        (
            fc.categorical_column_with_vocabulary_list("v", ["a", "b"], num_oov_buckets=2),
            {"v": VarLenFeature(STRING)},
            ["v"],
            {"key": "v", "vocabulary_list": ("a", "b"), "dtype": "string", "default_value": -1, "num_oov_buckets": 2},
        ),
        (
            fc.categorical_column_with_vocabulary_list("vi", [3, 4]),
            {"vi": VarLenFeature(INT64)},
            ["vi"],
            {"key": "vi", "vocabulary_list": (3, 4), "dtype": "int64", "default_value": -1, "num_oov_buckets": 0},
        ),
        (
            fc.categorical_column_with_vocabulary_list("vi32", [1, 2], dtype=tf.int32),
            {"vi32": VarLenFeature(np.dtype("int32"))},
            ["vi32"],
            {"key": "vi32", "vocabulary_list": (1, 2), "dtype": "int32", "default_value": -1, "num_oov_buckets": 0},
        ),
        (
            fc.categorical_column_with_vocabulary_file("vf", str(vocab)),
            {"vf": VarLenFeature(STRING)},
            ["vf"],
            {
                "key": "vf",
                "vocabulary_file": str(vocab),
                "vocabulary_size": 3,
                "num_oov_buckets": 0,
                "dtype": "string",
                "default_value": -1,
                "file_format": None,
            },
        ),
        (
            fc.categorical_column_with_vocabulary_file("vfi", str(ints), dtype=tf.int64, num_oov_buckets=1),
            {"vfi": VarLenFeature(INT64)},
            ["vfi"],
            {
                "key": "vfi",
                "vocabulary_file": str(ints),
                "vocabulary_size": 3,
                "num_oov_buckets": 1,
                "dtype": "int64",
                "default_value": -1,
                "file_format": None,
            },
        ),
        (
            fc.weighted_categorical_column(identity, "w", dtype=tf.int32),
            {"ident": VarLenFeature(INT64), "w": VarLenFeature(np.dtype("int32"))},
            [identity, "w"],
            {
                "categorical_column": {
                    "class_name": "IdentityCategoricalColumn",
                    "config": {"key": "ident", "number_buckets": 10, "default_value": 3},
                },
                "weight_feature_key": "w",
                "dtype": "int32",
            },
        ),
        (
            fc.sequence_categorical_column_with_identity("s", 10),
            {"s": VarLenFeature(INT64)},
            [fc.categorical_column_with_identity("s", 10)],
            {
                "categorical_column": {
                    "class_name": "IdentityCategoricalColumn",
                    "config": {"key": "s", "number_buckets": 10, "default_value": None},
                }
            },
        ),
        (
            fc.categorical_column_with_hash_bucket("h", 5, dtype=tf.int64),
            {"h": VarLenFeature(INT64)},
            ["h"],
            {"key": "h", "hash_bucket_size": 5, "dtype": "int64"},
        ),
    ]


def test_categorical_columns_answer_as_tensorflow_does(tmp_path):
    for column, spec, parents, config in _categorical(tmp_path):
        assert column.parse_example_spec == spec, column
        assert column.parents == parents, column
        assert column._is_v2_column is True
        assert column.get_config() == config, column
        assert type(column).from_config(column.get_config()) == column, column


def test_vocabulary_file_default_value_is_minus_one_as_in_tensorflow(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\nc\n")
    assert fc.categorical_column_with_vocabulary_file("vf", str(vocab)).default_value == -1
    assert tf.compat.v1.feature_column.categorical_column_with_vocabulary_file("vf", str(vocab)).default_value == -1
    assert fc.categorical_column_with_vocabulary_file("vf", str(vocab), default_value=2).default_value == 2


def test_weight_key_equal_to_the_id_key_has_no_parse_spec():
    weighted = fc.weighted_categorical_column(IDENT, "ident")
    with pytest.raises(ValueError, match="Parse config .* already exists for ident"):
        weighted.parse_example_spec


def test_from_config_refuses_what_the_constructor_refuses():
    with pytest.raises(ValueError, match="num_buckets"):
        type(IDENT).from_config({"key": "ident", "number_buckets": 0, "default_value": None})
    with pytest.raises(TypeError, match="config"):
        type(IDENT).from_config("ident")
    with pytest.raises(ValueError, match="categorical_column"):
        fc.weighted_categorical_column(IDENT, "w").from_config(
            {"categorical_column": {"class_name": "Nope", "config": {}}, "weight_feature_key": "w"}
        )


def test_other_columns_parse_specs_and_parents():
    numeric = fc.numeric_column("n", shape=(2,), default_value=1.0)
    assert numeric.parse_example_spec == {"n": FixedLenFeature((2,), FLOAT32, (1.0, 1.0))}
    assert numeric.parents == ["n"] and numeric.variable_shape == (2,)
    assert fc.numeric_column("n").parse_example_spec == {"n": FixedLenFeature((1,), FLOAT32, None)}
    bucketized = fc.bucketized_column(fc.numeric_column("n"), [1.0, 2.0])
    assert bucketized.parse_example_spec == {"n": FixedLenFeature((1,), FLOAT32, None)}
    assert bucketized.parents == [fc.numeric_column("n")]
    crossed = fc.crossed_column(["a", IDENT], 5)
    assert crossed.parse_example_spec == {"a": VarLenFeature(STRING), "ident": VarLenFeature(INT64)}
    assert crossed.parents == ["a", IDENT]
    assert fc.categorical_column_with_hash_bucket("h", 5).parse_example_spec == {"h": VarLenFeature(STRING)}
    plain = fc.embedding_column(IDENT, 3)
    assert plain.parse_example_spec == {"ident": VarLenFeature(INT64)} and plain.variable_shape == (3,)


@SETTINGS
@given(
    key=st.text("abcxyz_", min_size=1, max_size=6),
    buckets=st.integers(1, 50),
    dimension=st.integers(1, 16),
    weighted=st.booleans(),
    sequence=st.booleans(),
)
def test_tpu_column_answers_follow_its_categorical_column(key, buckets, dimension, weighted, sequence):
    """For any identity-based column: TensorFlow's rules tie the TPU column's answers to its categorical column."""
    if sequence:
        categorical = fc.sequence_categorical_column_with_identity(key, buckets)
        column = tpu.embedding_column(categorical, dimension, max_sequence_length=2)
    else:
        categorical = fc.categorical_column_with_identity(key, buckets)
        if weighted:
            categorical = fc.weighted_categorical_column(categorical, key + "_w")
        column = tpu.embedding_column(categorical, dimension)
    assert column.variable_shape == (dimension,)
    assert column.parse_example_spec == categorical.parse_example_spec
    assert set(column.parse_example_spec) == ({key, key + "_w"} if weighted and not sequence else {key})
    assert column.parents == [categorical]
    assert type(categorical).from_config(categorical.get_config()) == categorical


# 8. Tensor-core columns: DeviceSpecificEmbeddingColumnTestV2 --------------------------------------------------


def _tensor_core_lookup(columns, features):
    """The activations of tensor-core `columns` read through DenseFeatures, as in a TPUEstimator step."""
    tensor_core = TensorCoreColumns(columns)
    state = {}
    tensor_core.initialize(state, np.random.default_rng(0))
    activations, _ = tensor_core.lookup(features, state)
    with LookupScope(activations, training=False, features=features):
        return DenseFeatures(columns)(features)


def _device_columns(shared, combiner, initializer, shape=(None, 3)):
    categorical = fc.categorical_column_with_identity(key="inp", num_buckets=3)
    kwargs = dict(
        dimension=2,
        initializer=initializer,
        combiner=combiner,
        embedding_lookup_device="tpu_tensor_core",
        tensor_core_shape=list(shape),
    )
    if shared:
        return tpu.shared_embedding_columns([categorical], **kwargs)
    return [tpu.embedding_column(categorical, **kwargs)]


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "not_shared"])
@pytest.mark.parametrize("combiner", ["mean", "sum", "sqrtn"])
def test_dense_embedding_lookup(shared, combiner):
    # example 0: ids [2]; example 1: ids [0, 1, 3], id 3 at position 4 (past tensor_core_shape[1] = 3)
    features = {
        "inp": tf.SparseTensor(indices=((0, 0), (1, 0), (1, 1), (1, 4)), values=(2, 0, 1, 3), dense_shape=(2, 5))
    }
    columns = _device_columns(shared, combiner, table_initializer())
    if combiner == "sqrtn":  # TensorFlow: ValueError when the layer is built; here, when the spec is
        with pytest.raises(ValueError, match="Dense TPU Embedding does not support combiner"):
            EmbeddingConfigSpec(feature_columns=columns, optimization_parameters=ADAGRAD)
        return
    EmbeddingConfigSpec(feature_columns=columns, optimization_parameters=ADAGRAD)
    expected = {"mean": [[7.0, 11.0], [2.0, 3.5]], "sum": [[7.0, 11.0], [4.0, 7.0]]}[combiner]
    np.testing.assert_array_equal(_tensor_core_lookup(columns, features), expected)


def test_empty_row():
    features = {"inp": tf.SparseTensor(indices=((1, 0), (1, 1), (1, 4)), values=(0, 1, 3), dense_shape=(2, 5))}
    columns = _device_columns(False, "mean", table_initializer())
    np.testing.assert_array_equal(_tensor_core_lookup(columns, features), [[0.0, 0.0], [2.0, 3.5]])


def test_error_dense_shape_invalid():
    categorical = fc.categorical_column_with_identity(key="inp", num_buckets=5)
    with pytest.raises(ValueError, match="tensor_core_shape"):
        tpu.shared_embedding_columns([categorical], dimension=20, tensor_core_shape=[None, 20, 15])


@pytest.mark.parametrize("shape", [[None, None], [None, -1], [4, None]])
def test_kept_positions_must_be_a_number(shape):
    """TensorFlow accepts these and fails at the first lookup (ValueError for None, InvalidArgumentError for -1)."""
    with pytest.raises(ValueError, match="tensor_core_shape"):
        tpu.embedding_column(IDENT, 2, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=shape)


def test_weighted_tensor_core_column_is_refused():
    column = tpu.embedding_column(
        fc.weighted_categorical_column(IDENT, "w"),
        2,
        embedding_lookup_device="tpu_tensor_core",
        tensor_core_shape=[None, 2],
    )
    with pytest.raises(ValueError, match="weighted_categorical_column"):
        EmbeddingConfigSpec(feature_columns=[column], optimization_parameters=ADAGRAD)


def test_every_input_form_keeps_the_same_positions():
    """Position = column index of a sparse or dense input, index inside a ragged row; -1 is dense padding."""
    columns = _device_columns(False, "sum", table_initializer(), shape=(None, 2))
    forms = [
        np.array([[2, -1, 1], [-1, 0, 1]]),  # position 2 of each row is dropped
        tf.SparseTensor(indices=((1, 2), (0, 0), (1, 1), (0, 2)), values=(1, 2, 0, 1), dense_shape=(2, 3)),
        [[2, -1, 1], [-1, 0, 1]],
    ]
    expected = [[7.0, 11.0], [1.0, 2.0]]
    for ids in forms:
        np.testing.assert_array_equal(_tensor_core_lookup(columns, {"inp": ids}), expected)
    ragged = [[2, 1, 1], [0]]  # ragged: the first two ids of each row
    for ids in (ragged, tf.RaggedTensor.from_row_lengths([2, 1, 1, 0], [3, 1])):
        np.testing.assert_array_equal(_tensor_core_lookup(columns, {"inp": ids}), [[10.0, 16.0], [1.0, 2.0]])


def tf_dense_lookup(table, rows, kept, combiner):
    """TensorFlow's formula: pad_sparse_embedding_lookup_indices, then sparse_embedding_aggregate_slice."""
    out = []
    for row in rows:
        ids = list(row[:kept])
        total = np.sum([table[i] for i in ids], axis=0) if ids else np.zeros(table.shape[1])
        out.append(total / max(len(ids), 1) if combiner == "mean" else total)
    return np.array(out, np.float32)


@SETTINGS
@given(
    rows=st.lists(st.lists(st.integers(0, 5), max_size=7), min_size=1, max_size=6),
    kept=st.integers(1, 8),
    combiner=st.sampled_from(["sum", "mean"]),
)
def test_lookup_and_gradient_see_only_the_kept_positions(rows, kept, combiner):
    table = np.arange(12, dtype=np.float32).reshape(6, 2) ** 1.5
    column = tpu.embedding_column(
        fc.categorical_column_with_identity("inp", 6),
        2,
        combiner=combiner,
        initializer=lambda shape, dtype=np.float32: table.copy(),
        embedding_lookup_device="tpu_tensor_core",
        tensor_core_shape=[None, kept],
    )
    tensor_core = TensorCoreColumns([column])
    state = {}
    tensor_core.initialize(state, np.random.default_rng(0))
    activations, batches = tensor_core.lookup({"inp": rows}, state)
    np.testing.assert_allclose(activations["inp"], tf_dense_lookup(table, rows, kept, combiner), rtol=1e-6)
    gradient = tensor_core.gradients(batches, {"inp": np.ones((len(rows), 2), np.float32)})["tbl_inp"]
    touched = {i for row in rows for i in row[:kept]}
    assert {int(i) for i in np.flatnonzero(gradient[:, 0])} == touched


def test_first_positions_leaves_other_forms_alone():
    assert first_positions(np.array([1, 2, 3]), 1).tolist() == [1, 2, 3]  # one id per example
    assert first_positions([1, 2], 1) == [1, 2]
