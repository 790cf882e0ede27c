"""TPUEstimator end to end: train / evaluate / predict / export / resume on a small synthetic problem."""

import json
import logging
import os

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api.lookup_scope import LookupScope
from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.runner import load_exported

from .problem import D, V, columns, estimator, input_fn_for, make_data, numpy_model_fn

TRAIN, TEST = make_data(1024, seed=0), make_data(256, seed=1)


def build(tmp_path, name="m", **kwargs):
    pooled, sequence, cols = columns()
    return estimator(tmp_path / name, numpy_model_fn(pooled, sequence), cols, **kwargs)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"pipeline_execution_with_tensor_core": True, "partition_strategy": "mod", "shards": 3},
    ],
    ids=["plain", "pipelined-mod-3-shards"],
)
def test_train_evaluate_predict_export(tmp_path, options):
    est = build(tmp_path, **options)
    est.train(input_fn_for(TRAIN))  # until the generator ends: 1024 / 32 = 32 steps
    first = est.evaluate(input_fn_for(TEST))
    assert first["global_step"] == 32
    for _ in range(3):
        est.train(input_fn_for(TRAIN))
    last = est.evaluate(input_fn_for(TEST))
    assert last["global_step"] == 128
    assert last["loss"] < first["loss"] < np.log(2)
    assert last["auc"] > 0.9 and last["accuracy"] > 0.8

    predictions = list(est.predict(input_fn_for(TEST)))
    assert len(predictions) == 256 and set(predictions[0]) == {"probabilities", "logits"}
    assert next(iter(est.predict(input_fn_for(TEST), predict_keys="logits"))).keys() == {"logits"}
    batches = list(est.predict(input_fn_for(TEST), yield_single_examples=False))
    assert len(batches) == 8 and batches[0]["logits"].shape == (32,)

    path = est.export_saved_model(str(tmp_path / "export"))
    assert isinstance(path, bytes)
    exported = load_exported(path.decode())
    manifest = json.load(open(os.path.join(path.decode(), "manifest.json")))
    assert manifest["global_step"] == 128
    assert {t["name"] for t in manifest["tables"]} == {"tbl_user", "tbl_hist_item_shared_embedding"}
    for name, table in exported.tables.items():
        assert table.shape == (V, D)
        np.testing.assert_array_equal(table, est.get_variable_value(name))  # unsharded, id order
    np.testing.assert_array_equal(exported.dense_state["w"], est.get_variable_value("w"))
    # Serving lookups equal what the model_fn saw in PREDICT mode.
    features = {k: v[:32] for k, v in TEST[0].items()}
    activations, lengths = exported.lookup(features)
    with LookupScope.from_engine(est.engine, features):
        net = tf.keras.layers.DenseFeatures(columns()[0])(features)
    np.testing.assert_array_equal(net, np.concatenate([activations["item"], activations["user"]], axis=1))
    assert lengths["hist"].max() <= 3


def test_resume_equals_uninterrupted(tmp_path):
    once = build(tmp_path, "once")
    once.train(input_fn_for(TRAIN), steps=10)
    once.train(input_fn_for(TRAIN), steps=10)

    first = build(tmp_path, "resumed")
    first.train(input_fn_for(TRAIN), steps=10)
    resumed = build(tmp_path, "resumed", seed=123)  # a new estimator, another seed: everything comes from disk
    resumed.train(input_fn_for(TRAIN), steps=10)

    assert resumed.global_step == once.global_step == 20
    for name in once.get_variable_names():
        np.testing.assert_array_equal(
            np.asarray(resumed.get_variable_value(name)), np.asarray(once.get_variable_value(name)), err_msg=name
        )


def test_checkpoint_cadence_keep_and_max_steps(tmp_path):
    est = build(tmp_path, steps_per_save=5, keep=2)
    est.train(input_fn_for(TRAIN), steps=12)
    names = sorted(os.listdir(tmp_path / "m"))
    assert names == [
        "checkpoint",
        "model.ckpt-10.data-00000-of-00001",
        "model.ckpt-10.index",
        "model.ckpt-12.data-00000-of-00001",
        "model.ckpt-12.index",
    ]
    assert est.latest_checkpoint() == str(tmp_path / "m" / "model.ckpt-12")
    est.train(input_fn_for(TRAIN), max_steps=15)
    assert est.global_step == 15
    est.train(input_fn_for(TRAIN), max_steps=15)  # already there: skipped
    assert est.global_step == 15
    # An older checkpoint can be evaluated; the next call goes back to the latest.
    older = est.evaluate(input_fn_for(TEST), checkpoint_path=str(tmp_path / "m" / "model.ckpt-12"))
    assert older["global_step"] == 12
    assert est.evaluate(input_fn_for(TEST))["global_step"] == 15


