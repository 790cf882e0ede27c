"""DenseFeatures, input_layer, SequenceFeatures: TensorFlow's order, rules, errors; gradient routing."""

import pickle

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import feature_layers
from tpu_embedding_shim.api.lookup_scope import EmbeddingActivations, LookupScope
from tpu_embedding_shim.engine.engine import Engine

V = 10


def identity(key):
    return tf.feature_column.categorical_column_with_identity(key, V)


def column(key, dim=2, value=None):
    init = tf.constant_initializer(value) if value is not None else None
    return tf.tpu.experimental.embedding_column(identity(key), dim, initializer=init)


def seq_column(key, length=3, value=1.0):
    cat = tf.feature_column.sequence_categorical_column_with_identity(key, V)
    return tf.tpu.experimental.embedding_column(
        cat, 2, max_sequence_length=length, initializer=tf.constant_initializer(value)
    )


def engine_for(cols):
    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=cols, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
    )
    return Engine(spec.to_spec())


FEATURES = {
    "b": np.array([[1], [2]]),
    "a": np.array([[3], [-1]]),
    "s": np.array([[1, 2, -1], [4, -1, -1]]),
    "t": np.array([[5, 6, -1], [7, -1, -1]]),
    "x": np.array([[0.5], [1.5]]),
}


def test_dense_features_sorts_columns_by_name_and_mixes_numeric():
    cols = [column("b", 2, 2.0), column("a", 3, 1.0)]
    numeric = tf.feature_column.numeric_column("x")
    with LookupScope.from_engine(engine_for(cols), FEATURES):
        out_dict = {}
        net = tf.keras.layers.DenseFeatures(cols + [numeric])(FEATURES, cols_to_output_tensors=out_dict)
    # a_embedding (3), b_embedding (2), x (1)
    assert net.shape == (2, 6) and net.dtype == np.float32
    np.testing.assert_array_equal(net, [[1, 1, 1, 2, 2, 0.5], [0, 0, 0, 2, 2, 1.5]])
    np.testing.assert_array_equal(out_dict[cols[0]], [[2, 2], [2, 2]])


def test_input_layer_equals_dense_features():
    cols = [column("b", 2, 2.0), column("a", 3, 1.0)]
    with LookupScope.from_engine(engine_for(cols), FEATURES):
        a = tf.compat.v1.feature_column.input_layer(FEATURES, cols)
        b = tf.keras.layers.DenseFeatures(cols)(FEATURES)
    np.testing.assert_array_equal(a, b)


def test_sequence_features_shapes_lengths_and_padding():
    cols = [seq_column("t", value=2.0), seq_column("s", value=1.0)]
    features = dict(FEATURES, t=np.array([[5, 6, -1], [7, -1, -1]]))
    with LookupScope.from_engine(engine_for(cols), features):
        seq, lengths = tf.keras.experimental.SequenceFeatures(cols)(features)
    assert isinstance(seq, EmbeddingActivations) and seq.shape == (2, 3, 4)
    assert lengths.tolist() == [2, 1]
    np.testing.assert_array_equal(seq[0, :, :2], [[1, 1], [1, 1], [0, 0]])  # s first (sorted), padded
    np.testing.assert_array_equal(seq[0, :, 2:], [[2, 2], [2, 2], [0, 0]])


def test_sequence_features_lengths_must_agree():
    cols = [seq_column("s"), seq_column("t")]
    features = dict(FEATURES, t=np.array([[5, -1, -1], [7, -1, -1]]))
    with (
        LookupScope.from_engine(engine_for(cols), features),
        pytest.raises(ValueError, match="sequence lengths differ"),
    ):
        tf.keras.experimental.SequenceFeatures(cols)(features)


def test_layer_output_is_hashable_and_derived_arrays_are_plain():
    cols = [column("a"), column("b")]
    with LookupScope.from_engine(engine_for(cols), FEATURES) as scope:
        net = tf.keras.layers.DenseFeatures(cols)(FEATURES)
    assert {net: 1}[net] == 1
    for derived in (
        net * 2,
        net @ np.ones((4, 1)),
        net[:, :2],
        np.tanh(net),
        net.reshape(-1),
        net.T,
        np.concatenate([net, net], axis=1),
        net.sum(axis=0),
        net.astype(np.float64),
        net.copy(),
    ):
        assert type(derived) is np.ndarray
    with pytest.raises(ValueError, match="read-only"):
        net[0, 0] = 5.0
    assert type(pickle.loads(pickle.dumps(net))) is np.ndarray
    assert scope.owns(net) and not scope.owns(net * 1)


def test_split_gradients_routes_slices_and_sums_repeats():
    cols = [column("b", 2), column("a", 3)]
    numeric = tf.feature_column.numeric_column("x")
    with LookupScope.from_engine(engine_for(cols), FEATURES) as scope:
        net = tf.keras.layers.DenseFeatures(cols + [numeric])(FEATURES)
        other = tf.compat.v1.feature_column.input_layer(FEATURES, [cols[0]])
    grad = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = scope.split_gradients({net: grad, other: np.ones((2, 2)), "a": np.ones((2, 3)), "ignored_none": None})
    np.testing.assert_array_equal(out["a"], grad[:, :3] + 1)
    np.testing.assert_array_equal(out["b"], grad[:, 3:5] + 1)
    assert set(out) == {"a", "b"}  # numeric slice dropped
    with pytest.raises(ValueError, match="did not look up"):
        scope.split_gradients({"nope": np.ones((2, 2))})
    with pytest.raises(TypeError, match="must be a dict"):
        scope.split_gradients([grad])


