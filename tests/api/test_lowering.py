"""The one lowering: TF-shaped objects -> EmbeddingSpec, with TensorFlow's names."""

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import lowering
from tpu_embedding_shim.api.tpu_embedding_v1 import FeatureConfig, TableConfig
from tpu_embedding_shim.spec import AdagradSpec, AdamSpec, EmbeddingSpec, FtrlSpec, QuantizationSpec, SGDSpec

fc = tf.feature_column
tpu = tf.tpu.experimental
est = tf.estimator.tpu.experimental


def test_columns_lower_to_tables_and_features_named_as_tensorflow(tmp_path):
    vocab = tmp_path / "zip.txt"
    vocab.write_text("940\n021\n112\n")
    user = fc.categorical_column_with_identity("user", 944)
    genres = fc.weighted_categorical_column(
        fc.categorical_column_with_vocabulary_list("genre", ["action", "drama"], num_oov_buckets=1), "genre_w"
    )
    zipc = fc.categorical_column_with_vocabulary_file("zip", str(vocab), num_oov_buckets=2)
    item = fc.categorical_column_with_identity("item", 1683)
    history = fc.sequence_categorical_column_with_identity("history", 1683)
    lr_fn = lambda step: 0.1  # noqa: E731
    columns = [
        tpu.embedding_column(user, 8, combiner="sum", learning_rate_fn=lr_fn),
        tpu.embedding_column(genres, 4, combiner="sqrtn"),
        tpu.embedding_column(zipc, 4),
    ] + tpu.shared_embedding_columns([item, history], 8, max_sequence_lengths=[0, 5])
    spec = est.EmbeddingConfigSpec(
        feature_columns=columns, optimization_parameters=est.AdagradParameters(0.05), partition_strategy="mod"
    ).to_spec(num_shards=3)
    assert [t.name for t in spec.tables] == [
        "tbl_user",
        "tbl_genre_weighted_by_genre_w",
        "tbl_zip",
        "tbl_history_item_shared_embedding",
    ]
    assert spec.table("tbl_user").optimizer == AdagradSpec(learning_rate=lr_fn)
    assert spec.table("tbl_zip").optimizer is None
    assert spec.optimizer == AdagradSpec(learning_rate=0.05)
    genre = spec.feature("genre")
    assert (genre.id_source, genre.vocabulary, genre.num_oov_buckets, genre.weight_key, genre.num_buckets) == (
        "vocabulary_list",
        ("action", "drama"),
        1,
        "genre_w",
        3,
    )
    zip_feature = spec.feature("zip")
    assert zip_feature.vocabulary == ("940", "021", "112") and zip_feature.num_buckets == 5
    assert spec.feature("history").max_sequence_length == 5
    assert spec.feature("history").table == spec.feature("item").table
    assert (spec.partition_strategy, spec.num_shards) == ("mod", 3)
    assert EmbeddingSpec.from_dict(spec.to_dict()) == spec


def test_tensor_core_columns_are_split_out_and_not_lowered():
    a = tpu.embedding_column(
        fc.categorical_column_with_identity("a", 5),
        2,
        embedding_lookup_device="tpu_tensor_core",
        tensor_core_shape=[None, 3],
    )
    b = tpu.embedding_column(fc.categorical_column_with_identity("b", 5), 2)
    config = est.EmbeddingConfigSpec(
        feature_columns=[a, b], optimization_parameters=est.StochasticGradientDescentParameters(0.1)
    )
    assert config.feature_columns == [b] and config.tensor_core_feature_columns == [a]
    assert [f.name for f in config.to_spec().features] == ["b"]


def test_config_dicts_lower_with_per_table_optimizer_and_learning_rate():
    tables = {
        "t1": TableConfig(10, 4, learning_rate=0.5),
        "t2": TableConfig(20, 2, combiner=None, optimization_parameters=est.AdamParameters(0.01)),
    }
    features = {"f1": FeatureConfig("t1"), "f2": FeatureConfig("t2", max_sequence_length=3, weight_key="w")}
    spec = est.EmbeddingConfigSpec(
        feature_to_config_dict=features, table_to_config_dict=tables, optimization_parameters=est.FtrlParameters(0.1)
    ).to_spec()
    assert spec.table("t1").optimizer == FtrlSpec(learning_rate=0.5)
    assert spec.table("t2").optimizer == AdamSpec(learning_rate=0.01, epsilon=1e-8)
    assert spec.table("t2").combiner == "sum"  # v1 combiner None is sent to the TPU as sum
    assert spec.feature("f2").weight_key == "w"


def test_feature_embedded_twice_is_refused_at_construction():
    p = fc.categorical_column_with_identity("p", 10)
    with pytest.raises(ValueError, match="'p' is embedded by more than one column"):
        est.EmbeddingConfigSpec(
            feature_columns=[tpu.embedding_column(p, 2), tpu.embedding_column(p, 3)],
            optimization_parameters=est.AdagradParameters(0.1),
        )


