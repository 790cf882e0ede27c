"""The runner's TPUEstimator runs a TensorFlow model_fn: docs/migration.md's "Before" program, one import changed.

The program is written once, as a function of the `tf` module it uses:
`tpu_embedding_shim.tensorflow` (this project's TPUEstimator, columns and
feature layers, TensorFlow's dense layers, losses, optimizers and metrics)
or the real `tensorflow` (TensorFlow 2.15's own TPUEstimator with
use_tpu=False, the oracle). Both start from the same tables and dense
weights; the guide's `...` input_fn is a `tf.data.Dataset`.

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge/test_estimator_tf_model_fn.py -q
"""

import functools

import numpy as np
import pytest
import tensorflow as real_tf

import tpu_embedding_shim as shim_np  # the numpy API: a model_fn reading it is not TensorFlow code
import tpu_embedding_shim.tensorflow as shim_tf  # the program's one changed import
from tpu_embedding_shim.runner import tf_bridge

from .programs import adagrad_estimator, linear_model_fn
from .tf_versions import needs_estimator, needs_keras_2

V, D, L, B, H = 40, 8, 5, 16, 16
_rng = np.random.default_rng(0)
TABLE = (_rng.normal(size=(V, D)) * 0.3).astype(np.float32)
W1 = (_rng.normal(size=(3 * D, H)) * 0.3).astype(np.float32)
W2 = (_rng.normal(size=(H, 1)) * 0.3).astype(np.float32)
USER_TABLE = "dense_features/user_embedding/embedding_weights"
SHARED_TABLE = "history_item_shared_embedding"


def examples(n, seed=1):
    """n examples; ids from 1 (a dense id 0 is padding on a TPU), histories of full length (TF's CPU path
    ignores max_sequence_length); the label is learnable from user and item."""
    rng = np.random.default_rng(seed)
    user, item = rng.integers(1, V, (n, 1)), rng.integers(1, V, (n, 1))
    history = rng.integers(1, V, (n, L))
    labels = ((user[:, 0] < V // 2) ^ (item[:, 0] % 2 == 0)).astype(np.float32)
    return {"user": user, "item": item, "history": history}, labels


def make_input_fn(features, labels, repeat=False):
    def input_fn(params):
        dataset = real_tf.data.Dataset.from_tensor_slices((features, labels))
        dataset = dataset.repeat() if repeat else dataset
        return dataset.batch(params["batch_size"], drop_remainder=True)

    return input_fn


def before_program(tf, model_dir, use_tpu=True, learning_rate=0.5, warm_start_from=None):
    """docs/migration.md's "Before" program over module `tf`, with fixed initial values."""
    user = tf.feature_column.categorical_column_with_identity("user", V)
    item = tf.feature_column.categorical_column_with_identity("item", V)
    history = tf.feature_column.sequence_categorical_column_with_identity("history", V)
    init = tf.compat.v1.constant_initializer(TABLE)
    user_col = tf.compat.v1.tpu.experimental.embedding_column(user, D, initializer=init)
    item_col, history_col = tf.compat.v1.tpu.experimental.shared_embedding_columns(
        [item, history], D, max_sequence_lengths=[0, L], initializer=init
    )

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures([user_col, item_col])(features)
        seq, lengths = tf.keras.experimental.SequenceFeatures([history_col])(features)
        mask = tf.sequence_mask(lengths, L, dtype=tf.float32)[:, :, None]
        pooled = tf.reduce_sum(seq * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        hidden = tf.keras.layers.Dense(H, activation="relu", kernel_initializer=tf.constant_initializer(W1))(
            tf.concat([net, pooled], 1)
        )
        logits = tf.squeeze(tf.keras.layers.Dense(1, kernel_initializer=tf.constant_initializer(W2))(hidden), -1)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, predictions={"p": tf.sigmoid(logits)})
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
        if use_tpu:  # TensorFlow's own CrossShardOptimizer needs a TPU (CrossReplicaSum); the oracle runs without
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())

        def metric_fn(labels, logits):
            return {
                "auc": tf.compat.v1.metrics.auc(labels, tf.sigmoid(logits)),
                "mean_p": tf.compat.v1.metrics.mean(tf.sigmoid(logits)),
            }

        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
            mode, loss=loss, train_op=train_op, eval_metrics=(metric_fn, [labels, logits])
        )

    tpu = tf.compat.v1.estimator.tpu
    return tpu.TPUEstimator(
        model_fn=model_fn,
        config=tpu.RunConfig(
            model_dir=str(model_dir), save_checkpoints_steps=100, tpu_config=tpu.TPUConfig(iterations_per_loop=1)
        ),
        train_batch_size=B,
        eval_batch_size=B,
        predict_batch_size=B,
        use_tpu=use_tpu,
        warm_start_from=warm_start_from,
        embedding_config_spec=tpu.experimental.EmbeddingConfigSpec(
            feature_columns=[user_col, item_col, history_col],
            optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(0.3),
        ),
    )