def test_step_context_and_engine_see_the_same_global_step(tmp_path):
    seen, multiplier_steps, lr_steps = [], [], []
    pooled, sequence, cols = columns()

    def learning_rate_fn(step):
        lr_steps.append(step)
        return 0.1

    user = tf.feature_column.categorical_column_with_identity("user", V)
    cols[0] = tf.tpu.experimental.embedding_column(user, D, learning_rate_fn=learning_rate_fn)
    pooled[0] = cols[0]
    est = estimator(
        tmp_path / "m",
        numpy_model_fn(pooled, sequence, record=seen),
        cols,
        experimental_gradient_multiplier_fn=lambda step: multiplier_steps.append(step) or 1.0,
    )
    est.train(input_fn_for(TRAIN), steps=4)
    assert [s for mode, s in seen] == [0, 1, 2, 3]
    assert multiplier_steps == [0, 1, 2, 3]
    assert lr_steps == [0, 1, 2, 3]


@pytest.mark.parametrize("pipelining", [False, True])
def test_runner_applies_exactly_the_engine_update(tmp_path, pipelining):
    """The runner's tables equal a hand-driven engine's fed the same gradients (multiplier, mod, 3 shards)."""
    pooled, sequence, cols = columns()
    rng = np.random.default_rng(5)
    weights = rng.normal(size=(3 * D,)).astype(np.float32)

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures(pooled)(features)
        seq, _ = tf.keras.experimental.SequenceFeatures(sequence)(features)
        loss = float((net @ weights[: 2 * D]).sum() + (seq.sum(axis=1) @ weights[2 * D :]).sum())
        d_net = np.broadcast_to(weights[: 2 * D], net.shape)
        d_seq = np.broadcast_to(weights[2 * D :], seq.shape)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=loss, train_op=lambda: None, embedding_gradients={net: d_net, seq: d_seq}
        )

    options = dict(
        experimental_gradient_multiplier_fn=lambda step: 1.0 / (step + 1),
        partition_strategy="mod",
        pipeline_execution_with_tensor_core=pipelining,
    )
    est = estimator(tmp_path / "m", model_fn, cols, shards=3, seed=7, **options)
    est.train(input_fn_for(TRAIN), steps=6)

    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=cols, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.5), **options
    )
    engine = Engine(spec.to_spec(num_shards=3), seed=7)
    for features, _ in list(input_fn_for(TRAIN)({"batch_size": 32}))[:6]:
        result = engine.forward(features)
        grads = {
            "user": np.broadcast_to(weights[D : 2 * D], (32, D)),
            "item": np.broadcast_to(weights[:D], (32, D)),
            "hist": np.broadcast_to(weights[2 * D :], (32, 3, D)),
        }
        engine.apply_gradients(result, grads)
    for table in ("tbl_user", "tbl_hist_item_shared_embedding"):
        np.testing.assert_array_equal(est.get_variable_value(table), engine.table(table))


def test_single_batch_input_and_estimator_spec_metrics(tmp_path):
    features, labels = TRAIN
    one = ({k: v[:64] for k, v in features.items()}, labels[:64])
    pooled, sequence, cols = columns()
    inner = numpy_model_fn(pooled, sequence)

    def model_fn(features, labels, mode, params):
        spec = inner(features, labels, mode, params)
        if mode == tf.estimator.ModeKeys.EVAL:
            batch_mean = float(np.mean(labels))
            return tf.estimator.EstimatorSpec(mode, loss=spec.loss, eval_metric_ops={"label_mean": (batch_mean, None)})
        return spec

    est = estimator(tmp_path / "m", model_fn, cols, batch=64)
    with pytest.raises(ValueError, match="steps="):
        est.train(lambda params: one)
    est.train(lambda params: one, steps=3)  # the same batch at every step, as TensorFlow feeds tensors
    assert est.global_step == 3
    metrics = est.evaluate(lambda params: one)
    assert metrics["label_mean"] == pytest.approx(float(np.mean(labels[:64])))
    assert len(list(est.predict(lambda params: one[0]))) == 64