def test_one_column_output_and_a_single_gradient_are_not_copied():
    cols = [column("a", 3, 1.0)]
    with LookupScope.from_engine(engine_for(cols), FEATURES) as scope:
        net = tf.keras.layers.DenseFeatures(cols)(FEATURES)
    assert np.shares_memory(net, scope.activations["a"]) and not net.flags.writeable
    np.testing.assert_array_equal(net, [[1, 1, 1], [0, 0, 0]])
    grad = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.shares_memory(scope.split_gradients({net: grad})["a"], grad)
    summed = scope.split_gradients({net: grad, "a": grad})["a"]  # two gradients: their sum, a new array
    np.testing.assert_array_equal(summed, 2 * np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(grad, np.arange(6).reshape(2, 3))


def test_layers_check_a_column_list_once(monkeypatch):
    cols = [column("b", 2), column("a", 3)]
    checked = []
    normalize = feature_layers.normalize_feature_columns
    monkeypatch.setattr(feature_layers, "normalize_feature_columns", lambda c: checked.append(c) or normalize(c))
    with LookupScope.from_engine(engine_for(cols), FEATURES):
        first, second = tf.keras.layers.DenseFeatures(cols), tf.keras.layers.DenseFeatures(tuple(cols))
        outputs = [tf.compat.v1.feature_column.input_layer(FEATURES, cols) for _ in range(2)]
    assert first.feature_columns == second.feature_columns == [cols[1], cols[0]]
    assert (first.name, second.name) == ("dense_features", "dense_features_1")  # each build names its layer
    assert len(outputs) == 2 and len(checked) == 2  # once for DenseFeatures, once for input_layer (TF1's rules)
    for _ in range(2):  # a refused list is refused every time
        with pytest.raises(ValueError, match="Duplicate feature column name"):
            tf.keras.layers.DenseFeatures([cols[0], cols[0]])


def test_outside_a_step_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no step is running"):
        tf.keras.layers.DenseFeatures([column("a")])(FEATURES)


def test_column_not_in_the_spec():
    scope = LookupScope.from_engine(engine_for([column("a")]), FEATURES)
    with scope, pytest.raises(ValueError, match="not among the embedding columns of the EmbeddingConfigSpec"):
        tf.keras.layers.DenseFeatures([column("b")])(FEATURES)


def test_sequence_column_in_dense_layers_gives_the_suggested_fix():
    with pytest.raises(
        ValueError,
        match=r"In embedding_column: s_embedding\. categorical_column must not be of type "
        r"SequenceCategoricalColumn\. Suggested fix A: If you wish to use "
        r"DenseFeatures, use a non-sequence categorical_column_with_\*\. Suggested "
        r"fix B: If you wish to create sequence input, use SequenceFeatures instead "
        r"of DenseFeatures\.",
    ):
        tf.keras.layers.DenseFeatures([seq_column("s")])
    with pytest.raises(ValueError, match=r"must not be of type _SequenceCategoricalColumn\. Suggested fix A"):
        tf.compat.v1.feature_column.input_layer(FEATURES, [seq_column("s")])


def test_non_sequence_column_in_sequence_features():
    with pytest.raises(
        ValueError,
        match=r"In embedding_column: a_embedding\. categorical_column must be of type "
        r"SequenceCategoricalColumn to use SequenceFeatures\. Suggested fix: Use one "
        r"of sequence_categorical_column_with_\*",
    ):
        tf.keras.experimental.SequenceFeatures([column("a")])
    with pytest.raises(ValueError, match="Items of feature_columns must be a .*SequenceDenseColumn"):
        tf.keras.experimental.SequenceFeatures([tf.feature_column.numeric_column("x")])
    with pytest.raises(ValueError, match="same max_sequence_length"):
        tf.keras.experimental.SequenceFeatures([seq_column("s", 3), seq_column("t", 4)])


def test_shared_columns_in_input_layer():
    shared = tf.tpu.experimental.shared_embedding_columns([identity("a"), identity("b")], 2)
    with pytest.raises(
        ValueError,
        match=r"SharedEmbeddingColumns are not supported in `linear_model` or "
        r"`input_layer`\. Please use `DenseFeatures` or `LinearModel` instead\.",
    ):
        tf.compat.v1.feature_column.input_layer(FEATURES, shared)
    with LookupScope.from_engine(engine_for(shared), FEATURES):  # DenseFeatures takes them
        assert tf.keras.layers.DenseFeatures(shared)(FEATURES).shape == (2, 4)


@pytest.mark.parametrize(
    "columns, message",
    [
        ([], "feature_columns must not be empty."),
        ({"a": 1}, "Expected feature_columns to be iterable, found dict."),
        (["a"], "Items of feature_columns must be a FeatureColumn"),
        ([identity("a")], "Items of feature_columns must be a .*DenseColumn.*You can wrap a categorical column"),
        (None, None),
    ],
)
def test_normalize_errors(columns, message):
    if columns is None:
        col = column("a")
        with pytest.raises(ValueError, match="Duplicate feature column name found for columns"):
            tf.keras.layers.DenseFeatures([col, col])
        with pytest.raises(ValueError, match="tf.feature_column.embedding_column"):
            tf.keras.layers.DenseFeatures([tf.feature_column.embedding_column(identity("a"), 2)])
        return
    with pytest.raises(ValueError, match=message):
        tf.keras.layers.DenseFeatures(columns)


def test_the_docs_typo_dense_feature_is_read_as_dense_features():
    with pytest.warns(UserWarning, match="DenseFeature is not a TensorFlow name"):
        layer = tf.keras.layers.DenseFeature([column("a")])
    assert isinstance(layer, tf.keras.layers.DenseFeatures)
