"""TPUEstimator with an EmbeddingConfigSpec whose only columns are tensor-core columns.

The embedding engine has no table to own, so none is built: the model
checkpoints its dense state alone (the tensor-core tables are in it). Before
this was handled, the first checkpoint failed ("spec_structure of
save_checkpoint must be a non-empty dict").
"""

import os

import numpy as np

import tpu_embedding_shim as tf

V, D, KEPT = 6, 2, 2
TABLE = np.arange(V * D, dtype=np.float32).reshape(V, D)
# Three ids per example; only the first KEPT positions are looked up (tensor_core_shape[1]).
IDS = np.array([[1, 2, 5], [3, -1, 4], [0, 0, 0], [2, 2, 1]])
KEPT_IDS = [[1, 2], [3], [0, 0], [2, 2]]


def _column():
    user = tf.feature_column.categorical_column_with_identity("user", V)
    return tf.tpu.experimental.embedding_column(
        user,
        D,
        combiner="sum",
        initializer=lambda shape, dtype=np.float32: TABLE.copy(),
        embedding_lookup_device="tpu_tensor_core",
        tensor_core_shape=[None, KEPT],
    )


def _estimator(model_dir, column, record):
    def model_fn(features, labels, mode, params):
        context = params["context"]
        net = tf.keras.layers.DenseFeatures([column])(features)
        record.append(np.array(net))
        loss = float(net.sum())
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"net": net})

        def train_op():  # the model's own SGD trains the tensor-core table
            context.tensor_core_tables["tbl_user"] -= 0.5 * context.tensor_core_gradients["tbl_user"]

        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=loss, train_op=train_op, embedding_gradients={net: np.ones_like(net)}
        )

    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[column], optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
    )
    config = tf.estimator.tpu.RunConfig(model_dir=str(model_dir), save_checkpoints_steps=2)
    return tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=config,
        train_batch_size=4,
        eval_batch_size=4,
        predict_batch_size=4,
        embedding_config_spec=spec,
    )


def _step_gradient():
    """d(sum of the batch's activations)/d(table) for combiner 'sum': one per kept id occurrence."""
    gradient = np.zeros((V, D), np.float32)
    for row in KEPT_IDS:
        for i in row:
            gradient[i] += 1.0
    return gradient


def test_training_checkpoints_and_resumes(tmp_path):
    column, record = _column(), []
    estimator = _estimator(tmp_path, column, record)
    assert estimator.engine is None  # nothing for the embedding engine
    estimator.train(lambda params: {"user": IDS}, steps=3)
    np.testing.assert_array_equal(record[0], [TABLE[row].sum(axis=0) for row in KEPT_IDS])
    expected = TABLE - 3 * 0.5 * _step_gradient()
    np.testing.assert_allclose(estimator.get_variable_value("tbl_user"), expected)
    assert estimator.global_step == 3
    assert estimator.latest_checkpoint() == os.path.join(str(tmp_path), "model.ckpt-3")
    # The tensor-core table is saved under TensorFlow's name for it (DenseFeatures read it).
    assert estimator.get_variable_names() == ["dense_features/user_embedding/embedding_weights", "global_step"]

    again = _estimator(tmp_path, column, [])  # a new estimator restores the table and the step
    np.testing.assert_allclose(again.get_variable_value("tbl_user"), expected)
    assert again.global_step == 3
    again.train(lambda params: {"user": IDS}, steps=1)
    assert again.global_step == 4
    np.testing.assert_allclose(again.get_variable_value("tbl_user"), TABLE - 4 * 0.5 * _step_gradient())

    metrics = again.evaluate(lambda params: {"user": IDS}, steps=1)
    assert metrics["global_step"] == 4
    (prediction, *_) = list(again.predict(lambda params: {"user": IDS}))
    np.testing.assert_allclose(prediction["net"], again.get_variable_value("tbl_user")[KEPT_IDS[0]].sum(axis=0))
