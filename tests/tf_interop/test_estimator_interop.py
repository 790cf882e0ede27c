"""The runner's model_dir and TensorFlow 2.15's TPUEstimator, both ways, against a real TensorFlow.

TensorFlow reads the runner's checkpoints under its own names with equal
values, warm-starts and resumes its own TPUEstimator(use_tpu=False) from
them; the runner resumes and warm-starts from a model_dir TensorFlow wrote.
The program is tests/runner/tf_program.py, written for both. In a venv with the
`tensorflow` extra (`pip install -e '.[test,tensorflow]'`):

    python -m pytest tests/tf_interop -q
"""

import importlib.util
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip(
    "tensorflow", reason="the TensorFlow interop tests need TensorFlow (tensorflow-cpu==2.15.1 in a separate venv)"
)
pytest.importorskip("tensorflow_estimator", reason="the TPUEstimator interop tests need tensorflow-estimator==2.15")

import tpu_embedding_shim as shim  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "tf_program", Path(__file__).resolve().parents[1] / "runner" / "tf_program.py"
)
program = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(program)

logging.getLogger("tensorflow").setLevel(logging.ERROR)


def ours(model_dir, steps=3, **kwargs):
    est = program.shim_estimator(model_dir, **kwargs)
    est.train(program.shim_input_fn, steps=steps)
    return est


def theirs(model_dir, steps=3, **kwargs):
    est, input_fn = program.tf_estimator(tf, model_dir, **kwargs)
    if steps:
        est.train(input_fn, steps=steps)
    return est, input_fn


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "ftrl", "rmsprop"])
def test_tensorflow_reads_our_model_dir_under_its_names(tmp_path, optimizer):
    est = ours(tmp_path / "ours", optimizer=optimizer)
    reader = tf.train.load_checkpoint(str(tmp_path / "ours"))
    assert tf.train.latest_checkpoint(str(tmp_path / "ours")) == str(tmp_path / "ours" / "model.ckpt-3")
    names = set(reader.get_variable_to_shape_map()) - {"_TPU_EMBEDDING_SHIM_STATE"}
    assert sorted(names) == est.get_variable_names()
    for name in names:
        np.testing.assert_array_equal(reader.get_tensor(name), est.get_variable_value(name), err_msg=name)
    assert reader.get_variable_to_dtype_map()["global_step"] == tf.int64
    # TensorFlow's own run of the program has the same tables (its dense layer also has slots).
    tf_est, _ = theirs(tmp_path / "theirs", steps=1)
    tf_names = set(tf_est.get_variable_names())
    for name, shape in program.TABLES.items():
        assert name in tf_names and list(reader.get_variable_to_shape_map()[name]) == list(shape)
    assert {"dense/kernel", "dense/bias", "global_step"} <= tf_names & names