DENSE = ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]


@needs_estimator
@needs_keras_2
def test_one_step_dense_update_is_tensorflows_and_tables_train_with_the_spec_optimizer(tmp_path):
    features, labels = examples(B)
    ours = before_program(shim_tf, tmp_path / "ours").train(make_input_fn(features, labels), steps=1)
    oracle = before_program(real_tf, tmp_path / "tf", use_tpu=False).train(make_input_fn(features, labels), steps=1)

    # TensorFlow's names for dense variables, tables and global_step; plus the tables' Adagrad slots
    assert sorted(ours.get_variable_names()) == sorted(
        oracle.get_variable_names() + [f"{USER_TABLE}/Adagrad", f"{SHARED_TABLE}/Adagrad"]
    )
    assert ours.get_variable_value("global_step") == oracle.get_variable_value("global_step") == 1
    for name in DENSE:  # the dense update is TensorFlow's
        np.testing.assert_allclose(ours.get_variable_value(name), oracle.get_variable_value(name), rtol=1e-5, atol=1e-6)
    # TF's CPU path trains a table with the model's SGD(0.5): its step gives d loss / d table. Ours applies the
    # same gradient with the EmbeddingConfigSpec's Adagrad(0.3) (initial accumulator 0.1).
    for table in (USER_TABLE, SHARED_TABLE):
        grad = (TABLE - oracle.get_variable_value(table)) / 0.5
        assert np.abs(grad).max() > 1e-4
        expected = TABLE - 0.3 * grad / np.sqrt(0.1 + grad * grad)
        np.testing.assert_allclose(ours.get_variable_value(table), expected, rtol=1e-4, atol=1e-6)


@needs_keras_2
def test_loss_falls_and_predict_yields_numpy(tmp_path):
    features, labels = examples(8 * B)
    estimator = before_program(shim_tf, tmp_path)
    estimator.train(make_input_fn(features, labels), steps=1)
    before = estimator.evaluate(make_input_fn(features, labels))["loss"]
    estimator.train(make_input_fn(features, labels, repeat=True), steps=60)
    after = estimator.evaluate(make_input_fn(features, labels))
    assert after["global_step"] == 61
    assert after["loss"] < 0.5 * before
    predictions = list(estimator.predict(make_input_fn(features, labels)))
    assert len(predictions) == 8 * B
    assert all(isinstance(p["p"], np.floating) and p["p"].dtype == np.float32 for p in predictions)
    p = np.array([x["p"] for x in predictions])
    assert ((p > 0.5) == (labels > 0.5)).mean() > 0.8  # learned (chance: 0.5)


def _auc(labels, p, num_thresholds=200):
    """tf.compat.v1.metrics.auc's approximation (ROC, trapezoidal, 200 thresholds), in numpy."""
    eps = 1e-7
    thresholds = [0.0 - eps] + [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)] + [1.0 + eps]
    pos = labels > 0.5
    tp = np.array([np.sum((p > t) & pos) for t in thresholds], np.float64)
    fp = np.array([np.sum((p > t) & ~pos) for t in thresholds], np.float64)
    fn, tn = pos.sum() - tp, (~pos).sum() - fp
    tpr, fpr = (tp + eps) / (tp + fn + eps), fp / (fp + tn + eps)
    return float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2))


@needs_keras_2
def test_evaluate_metrics_equal_a_numpy_recomputation(tmp_path):
    features, labels = examples(4 * B)
    estimator = before_program(shim_tf, tmp_path)
    estimator.train(make_input_fn(features, labels, repeat=True), steps=5)
    metrics = estimator.evaluate(make_input_fn(features, labels))
    p = np.array([x["p"] for x in estimator.predict(make_input_fn(features, labels))], np.float64)
    batch_losses = [
        np.mean(-labels[i : i + B] * np.log(p[i : i + B]) - (1 - labels[i : i + B]) * np.log(1 - p[i : i + B]))
        for i in range(0, 4 * B, B)
    ]
    assert metrics["loss"] == pytest.approx(np.mean(batch_losses), rel=1e-4)
    assert metrics["mean_p"] == pytest.approx(p.mean(), rel=1e-5)
    assert metrics["auc"] == pytest.approx(_auc(labels, p), abs=1e-4)
    assert metrics["global_step"] == 5