def test_eval_metrics_see_the_whole_eval_set(tmp_path):
    pooled, sequence, cols = columns()
    seen = []

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures(pooled)(features)
        tf.keras.experimental.SequenceFeatures(sequence)(features)

        def metric_fn(labels, scores, batch_loss):
            seen.append((labels.shape, scores.shape, batch_loss.shape))
            return {"n": float(len(labels)), "score_mean": np.mean(scores)}

        loss = np.float32(len(labels))  # per-batch loss = batch size: 'loss' is the mean over batches
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode,
            loss=loss,
            train_op=lambda: None,
            eval_metrics=(metric_fn, {"labels": labels, "scores": net[:, :2], "batch_loss": loss}),
        )

    est = estimator(tmp_path / "m", model_fn, cols)
    est.train(input_fn_for(TRAIN), steps=1)
    metrics = est.evaluate(input_fn_for(TEST), steps=5)
    assert seen == [((160,), (160, 2), (5,))]
    assert metrics["n"] == 160 and metrics["loss"] == 32.0 and metrics["global_step"] == 1


def test_evaluate_without_a_checkpoint_and_errors(tmp_path):
    est = build(tmp_path)
    with pytest.raises(ValueError, match="Could not find trained model in model_dir"):
        est.evaluate(input_fn_for(TEST))
    with pytest.raises(ValueError, match="Can not provide both steps and max_steps"):
        est.train(input_fn_for(TRAIN), steps=1, max_steps=2)
    with pytest.raises(ValueError, match="Must specify steps > 0, given: 0"):
        est.train(input_fn_for(TRAIN), steps=0)
    with pytest.raises(ValueError, match="does not include params argument"):
        est.train(lambda: None, steps=1)
    with pytest.raises(ValueError, match="session hooks"):
        est.train(input_fn_for(TRAIN), steps=1, hooks=[object()])


def test_nan_loss_changes_nothing(tmp_path):
    pooled, sequence, cols = columns()

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures(pooled)(features)
        tf.keras.experimental.SequenceFeatures(sequence)(features)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=float("nan"), train_op=lambda: None, embedding_gradients={net: np.ones_like(net)}
        )

    est = estimator(tmp_path / "m", model_fn, cols)
    before = est.engine.table("tbl_user")
    with pytest.raises(tf.estimator.NanLossDuringTrainingError, match="NaN loss during training"):
        est.train(input_fn_for(TRAIN), steps=1)
    np.testing.assert_array_equal(est.engine.table("tbl_user"), before)
    assert est.global_step == 0


def test_bad_gradient_shape_is_refused(tmp_path):
    pooled, _sequence, cols = columns()

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures(pooled)(features)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=0.0, train_op=lambda: None, embedding_gradients={net: np.ones((3, 3))}
        )

    est = estimator(tmp_path / "m", model_fn, cols)
    with pytest.raises(ValueError, match=r"must have its shape \[32, 8\]"):
        est.train(input_fn_for(TRAIN), steps=1)


def test_derived_array_as_gradient_key_is_refused(tmp_path):
    pooled, _sequence, cols = columns()

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures(pooled)(features)
        derived = net * 1.0
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=0.0, train_op=lambda: None, embedding_gradients={id(derived): derived}
        )

    est = estimator(tmp_path / "m", model_fn, cols)
    with pytest.raises(ValueError, match="keys must be the arrays the feature layers returned"):
        est.train(input_fn_for(TRAIN), steps=1)


def test_unused_feature_warns_once_and_trains_the_rest(tmp_path, caplog):
    pooled, _sequence, cols = columns()

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures(pooled)(features)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=float(net.sum()), train_op=lambda: None, embedding_gradients={"user": np.ones((len(labels), D))}
        )

    est = estimator(tmp_path / "m", model_fn, cols)
    before = est.engine.table("tbl_user")
    with caplog.at_level(logging.WARNING, logger="tpu_embedding_shim"):
        est.train(input_fn_for(TRAIN), steps=3)
    warned = [r.getMessage() for r in caplog.records if "No gradient for feature" in r.getMessage()]
    assert len(warned) == 2  # item and hist, once each
    assert not np.array_equal(est.get_variable_value("tbl_user"), before)