@pytest.mark.parametrize("layout", ["two DenseFeatures", "input_layer twice", "a named DenseFeatures"])
def test_tables_are_named_after_the_layer_that_read_them_as_tensorflow_does(tmp_path, layout):
    def build(api, model_dir, columns_api, layers):
        fc = api.feature_column
        user = columns_api.embedding_column(fc.categorical_column_with_identity("user", 6), 2)
        item = columns_api.embedding_column(fc.categorical_column_with_identity("item", 5), 2)
        shared = columns_api.shared_embedding_columns(
            [fc.categorical_column_with_identity("q2", 4), fc.categorical_column_with_identity("q1", 4)], 2
        )

        def outputs(features):
            if layout == "two DenseFeatures":
                a = layers.DenseFeatures([user])
                b = layers.DenseFeatures([item] + shared)
                return [b(features), a(features)]
            if layout == "input_layer twice":
                return [
                    api.compat.v1.feature_column.input_layer(features, [user]),
                    api.compat.v1.feature_column.input_layer(features, [item]),
                    layers.DenseFeatures(shared)(features),
                ]
            return [layers.DenseFeatures([user, item] + shared, name="towers")(features)]

        return user, item, shared, outputs

    batch = {k: np.array([[1], [2], [3], [1]], np.int64) for k in ("user", "item", "q1", "q2")}
    # TensorFlow.
    user, item, shared, outputs = build(tf, None, tf.compat.v1.tpu.experimental, tf.keras.layers)

    def tf_model_fn(features, labels, mode, params):
        loss = tf.add_n([tf.reduce_sum(o) for o in outputs(features)])
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, tf.compat.v1.train.get_global_step())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    spec = tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[user, item] + shared,
        optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(0.1),
    )
    tf_est = tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=tf_model_fn,
        config=tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(tmp_path / "tf")),
        use_tpu=False,
        train_batch_size=4,
        embedding_config_spec=spec,
    )
    tf_est.train(
        lambda params: tf.data.Dataset.from_tensors(
            ({k: tf.constant(v) for k, v in batch.items()}, tf.zeros([4]))
        ).repeat(),
        steps=1,
    )
    tf_tables = sorted(n for n in tf_est.get_variable_names() if n != "global_step")
    # This runner.
    user, item, shared, outputs = build(shim, None, shim.tpu.experimental, shim.keras.layers)

    def model_fn(features, labels, mode, params):
        out = outputs(features)
        return shim.estimator.tpu.TPUEstimatorSpec(
            mode, loss=0.0, train_op=lambda: None, embedding_gradients={o: np.ones_like(o) for o in out}
        )

    spec = shim.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[user, item] + shared, optimization_parameters=shim.tpu.experimental.AdagradParameters(0.1)
    )
    est = shim.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        train_batch_size=4,
        embedding_config_spec=spec,
        config=shim.estimator.tpu.RunConfig(model_dir=str(tmp_path / "ours")),
    )
    est.train(lambda params: batch, steps=1)
    tables = sorted(n for n in est.get_variable_names() if n != "global_step" and not n.endswith("/Adagrad"))
    assert tables == tf_tables


@pytest.mark.parametrize("warm_start", ["model_dir", "embedding regex"])
def test_tensorflows_tpu_estimator_warm_starts_from_our_model_dir(tmp_path, warm_start):
    est = ours(tmp_path / "ours", steps=3)
    source = str(tmp_path / "ours")
    settings = (
        source
        if warm_start == "model_dir"
        else tf.estimator.WarmStartSettings(source, vars_to_warm_start=".*embedding.*")
    )
    tf_est, _ = theirs(tmp_path / "theirs", steps=1, lr=0.0, warm_start_from=settings)  # lr 0: values stay
    for name in program.TABLES:
        np.testing.assert_array_equal(tf_est.get_variable_value(name), est.get_variable_value(name), err_msg=name)
    dense_equal = np.array_equal(tf_est.get_variable_value("dense/kernel"), est.get_variable_value("dense/kernel"))
    assert dense_equal == (warm_start == "model_dir")  # '.*embedding.*' leaves the dense layer as initialized


def test_tensorflows_tpu_estimator_resumes_from_our_model_dir(tmp_path):
    est = ours(tmp_path / "ours", steps=3)
    loss = est.evaluate(program.shim_input_fn, steps=1)["loss"]
    shutil.copytree(tmp_path / "ours", tmp_path / "theirs")
    # A model optimizer without slots: TensorFlow's Saver then needs only what we wrote (extra keys are ignored).
    tf_est, input_fn = theirs(tmp_path / "theirs", steps=0, optimizer="sgd")
    metrics = tf_est.evaluate(input_fn, steps=1)
    assert metrics["global_step"] == 3
    assert metrics["loss"] == pytest.approx(loss, rel=1e-5)  # float32, two implementations of the loss
    tf_est.train(input_fn, steps=1)
    assert tf_est.get_variable_value("global_step") == 4


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "rmsprop", "momentum", "ftrl"])
def test_we_resume_from_a_model_dir_tensorflow_wrote(tmp_path, optimizer):
    tf_est, input_fn = theirs(tmp_path / "m", steps=3, optimizer=optimizer)
    tf_loss = tf_est.evaluate(input_fn, steps=1)["loss"]
    est = program.shim_estimator(tmp_path / "m", optimizer=optimizer)
    metrics = est.evaluate(program.shim_input_fn, steps=1)
    assert metrics["global_step"] == 3
    assert metrics["loss"] == pytest.approx(tf_loss, rel=1e-5)  # float32, two implementations (1.2e-6 seen)
    cpu = {
        "adagrad": {"accumulators": "Adagrad"},
        "adam": {"momenta": "Adam", "velocities": "Adam_1"},
        "rmsprop": {"ms": "RMSProp", "mom": "RMSProp_1"},
        "momentum": {"momenta": "Momentum"},
        "ftrl": {"accumulators": "Ftrl", "linears": "Ftrl_1"},
    }[optimizer]
    for name in program.TABLES:
        np.testing.assert_array_equal(est.get_variable_value(name), tf_est.get_variable_value(name))
    table = "dense_features/user_embedding/embedding_weights"
    for slot, suffix in cpu.items():
        np.testing.assert_array_equal(
            est.engine.slots("tbl_user")[slot], tf_est.get_variable_value(f"{table}/{suffix}")
        )
    est.train(program.shim_input_fn, steps=1)
    assert est.latest_checkpoint() == str(tmp_path / "m" / "model.ckpt-4")
    assert tf.train.load_variable(str(tmp_path / "m"), "global_step") == 4  # TensorFlow reads on