@needs_keras_2
def test_resume_restores_dense_variables_and_tables(tmp_path):
    features, labels = examples(B)  # one batch, repeated: every step sees the same data
    straight = before_program(shim_tf, tmp_path / "a").train(make_input_fn(features, labels, repeat=True), steps=3)
    first = before_program(shim_tf, tmp_path / "b").train(make_input_fn(features, labels, repeat=True), steps=2)
    resumed = before_program(shim_tf, tmp_path / "b")  # a new estimator on the same model_dir
    names = resumed.get_variable_names()
    for name in names:
        np.testing.assert_array_equal(resumed.get_variable_value(name), first.get_variable_value(name))
    resumed.train(make_input_fn(features, labels, repeat=True), steps=1)
    for name in names:  # 2 steps + resume + 1 step == 3 steps
        np.testing.assert_allclose(
            resumed.get_variable_value(name), straight.get_variable_value(name), rtol=1e-5, atol=1e-6
        )
    # one TF checkpoint holds the dense variables and the engine's tables, under TensorFlow's names
    reader = real_tf.train.load_checkpoint(str(tmp_path / "b"))
    assert set(names) <= set(reader.get_variable_to_shape_map())
    np.testing.assert_array_equal(reader.get_tensor("dense/kernel"), resumed.get_variable_value("dense/kernel"))
    np.testing.assert_array_equal(reader.get_tensor(SHARED_TABLE), resumed.get_variable_value(SHARED_TABLE))
    assert reader.get_tensor("global_step") == 3


@pytest.mark.parametrize(
    "bad, message",
    [
        ("rewrite", "tf.compat.v1.tpu.rewrite"),
        ("host_call", "host_call should be a tuple or list of two elements"),
        ("tf_cross_shard", "CrossShardOptimizer"),
    ],
)
@needs_keras_2
def test_apis_the_bridge_cannot_serve_are_named(tmp_path, bad, message):
    tf = shim_tf
    column = tf.tpu.experimental.embedding_column(tf.feature_column.categorical_column_with_identity("user", V), D)

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures([column])(features)
        if bad == "rewrite":
            net = tf.compat.v1.tpu.rewrite(lambda x: x * 2.0, [net])[0]
        logits = tf.squeeze(tf.keras.layers.Dense(1)(net), -1)
        loss = tf.reduce_mean(tf.square(logits - labels))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        if bad == "tf_cross_shard":
            optimizer = real_tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        host_call = (lambda x: [],) if bad == "host_call" else None  # no tensors: malformed
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
            mode,
            loss=loss,
            train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()),
            host_call=host_call,
        )

    estimator = adagrad_estimator(model_fn, [column], tmp_path, B)
    features, labels = examples(B)
    with pytest.raises(ValueError, match=message):
        estimator.train(make_input_fn({"user": features["user"]}, labels), steps=1)
    assert estimator.latest_checkpoint() is None  # nothing trained, nothing saved


@needs_keras_2
def test_tensorflow_numeric_columns_mix_in_and_global_step_is_the_engines(tmp_path):
    tf = shim_tf
    user_col = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("user", V),
        D,
        initializer=tf.compat.v1.constant_initializer(TABLE),
    )
    age = tf.feature_column.numeric_column("age", normalizer_fn=lambda x: x / 10.0)  # TensorFlow's own column
    seen_steps = []

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures([user_col, age])(features)  # name order: age, user_embedding
        logits = tf.squeeze(tf.keras.layers.Dense(1)(net), -1)
        step = tf.compat.v1.train.get_global_step()
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
                mode, predictions={"net": net, "step": tf.fill(tf.shape(logits), step)}
            )
        loss = tf.reduce_mean(tf.square(logits - labels))
        with tf.control_dependencies(
            [tf.compat.v1.py_func(lambda s: seen_steps.append(int(s)) or s, [step], tf.int64)]
        ):
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, step)
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    estimator = adagrad_estimator(model_fn, [user_col], tmp_path, B, predict_batch_size=B)
    features, labels = examples(B)
    features = {"user": features["user"], "age": np.arange(B, dtype=np.float32)[:, None]}
    estimator.train(make_input_fn(features, labels, repeat=True), steps=3)
    assert seen_steps == [0, 1, 2]
    (batch,) = list(estimator.predict(make_input_fn(features, labels), yield_single_examples=False))
    assert (batch["step"] == 3).all()
    table = estimator.get_variable_value(USER_TABLE)
    np.testing.assert_allclose(
        batch["net"], np.concatenate([features["age"] / 10.0, table[features["user"][:, 0]]], axis=1), rtol=1e-6
    )