def test_tensor_core_columns_are_trained_by_the_model(tmp_path, caplog):
    """A tensor-core column's table lives in dense_state and only train_op changes it."""
    pooled, sequence, cols = columns(tensor_core=True)
    updates = []

    def model_fn(features, labels, mode, params):
        context = params["context"]
        assert set(context.tensor_core_tables) == {"tbl_user"}
        net = tf.keras.layers.DenseFeatures(pooled)(features)
        tf.keras.experimental.SequenceFeatures(sequence)(features)
        user_part = net[:, D:]  # columns sorted by name: item_shared_embedding, user_embedding
        np.testing.assert_allclose(user_part, context.tensor_core_tables["tbl_user"][features["user"][:, 0]], rtol=1e-6)
        grad = np.zeros_like(net)
        grad[:, D:] = 1.0

        def train_op():
            g = context.tensor_core_gradients["tbl_user"]
            updates.append(g.copy())
            context.tensor_core_tables["tbl_user"] -= 0.1 * g  # the model's own SGD

        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=float(net.sum()), train_op=train_op, embedding_gradients={net: grad}
        )

    with caplog.at_level(logging.INFO, logger="tpu_embedding_shim"):
        est = estimator(tmp_path / "m", model_fn, cols)
        before = est.dense_state["tbl_user"].copy()
        est.train(input_fn_for(TRAIN), steps=2)
    assert any("Tensor-core columns ['user']" in r.getMessage() for r in caplog.records)
    assert "tbl_user" not in est.engine.spec.structure()  # not an engine table
    first_batch_users = TRAIN[0]["user"][:32, 0]
    np.testing.assert_array_equal(updates[0].sum(axis=1), 4.0 * np.bincount(first_batch_users, minlength=V))
    expected = before - 0.1 * updates[0] - 0.1 * updates[1]
    np.testing.assert_allclose(est.get_variable_value("tbl_user"), expected, rtol=1e-6)
    # Saved with the checkpoint and restored by a new estimator.
    again = estimator(tmp_path / "m", model_fn, cols, seed=9)
    np.testing.assert_array_equal(again.get_variable_value("tbl_user"), est.get_variable_value("tbl_user"))


def test_use_tpu_false_still_trains_with_the_embedding_optimizer(tmp_path, caplog):
    pooled, _sequence, cols = columns()
    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=cols,
        optimization_parameters=tf.tpu.experimental.StochasticGradientDescentParameters(1.0),
        partition_strategy="mod",
    )

    def model_fn(features, labels, mode, params):
        tf.keras.layers.DenseFeatures(pooled)(features)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=0.0, train_op=lambda: None, embedding_gradients={"user": np.ones((len(labels), D))}
        )

    config = tf.estimator.tpu.RunConfig(model_dir=str(tmp_path / "m"), tf_random_seed=0)
    est = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn, config=config, use_tpu=False, train_batch_size=32, embedding_config_spec=spec
    )
    before = est.engine.table("tbl_user")
    with caplog.at_level(logging.INFO, logger="tpu_embedding_shim"):
        est.train(input_fn_for(TRAIN), steps=1)
    users = TRAIN[0]["user"][:32, 0]
    counts = np.bincount(users, minlength=V)
    counts[0] = 0  # TPUEstimator's TPU input rule: id 0 of a dense input is padding
    expected = before - counts[:, None].astype(np.float32)  # SGD(1.0), mean of one id
    np.testing.assert_allclose(est.get_variable_value("tbl_user"), expected, rtol=1e-6)
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "even with use_tpu=False" in text and "partition_strategy='mod' works here" in text


def test_warm_start_takes_tables_not_slots_or_step(tmp_path):
    source = build(tmp_path, "source")
    source.train(input_fn_for(TRAIN), steps=5)
    pooled, sequence, cols = columns()
    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=cols, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.5)
    )
    config = tf.estimator.tpu.RunConfig(model_dir=str(tmp_path / "warm"), tf_random_seed=4)
    warm = tf.estimator.tpu.TPUEstimator(
        model_fn=numpy_model_fn(pooled, sequence),
        config=config,
        train_batch_size=32,
        embedding_config_spec=spec,
        warm_start_from=str(tmp_path / "source"),
    )
    engine = warm.engine
    assert engine.global_step == 0
    np.testing.assert_array_equal(engine.table("tbl_user"), source.get_variable_value("tbl_user"))
    np.testing.assert_array_equal(engine.slots("tbl_user")["accumulators"], np.full((V, D), 0.1, np.float32))
    np.testing.assert_array_equal(warm.dense_state["w"], source.get_variable_value("w"))


def test_profile_data_directory_reaches_the_engine(tmp_path):
    est = build(tmp_path, profile_data_directory=str(tmp_path / "profile"))
    est.train(input_fn_for(TRAIN), steps=2)
    assert os.listdir(tmp_path / "profile")


def test_progress_bar(tmp_path, capsys, monkeypatch):
    est = build(tmp_path)
    est.train(input_fn_for(TRAIN), steps=3, progress=True)
    err = capsys.readouterr().err
    assert "train 3/3" in err and "steps/s" in err and "loss=" in err
    monkeypatch.setenv("CI", "true")
    est.train(input_fn_for(TRAIN), steps=2)
    est.evaluate(input_fn_for(TEST))
    assert capsys.readouterr().err == ""