def test_we_warm_start_from_tensorflow_and_tensorflow_reads_the_result(tmp_path):
    tf_est, _ = theirs(tmp_path / "tf", steps=3, optimizer="adam")
    est = program.shim_estimator(
        tmp_path / "ours",
        optimizer="adam",
        warm_start_from=shim.estimator.WarmStartSettings(str(tmp_path / "tf"), vars_to_warm_start=[".*embedding.*"]),
    )  # a list: the tables' slots too
    assert est.engine.global_step == 0
    for name, table in program.ENGINE_TABLES.items():
        np.testing.assert_array_equal(est.engine.table(table), tf_est.get_variable_value(name))
        slots = est.engine.slots(table)
        np.testing.assert_array_equal(slots["momenta"], tf_est.get_variable_value(name + "/Adam"))
        np.testing.assert_array_equal(slots["velocities"], tf_est.get_variable_value(name + "/Adam_1"))
    est.train(program.shim_input_fn, steps=1)
    reader = tf.train.load_checkpoint(str(tmp_path / "ours"))
    assert reader.get_tensor("global_step") == 1
    for name, table in program.ENGINE_TABLES.items():
        np.testing.assert_array_equal(reader.get_tensor(name), est.engine.table(table))
        np.testing.assert_array_equal(reader.get_tensor(name + "/Adam/m"), est.engine.slots(table)["momenta"])


def test_a_tpu_job_with_mod_hosts_restores_write_for_tpus_layout(tmp_path):
    """TensorFlow restores each host's part of a table from its row slice: with write_for_tpu, host i gets ids i::H."""
    from tpu_embedding_shim.checkpoints.program_checkpoint import write_for_tpu

    est = ours(tmp_path / "ours", steps=2, optimizer="adam")
    prefix = write_for_tpu(est.latest_checkpoint(), str(tmp_path / "tpu" / "model.ckpt-2"), num_hosts=3)
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        parts = {}
        for name, table in program.ENGINE_TABLES.items():  # as TPUEstimator's _create_partitioned_variables makes them
            for tensor in (name, name + "/Adam/m"):
                parts[tensor] = (
                    table,
                    list(
                        v1.get_variable(
                            tensor,
                            shape=program.TABLES[name],
                            initializer=v1.zeros_initializer(),
                            partitioner=v1.fixed_size_partitioner(3),
                        )
                    ),
                )
        saver = v1.train.Saver([v for _, vs in parts.values() for v in vs])
        with v1.Session() as session:
            saver.restore(session, prefix)
            for tensor, (table, variables) in parts.items():
                full = est.engine.table(table) if not tensor.endswith("/m") else est.engine.slots(table)["momenta"]
                for host, variable in enumerate(variables):
                    np.testing.assert_array_equal(session.run(variable), full[host::3], err_msg=f"{tensor} {host}")