def _step_reading_model_fn(user_col, seen_steps, advances):
    """A model_fn noting the global_step its graph reads; its train_op increments it when `advances`."""
    tf = shim_tf

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures([user_col])(features)
        w = tf.compat.v1.get_variable("w", [D, 1], initializer=tf.compat.v1.zeros_initializer())  # no Keras layer
        loss = tf.reduce_mean(tf.square(tf.squeeze(tf.matmul(net, w), -1) - labels))
        step = tf.compat.v1.train.get_global_step()
        seen = tf.compat.v1.py_func(lambda s: seen_steps.append(int(s)) or s, [step], tf.int64)
        with tf.control_dependencies([seen]):
            optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.01)
            train_op = optimizer.minimize(loss, step if advances else None)
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return model_fn


def test_the_graph_is_given_the_step_only_when_train_op_did_not_advance_it(tmp_path, monkeypatch):
    """A train_op that increments global_step (`minimize(loss, global_step)`) leaves the graph at the runner's
    next step, so a step is one session run; one that does not gets the step loaded first: two runs. Either
    way the graph reads the runner's step. Runs are counted below `Session.run`, where a training step's
    `FixedRun` (runner/tf_run.py) runs too."""
    tf = shim_tf
    user_col = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("user", V), D
    )
    session_run = real_tf.compat.v1.Session._call_tf_sessionrun
    runs = []
    monkeypatch.setattr(
        real_tf.compat.v1.Session,
        "_call_tf_sessionrun",
        lambda self, *a, **k: runs.append(1) or session_run(self, *a, **k),
    )
    features, labels = examples(B)
    input_fn = make_input_fn({"user": features["user"]}, labels, repeat=True)
    runs_of_five_steps = {}
    for advances in (True, False):
        seen_steps: list[int] = []
        model_fn = _step_reading_model_fn(user_col, seen_steps, advances)
        estimator = adagrad_estimator(model_fn, [user_col], tmp_path / str(advances), B)
        estimator.train(input_fn, steps=1)
        before = len(runs)
        estimator.train(input_fn, steps=5)  # a new graph: its first step is given the step in both cases
        runs_of_five_steps[advances] = len(runs) - before
        assert seen_steps == [0, 1, 2, 3, 4, 5]
        assert estimator.get_variable_value("global_step") == 6
    assert runs_of_five_steps[False] - runs_of_five_steps[True] == 4


@needs_estimator
@needs_keras_2
def test_warm_start_from_tensorflows_own_checkpoint_takes_its_dense_variables_and_tables(tmp_path):
    features, labels = examples(B)
    oracle = before_program(real_tf, tmp_path / "tf", use_tpu=False).train(make_input_fn(features, labels), steps=1)
    # one step at learning rate 0 moves nothing dense: the graph holds what it took from TF's checkpoint
    ours = before_program(shim_tf, tmp_path / "ours", learning_rate=0.0, warm_start_from=str(tmp_path / "tf"))
    ours.train(make_input_fn(features, labels), steps=1)
    for name in DENSE:
        np.testing.assert_allclose(ours.get_variable_value(name), oracle.get_variable_value(name), rtol=1e-6)
    assert not np.allclose(oracle.get_variable_value("dense/kernel"), W1)  # TF's step did move it


@needs_keras_2
def test_tensor_core_columns_with_a_tensorflow_model_fn_are_refused_naming_them(tmp_path):
    tf = shim_tf
    column = tf.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("user", V),
        D,
        embedding_lookup_device="tpu_tensor_core",
        tensor_core_shape=[None, 1],
    )

    estimator = adagrad_estimator(linear_model_fn(column), [column], tmp_path, B)
    features, labels = examples(B)
    with pytest.raises(ValueError, match="tpu_tensor_core"):
        estimator.train(make_input_fn({"user": features["user"]}, labels), steps=1)