def test_v1_and_v2_optimizers_lower_to_the_same_spec_kinds():
    assert lowering.optimizer_spec(est.AdagradParameters(0.1)) == AdagradSpec(learning_rate=0.1)
    assert lowering.optimizer_spec(tf.tpu.experimental.embedding.Adagrad(0.1)) == AdagradSpec(learning_rate=0.1)
    v2_adam = lowering.optimizer_spec(tf.tpu.experimental.embedding.Adam(0.1, beta_1=0.5, clipvalue=2.0))
    assert (v2_adam.beta1, v2_adam.epsilon, v2_adam.clip_gradient_min, v2_adam.clip_gradient_max) == (
        0.5,
        1e-7,
        -2.0,
        2.0,
    )
    assert lowering.optimizer_spec(tf.tpu.experimental.embedding.SGD()) == SGDSpec(learning_rate=0.01)


def test_v2_callable_learning_rate_becomes_a_function_of_the_step():
    rate = iter([0.3, 0.2])
    spec = lowering.optimizer_spec(tf.tpu.experimental.embedding.SGD(learning_rate=lambda: next(rate)))
    assert spec.learning_rate_at(100) == 0.3
    assert spec.learning_rate_at(101) == 0.2


def test_v2_feature_config_nest_lowers_in_tf_nest_order():
    emb = tf.tpu.experimental.embedding
    video = emb.TableConfig(100, 8, name="video")
    user = emb.TableConfig(50, 4)
    nest = {
        "watched": emb.FeatureConfig(video, name="watched"),
        "favorited": emb.FeatureConfig(video),
        "friends": [emb.FeatureConfig(user, max_sequence_length=3)],
    }
    spec = lowering.spec_from_feature_config(nest, emb.Adagrad(0.1))
    assert [f.name for f in spec.features] == ["favorited", "friends/0", "watched"]
    assert [t.name for t in spec.tables] == ["video", "table_1"]
    assert spec.feature("friends/0").max_sequence_length == 3
    with pytest.raises(TypeError, match="FeatureConfig"):
        lowering.spec_from_feature_config({"a": 3})


def test_a_quantization_config_lowers_to_the_tables_quantization_spec():
    emb = tf.tpu.experimental.embedding
    table = emb.TableConfig(10, 2, name="t", quantization_config=emb.QuantizationConfig(4, -1.0, 1.0))
    spec = lowering.spec_from_feature_config(emb.FeatureConfig(table))
    assert spec.table("t").quantization == QuantizationSpec(num_buckets=4, lower=-1.0, upper=1.0)
    serving = lowering.spec_from_feature_config(emb.FeatureConfig(table), simulate_quantization=False)
    assert serving.table("t").quantization is None  # TensorFlow's CPU lookups ignore it


def test_bounds_that_collapse_in_float32_are_refused_naming_the_table():
    emb = tf.tpu.experimental.embedding
    config = emb.QuantizationConfig(4, 1.0, 1.0 + 1e-12)  # TensorFlow accepts it: upper > lower as Python floats
    table = emb.TableConfig(10, 2, name="t", quantization_config=config)
    with pytest.raises(ValueError, match=r"`upper` of QuantizationConfig of TableConfig 't'.*float32"):
        lowering.spec_from_feature_config(emb.FeatureConfig(table))


def test_get_configs_from_feature_columns_matches_tensorflow_probe():
    from tpu_embedding_shim.api.embedding_config_spec import get_configs_from_feature_columns

    ident = tpu.embedding_column(fc.categorical_column_with_identity("ident", 10), 4, combiner="sum")
    shared = tpu.shared_embedding_columns(
        [fc.categorical_column_with_identity("c1", 6), fc.categorical_column_with_identity("c2", 6)], 2
    )
    tables, features = get_configs_from_feature_columns([ident] + shared)
    assert sorted(tables) == ["tbl_c1_c2_shared_embedding", "tbl_ident"]
    assert (tables["tbl_ident"].vocabulary_size, tables["tbl_ident"].dimension, tables["tbl_ident"].combiner) == (
        10,
        4,
        "sum",
    )
    assert features["c2"] == FeatureConfig("tbl_c1_c2_shared_embedding", 0, None)
    np.testing.assert_allclose(tables["tbl_ident"].initializer.stddev, 0.5)


def test_a_spec_whose_columns_all_use_the_tensor_core_leaves_the_engine_nothing_to_do():
    from tpu_embedding_shim.engine.engine import Engine

    only = tpu.embedding_column(
        fc.categorical_column_with_identity("a", 5),
        2,
        embedding_lookup_device="tpu_tensor_core",
        tensor_core_shape=[None, 3],
    )
    config = est.EmbeddingConfigSpec(feature_columns=[only], optimization_parameters=est.AdagradParameters(0.1))
    spec = config.to_spec()
    assert spec.tables == () and spec.features == ()
    engine = Engine(spec)
    result = engine.forward({"a": [[1]]})
    assert result.activations == {}
    engine.apply_gradients(result, {})
    assert engine.global_step == 1


def test_embedding_config_spec_features_follow_tpuestimator_dense_rule():
    column = tpu.embedding_column(fc.categorical_column_with_identity("a", 5), 2)
    spec = est.EmbeddingConfigSpec(
        feature_columns=[column], optimization_parameters=est.AdagradParameters(0.1)
    ).to_spec()
    assert spec.feature("a").dense_zero_is_padding
    emb = tf.tpu.experimental.embedding
    v2 = lowering.spec_from_feature_config(emb.FeatureConfig(emb.TableConfig(5, 2), name="a"))
    assert not v2.feature("a").dense_zero_is_padding  # the mid-level API has its own rule