@needs_keras_2
def test_ragged_dataset_ids_input_layer_and_sequence_features_read_the_engines_rows(tmp_path):
    tf = shim_tf
    init = tf.compat.v1.constant_initializer(TABLE)
    user_col = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("user", V), D, initializer=init
    )
    history_col = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.sequence_categorical_column_with_identity("history", V),
        D,
        max_sequence_length=3,
        initializer=init,
    )

    def model_fn(features, labels, mode, params):
        net = tf.compat.v1.feature_column.input_layer(features, [user_col])
        seq, lengths = tf.keras.experimental.SequenceFeatures([history_col])(features)
        if mode == tf.estimator.ModeKeys.TRAIN:  # a zero gradient: Adagrad leaves the tables as they are
            loss = 0.0 * (tf.reduce_sum(net) + tf.reduce_sum(seq))
            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=tf.no_op())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, predictions={"net": net, "seq": seq, "len": lengths})

    estimator = adagrad_estimator(model_fn, [user_col, history_col], tmp_path, B, predict_batch_size=2)
    history = [[3, 4], [5, 6, 7, 8]]  # the second is cut to max_sequence_length 3

    def input_fn(params):
        return tf.data.Dataset.from_tensor_slices(
            {"user": [[1], [2]], "history": tf.ragged.constant(history, dtype=tf.int64)}
        ).batch(params["batch_size"])

    estimator.train(input_fn, steps=1)  # predict needs a checkpoint
    (batch,) = list(estimator.predict(input_fn, yield_single_examples=False))
    np.testing.assert_allclose(batch["net"], TABLE[[1, 2]])
    expected = np.zeros((2, 3, D), np.float32)
    expected[0, :2], expected[1] = TABLE[[3, 4]], TABLE[[5, 6, 7]]
    np.testing.assert_allclose(batch["seq"], expected)
    assert batch["len"].tolist() == [2, 3]


@needs_keras_2
def test_numpy_batches_whose_id_width_changes_feed_the_same_graph(tmp_path):
    tf = shim_tf
    user_col = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("user", V),
        D,
        combiner="mean",
        initializer=tf.compat.v1.constant_initializer(TABLE),
    )

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures([user_col])(features)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, predictions=net)
        loss = 0.0 * tf.reduce_sum(net)  # a zero gradient: the table stays TABLE
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=tf.no_op())

    estimator = adagrad_estimator(model_fn, [user_col], tmp_path, 2, predict_batch_size=2)
    batches = [
        {"user": np.array([[1], [2]])},
        {"user": np.array([[1, 3], [2, -1]])},
        {"user": np.array([[4, 5, 6], [7, -1, -1]])},
    ]  # numpy batches, -1 pads

    def input_fn(params):
        yield from ((b, np.zeros(2, np.float32)) for b in batches)

    estimator.train(input_fn)
    assert estimator.get_variable_value("global_step") == 3
    outputs = list(estimator.predict(lambda params: iter(batches), yield_single_examples=False))
    np.testing.assert_allclose(outputs[1], [TABLE[[1, 3]].mean(0), TABLE[2]], rtol=1e-6)
    np.testing.assert_allclose(outputs[2], [TABLE[[4, 5, 6]].mean(0), TABLE[7]], rtol=1e-6)


def _numpy_model_fn(features, labels, mode, params):
    return np.zeros(1), shim_np.estimator.ModeKeys.TRAIN


def _tf_helper(x):
    return real_tf.nn.relu(x)


def _indirect_model_fn(features, labels, mode, params):
    return _tf_helper(features)


class _CallableModel:
    def __call__(self, features, labels, mode, params):
        return shim_tf.constant(1.0)


@pytest.mark.parametrize(
    "model_fn, expected",
    [
        (_numpy_model_fn, False),
        (_indirect_model_fn, True),  # through a helper it calls
        (_CallableModel(), True),  # a callable object
        (lambda features, labels, mode, params: real_tf.keras.layers.Dense(1), True),
    ],
)
def test_the_runner_tells_a_tensorflow_model_fn_from_a_numpy_one(model_fn, expected):
    assert (tf_bridge.tensorflow_read_by(model_fn) is not None) is expected


def _fixed_model_fn(column):
    """A TensorFlow model_fn of fixed initial values: `Dense(1)` of a constant kernel over the column, SGD(0.1)."""
    tf = shim_tf

    def model_fn(features, labels, mode, params):
        dense = tf.keras.layers.Dense(1, kernel_initializer=tf.compat.v1.constant_initializer(0.1))
        logits = tf.squeeze(dense(tf.keras.layers.DenseFeatures([column])(features)), -1)
        loss = tf.reduce_mean(tf.square(logits - labels))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, tf.compat.v1.train.get_global_step())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return model_fn


def _deep_3(column):
    return _fixed_model_fn(column)


def _deep_2(features, labels, mode, params, column):
    return _deep_3(column)(features, labels, mode, params)


def _deep_1(*args, column):
    return _deep_2(*args, column)


@needs_keras_2
def test_a_tensorflow_model_fn_the_rule_cannot_see_runs_when_stated_and_the_choice_is_logged(tmp_path, caplog):
    """The rule looks three calls deep: a model_fn that reaches TensorFlow deeper runs as TensorFlow when
    `dense_framework='tensorflow'` says so, and trains as the same model_fn read directly."""
    tf = shim_tf
    column = tf.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("user", V),
        D,
        initializer=tf.compat.v1.constant_initializer(TABLE),
    )
    hidden = functools.partial(_deep_1, column=column)

    def model_fn(features, labels, mode, params):
        return hidden(features, labels, mode, params)

    assert tf_bridge.tensorflow_read_by(model_fn) is None
    assert tf_bridge.tensorflow_read_by(_fixed_model_fn(column)) == "`tf` in _fixed_model_fn.<locals>.model_fn"
    features, labels = examples(B)
    tables = []
    with caplog.at_level("INFO", logger="tpu_embedding_shim"):
        for name, fn, stated in (("stated", model_fn, "tensorflow"), ("direct", _fixed_model_fn(column), "auto")):
            tpu = tf.compat.v1.estimator.tpu
            estimator = tpu.TPUEstimator(
                model_fn=fn,
                config=tpu.RunConfig(model_dir=str(tmp_path / name), tf_random_seed=1),
                train_batch_size=B,
                embedding_config_spec=tpu.experimental.EmbeddingConfigSpec(
                    feature_columns=[column], optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
                ),
                dense_framework=stated,
            )
            estimator.train(make_input_fn({"user": features["user"]}, labels), steps=2)
            tables.append(estimator.engine.table(estimator.engine.spec.tables[0].name))
    logged = [r.getMessage() for r in caplog.records if "dense part runs as" in r.getMessage()]
    assert logged == [
        "TPUEstimator: the model_fn's dense part runs as a TensorFlow graph (dense_framework='tensorflow').",
        "TPUEstimator: the model_fn's dense part runs as a TensorFlow graph (dense_framework='auto': it reads "
        "TensorFlow (`tf` in _fixed_model_fn.<locals>.model_fn)).",
    ]
    assert not np.array_equal(tables[0], TABLE)
    np.testing.assert_allclose(tables[0], tables[1], rtol=1e-6)


@needs_keras_2
def test_tf_random_seed_seeds_the_graph_as_tensorflows_estimator_does(tmp_path):
    """Two runs with one `tf_random_seed` start from the same dense weights (a `tf.compat.v1.get_variable` of
    TensorFlow's default random initializer), so they train to the same tables; another seed does not."""
    tf = shim_tf
    column = tf.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("user", V),
        D,
        initializer=tf.compat.v1.constant_initializer(TABLE),
    )

    def model_fn(features, labels, mode, params):
        weights = tf.compat.v1.get_variable("w", [D, 1])
        logits = tf.squeeze(tf.matmul(tf.keras.layers.DenseFeatures([column])(features), weights), -1)
        loss = tf.reduce_mean(tf.square(logits - labels))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, tf.compat.v1.train.get_global_step())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    features, labels = examples(B)
    tables = []
    for run, seed in (("a", 7), ("b", 7), ("c", 8)):
        tpu = tf.compat.v1.estimator.tpu
        estimator = tpu.TPUEstimator(
            model_fn=model_fn,
            config=tpu.RunConfig(model_dir=str(tmp_path / run), tf_random_seed=seed),
            train_batch_size=B,
            embedding_config_spec=tpu.experimental.EmbeddingConfigSpec(
                feature_columns=[column], optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
            ),
        )
        estimator.train(make_input_fn({"user": features["user"]}, labels), steps=2)
        tables.append(estimator.engine.table(estimator.engine.spec.tables[0].name))
    np.testing.assert_array_equal(tables[0], tables[1])
    assert not np.array_equal(tables[0], tables[2])
