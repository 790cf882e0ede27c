"""Public programs that use TensorFlow's TPU-embedding APIs, run as their users run them, in the drop-in mode.

- tensorflow/models' ranking trainer (`official.recommendation.ranking.train`, from tf-models-official 2.15):
  DLRM and DCN through TensorFlow Recommenders' `PartialTPUEmbedding` and `Ranking` model, on its synthetic
  data, with `runtime.distribution_strategy: tpu`; Keras `fit` and Orbit's custom loop; and its own tests
  of the TPU strategy. Needs tf-models-official and tensorflow-recommenders (installed with `--no-deps`,
  .ci/run's TensorFlow 2.15 venv says which few packages more); skips without them.
- A TF1 graph program (`disable_v2_behavior()`, sessions) with the mid-level `TPUEmbedding`
  (`unchanged_programs/tf1_midlevel_graph.py`).
- TensorFlow's train-then-serve pattern: `TPUEmbedding` under the strategy, its checkpoint restored into
  `TPUEmbeddingForServing` with `assert_consumed()` (`unchanged_programs/serving_restores_tpu_checkpoint.py`).
- A TPUEstimator with TensorFlow's own v1 `TableConfig` / `FeatureConfig` config dicts
  (`unchanged_programs/estimator_config_dicts.py`; TensorFlow 2.15, which still has them).
- A TPUEstimator with the mechanics public TPU model code uses beside its embeddings: `host_call` summaries,
  `tf.compat.v1.summary` in the model_fn, session hooks (the spec's and `train`'s), a
  `CheckpointSaverListener`, `eval_metrics` with a dict of tensors, `predict`, and a `scaffold_fn` warm start
  with `init_from_checkpoint` (`unchanged_programs/estimator_hooks_host_call.py`).
- A program that builds its strategy from the TPU system (`initialize_tpu_system`'s `Topology`,
  `get_tpu_system_metadata()`, `DeviceAssignment.build`) and trains a Keras model (Keras 3 or 2) whose layer
  drives a positionally made `TPUEmbedding(feature_config, None, False)`
  (`unchanged_programs/device_assignment_keras_fit.py`).
- keras-rs's `DistributedEmbedding` on its TensorFlow backend (Keras 3), which builds TensorFlow's mid-level
  `TPUEmbedding` itself (`unchanged_programs/keras_rs_distributed_embedding.py`; needs keras-rs, which CI
  installs in the newest TensorFlow's venv with `--no-deps`; skips without it).

Each runs in a subprocess, `python -m tpu_embedding_shim.tensorflow ...`, on a tiny configuration:

    python -m pytest tests/tf_bridge/test_public_programs.py -q
"""

import ast
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow

import tpu_embedding_shim.tensorflow as shim

from .tf_versions import needs_keras_2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unchanged_programs")
ENGINE_STEP = "/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step"


def run(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=900, cwd=cwd, env=env)


def needs_ranking():
    """Skips unless tensorflow/models' ranking trainer and TFRS are installed and import (TFRS refuses Keras 3)."""
    for name in ("tensorflow_recommenders", "official.recommendation.ranking"):
        try:
            __import__(name)
        except ImportError as error:
            pytest.skip(
                "needs tf-models-official and tensorflow-recommenders with Keras 2 (pip install --no-deps "
                f"tf-models-official==2.15.0 tensorflow-recommenders==0.7.3, and the few packages .ci/run names): "
                f"{error}"
            )


def ranking_params(*, steps, use_orbit, interaction="dot", size_threshold=0):
    """The trainer's `--params_override`: three tiny tables, 16 examples a batch, a checkpoint every 3 steps.

    `size_threshold` is the trainer's: tables larger than it are TPU tables (the engine's), the others Keras's.
    """
    return json.dumps(
        {
            "runtime": {"distribution_strategy": "tpu"},
            "task": {
                "use_synthetic_data": True,
                "model": {
                    "num_dense_features": 3,
                    "vocab_sizes": [40, 30, 20],
                    "embedding_dim": 4,
                    "bottom_mlp": [8, 4],
                    "top_mlp": [8, 1],
                    "size_threshold": size_threshold,
                    "interaction": interaction,
                },
                "train_data": {"global_batch_size": 16},
                "validation_data": {"global_batch_size": 16},
            },
            "trainer": {
                "train_steps": steps,
                "validation_interval": 3,
                "validation_steps": 2,
                "checkpoint_interval": 3,
                "use_orbit": use_orbit,
            },
        }
    )


def train_ranking(model_dir, mode="train_and_eval", **params):
    result = run(
        "-m", "tpu_embedding_shim.tensorflow", "-m", "official.recommendation.ranking.train",
        f"--mode={mode}", f"--model_dir={model_dir}", f"--params_override={ranking_params(**params)}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def checkpoint(model_dir, step):
    """{key: value} of the trainer's checkpoint at `step`, keys without TensorFlow's suffix."""
    reader = tensorflow.train.load_checkpoint(os.path.join(str(model_dir), f"ckpt-{step}"))
    names = reader.get_variable_to_shape_map()
    return {name.replace("/.ATTRIBUTES/VARIABLE_VALUE", ""): reader.get_tensor(name) for name in names}


def engine_tables(values):
    """The engine's tables in a checkpoint: {table name: array}."""
    prefix = "model/_embedding_layer/_tpu_embedding/_tpu_embedding/"
    return {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix) and "embedding_table" in k}


def test_the_ranking_trainer_trains_dlrm_with_keras_fit_on_the_engine_and_resumes_from_its_checkpoint(tmp_path):
    needs_ranking()
    model_dir = tmp_path / "model"
    result = train_ranking(model_dir, steps=6, use_orbit=False)
    assert "tpu_embedding_shim: TensorFlow's TPU-embedding names run on the CPU engine" in result.stderr
    assert "CPU embedding engine: 3 table(s)" in result.stderr
    assert "never applied" not in result.stderr  # evaluation's batches enqueue for training, and are not trained
    history = ast.literal_eval(re.search(r"Train history: (\{.*\})", result.stderr).group(1))
    for name in ("loss", "auc", "accuracy", "val_loss", "val_auc"):
        assert len(history[name]) == 2 and all(math.isfinite(v) for v in history[name]), (name, history)
    assert (model_dir / "params.yaml").exists()

    at_3, at_6 = checkpoint(model_dir, 3), checkpoint(model_dir, 6)
    assert at_3["model/_embedding_layer/_tpu_embedding/_tpu_embedding" + ENGINE_STEP] == 3
    assert at_6["model/_embedding_layer/_tpu_embedding/_tpu_embedding" + ENGINE_STEP] == 6  # one engine step a batch
    tables_3, tables_6 = engine_tables(at_3), engine_tables(at_6)
    assert sorted(tables_6) == ["embedding_table_00", "embedding_table_01", "embedding_table_02"]
    assert tables_6["embedding_table_00"].shape == (40, 4)
    assert all(not np.array_equal(tables_3[name], tables_6[name]) for name in tables_6)  # trained by the engine

    # Run again with more steps: it restores the tables and the engine step from ckpt-6 and goes on to 9.
    result = train_ranking(model_dir, steps=9, use_orbit=False)
    assert f"Loaded checkpoint {model_dir / 'ckpt-6'}" in result.stderr
    at_9 = checkpoint(model_dir, 9)
    assert at_9["model/_embedding_layer/_tpu_embedding/_tpu_embedding" + ENGINE_STEP] == 9


def test_the_ranking_trainer_trains_dcn_with_orbit_on_the_engine_beside_a_keras_table(tmp_path):
    """Orbit's custom loop (`use_orbit: true`, TensorFlow's preemption handler reads the resolver's cluster spec);
    the table of 20 rows is under `size_threshold`, so TFRS gives it to Keras and the two larger ones to the
    engine."""
    needs_ranking()
    model_dir = tmp_path / "model"
    result = train_ranking(model_dir, steps=6, use_orbit=True, interaction="cross", size_threshold=25)
    assert "CPU embedding engine: 2 table(s)" in result.stderr
    assert "never applied" not in result.stderr
    losses = [float(v) for v in re.findall(r"'training_loss': ([-0-9.e]+)", result.stderr)]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses), result.stderr[-3000:]
    assert "'validation_loss':" in result.stderr and "'auc':" in result.stderr
    values = checkpoint(model_dir, 6)
    assert values["model/_embedding_layer/_tpu_embedding/_tpu_embedding" + ENGINE_STEP] == 6
    assert sorted(engine_tables(values)) == ["embedding_table_00", "embedding_table_01"]
    assert any(k.startswith("model/_embedding_layer/_keras_embedding_layers/") for k in values)
    assert (model_dir / "train").is_dir() and (model_dir / "validation").is_dir()  # Orbit's summaries


def test_the_ranking_trainers_own_tests_of_the_tpu_strategy_pass_in_the_mode():
    """Its tests run as `python train_test.py` runs them; their tables are under the default `size_threshold`,
    so TFRS gives them all to Keras, as it would on a TPU: the engine is not built."""
    needs_ranking()
    tests = ["TrainTest.testTrainThenEvalDcnTPUCTL"]  # train, then evaluate from the checkpoint; Orbit
    result = run("-m", "tpu_embedding_shim.tensorflow", "-m", "official.recommendation.ranking.train_test", *tests)
    assert result.returncode == 0, result.stderr[-4000:]
    assert re.search(r"Ran 1 test in .*\n\nOK", result.stderr)
    assert "TPUStrategy: in-process CPU emulation" in result.stderr


def test_a_tf1_graph_program_trains_the_mid_level_tables_on_the_engine(tmp_path):
    program = os.path.join(PROGRAMS, "tf1_midlevel_graph.py")
    result = run("-m", "tpu_embedding_shim.tensorflow", program, str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "result.json").read_text())
    assert report["strategy"] == "tpu_embedding_shim.tensorflow._distribute"
    assert report["embedding"] == "tpu_embedding_shim.tensorflow._midlevel"
    assert report["engine_step"] == 5  # five session.run calls of the step
    assert len(report["losses"]) == 5 and all(math.isfinite(v) for v in report["losses"])
    assert {"weights", "bias"} <= set(report["checkpoint_keys"])  # the TF1 Saver's checkpoint of the graph


def test_a_learning_rate_callable_returning_a_tensor_sets_the_step_size():
    """TFRS hands a Keras schedule to the mid-level optimizer as `lambda: schedule(iterations)`, which returns a
    0-d tensor, as TensorFlow's callables do."""
    tf = tensorflow
    with shim.activated():
        strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver(tpu=""))
        table = tf.tpu.experimental.embedding.TableConfig(
            vocabulary_size=4, dim=2, initializer=tf.zeros_initializer(), name="t"
        )
        with strategy.scope():
            embedding = tf.tpu.experimental.embedding.TPUEmbedding(
                {"f": tf.tpu.experimental.embedding.FeatureConfig(table=table)},
                tf.tpu.experimental.embedding.SGD(learning_rate=lambda: tf.constant(0.5) * 2),
            )
        embedding.enqueue({"f": tf.constant([1, 3])}, training=True)
        embedding.dequeue()
        embedding.apply_gradients({"f": tf.ones((2, 2))})
        after = np.array(embedding.embedding_tables[table])
    np.testing.assert_allclose(after, [[0, 0], [-1, -1], [0, 0], [-1, -1]])


def make_embedding(tf, strategy):
    table = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=4, dim=2, initializer=tf.zeros_initializer())
    with strategy.scope():
        embedding = tf.tpu.experimental.embedding.TPUEmbedding(
            {"f": tf.tpu.experimental.embedding.FeatureConfig(table=table)}, tf.tpu.experimental.embedding.SGD(1.0)
        )
    return embedding, table


def test_a_named_training_enqueue_without_an_apply_of_its_name_in_the_graph_runs_as_evaluation():
    """TensorFlow's graph pass: TFRS's layer enqueues with `training=True` and a name in every Keras step; in an
    evaluation step (no `apply_gradients` of that name) the batch is looked up and not held for a gradient."""
    tf = tensorflow
    with shim.activated():
        strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver(tpu=""))
        embedding, table = make_embedding(tf, strategy)
        ids = {"f": tf.constant([1, 3])}

        @tf.function
        def evaluate():
            embedding.enqueue(ids, training=True, name="1")
            return embedding.dequeue(name="1")["f"]

        @tf.function
        def train():
            embedding.enqueue(ids, training=True, name="1")
            activations = embedding.dequeue(name="1")
            embedding.apply_gradients({"f": tensorflow.ones_like(activations["f"])}, name="1")

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "gradients were never applied" warning
            evaluate()
            evaluate()
            assert embedding.engine.global_step == 0
            train()
        assert embedding.engine.global_step == 1
        np.testing.assert_allclose(np.array(embedding.embedding_tables[table])[1], [-1, -1])

        @tf.function
        def unnamed():
            embedding.enqueue(ids, training=True)
            return embedding.dequeue()["f"]

        unnamed()
        with pytest.warns(UserWarning, match="never applied"):  # without a name, training=True is what it says
            unnamed()


def test_the_resolvers_cluster_spec_is_tensorflows_type_and_empty():
    """TensorFlow's utilities read it (`PreemptionCheckpointHandler`: `.as_dict()`, `.jobs`): one local task."""
    with shim.activated():
        resolver = tensorflow.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    spec = resolver.cluster_spec()
    assert isinstance(spec, tensorflow.train.ClusterSpec)
    assert spec.as_dict() == {} and spec.jobs == []


def test_tpu_embedding_for_serving_restores_a_checkpoint_taken_under_the_strategy_and_consumes_all_of_it(tmp_path):
    """TensorFlow's documented train-then-serve pattern: `assert_consumed()` passes (the engine's step, saved beside
    the tables, is taken and ignored by the serving object), and the SavedModel serves the trained rows."""
    program = os.path.join(PROGRAMS, "serving_restores_tpu_checkpoint.py")
    result = run("-m", "tpu_embedding_shim.tensorflow", program, str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "result.json").read_text())
    assert report["losses"][-1] < report["losses"][0]
    trained = np.array(report["trained"], np.float32)
    np.testing.assert_array_equal(np.array(report["served_table"], np.float32), trained)
    np.testing.assert_allclose(report["served"][0], trained[2] + trained[5], rtol=1e-6)  # combiner "sum"
    np.testing.assert_array_equal(report["reloaded"], report["served"])


def test_a_tpu_estimator_with_tensorflows_own_v1_config_dicts_trains_the_tables_on_the_engine(tmp_path):
    """`tensorflow.python.tpu.tpu_embedding.TableConfig` takes the mode's `FtrlParameters`, the mode's
    `EmbeddingConfigSpec` takes TensorFlow's config objects, and the model_fn reads activations in `features`."""
    pytest.importorskip("tensorflow.python.tpu.tpu_embedding", reason="TensorFlow 2.16 removed the v1 configs")
    program = os.path.join(PROGRAMS, "estimator_config_dicts.py")
    result = run("-m", "tpu_embedding_shim.tensorflow", program, str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "result.json").read_text())
    assert report["global_step"] == 5
    assert report["shapes"] == {"genre": [None, 4], "artist": [None, 4]}  # [batch, dimension] activations
    assert {"genre_table", "genre_table/Ftrl", "artist_table", "dense/kernel"} <= set(report["names"])
    assert report["genre_table_moved"] > 0  # the table's own FtrlParameters trained it on the engine
    assert math.isfinite(report["eval_loss"])


@needs_keras_2  # the program's tf.compat.v1.layers.dense is Keras 2's
def test_a_tpu_estimator_runs_its_hooks_host_call_summaries_and_scaffold_warm_start_around_the_engine(tmp_path):
    pytest.importorskip("tensorboard", reason="tf.summary.scalar needs TensorBoard (TensorFlow 2.21 leaves it out)")
    program = os.path.join(PROGRAMS, "estimator_hooks_host_call.py")
    result = run("-m", "tpu_embedding_shim.tensorflow", program, str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "result.json").read_text())
    assert report["bad_hook"].startswith("All hooks must be SessionRunHook instances, given: not a hook")
    assert report["step_after_stop_hook"] == 6  # StopAtStepHook(last_step=6) on a dataset of 8 batches
    assert report["listener"] == ["begin", 4, 6, "end 6"]  # save_checkpoints_steps=4, and the final save
    assert report["step_after_dataset"] == 14  # train() without steps: the 8 batches, then the dataset's end
    assert report["logged_steps"][:4] == [1, 3, 5, 7]  # the spec's LoggingTensorHook, every_n_iter=2
    assert report["checkpoints"] == ["model.ckpt-12.index", "model.ckpt-14.index"]  # keep_checkpoint_max=2
    assert report["tags"] == ["graph_loss"]  # tf.compat.v1.summary.scalar, every save_summary_steps
    assert report["host_tags"] == ["host_loss"]  # the host_call's v2 summary writer, flushed at the end
    assert set(report["metrics"]) == {"auc", "accuracy", "loss", "global_step"}
    assert report["metrics"]["global_step"] == 14
    assert report["examples"] == [["item", "probability"]] * 64
    assert report["batches"] == [8] * 8
    # scaffold_fn's init_from_checkpoint started the second model from the first's dense kernel (then one step)
    np.testing.assert_allclose(report["warm_started_kernel"], report["first_kernel"], atol=0.05)


def test_the_modes_v1_parameters_meet_tensorflows_own_v1_configs_and_unknown_ones_are_refused():
    tpu_embedding = pytest.importorskip("tensorflow.python.tpu.tpu_embedding", reason="TensorFlow 2.16 removed it")
    tf = tensorflow
    with shim.activated():
        ours = tf.compat.v1.tpu.experimental.AdagradParameters(0.3)
        table = tpu_embedding.TableConfig(vocabulary_size=5, dimension=2, optimization_parameters=ours)
        spec = tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_to_config_dict={"f": tpu_embedding.FeatureConfig("t")},
            table_to_config_dict={"t": table},
            optimization_parameters=tpu_embedding.StochasticGradientDescentParameters(0.2),  # TensorFlow's own
        )
        assert spec.table_to_config_dict["t"].optimization_parameters is ours
        assert type(spec.optimization_parameters) is tf.compat.v1.tpu.experimental.StochasticGradientDescentParameters
        assert spec.optimization_parameters.learning_rate == 0.2
        with pytest.raises(ValueError, match="ProximalYogiParameters has no CPU implementation"):
            tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
                feature_to_config_dict={"f": tpu_embedding.FeatureConfig("t")},
                table_to_config_dict={"t": table},
                optimization_parameters=tpu_embedding.ProximalYogiParameters(0.1),
            )


def test_a_program_sizes_its_strategy_from_the_tpu_system_and_keras_fit_trains_a_positional_tpu_embedding(tmp_path):
    """`initialize_tpu_system` returns TensorFlow's `Topology` and the resolver TensorFlow's `TPUSystemMetadata`
    (one core a process), which `DeviceAssignment.build` takes; `TPUEmbedding(feature_config, None, False)` is
    TensorFlow's positional form with no global optimizer (each table has its own), not TF 2.3's batch size."""
    program = os.path.join(PROGRAMS, "device_assignment_keras_fit.py")
    result = run("-m", "tpu_embedding_shim.tensorflow", program, str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "result.json").read_text())
    assert report["topology"] == [1, 1] and report["num_cores"] == 1 and report["replicas"] == [1, 1]
    assert report["embedding_feature"] == "V1"
    assert report["losses"][-1] < report["losses"][0] and math.isfinite(report["evaluate"])
    assert report["predict"] == [32, 1]
    assert report["engine_step"] == 12  # 3 epochs of 4 batches: fit trains, evaluate and predict do not
    assert report["moved"]["songs"] > 0 and report["moved"]["moods"] > 0  # each by its own table's optimizer


def test_keras_rs_distributed_embedding_on_its_tensorflow_backend_trains_the_tables_on_the_engine(tmp_path):
    """keras-rs finds the stand-in's embedding feature V1 and builds `TPUEmbedding(configs, None, False)`; `fit`
    trains the tables on the engine (one step a batch), `evaluate` and `predict` look up without training, and
    its documented `strategy.run` loop applies the tables' gradients through the layer's custom gradient."""
    if importlib.util.find_spec("keras_rs") is None or importlib.util.find_spec("keras") is None:
        pytest.skip("needs keras-rs and Keras 3 (pip install --no-deps keras-rs==0.4.0, as .ci/run does)")
    program = os.path.join(PROGRAMS, "keras_rs_distributed_embedding.py")
    result = run("-m", "tpu_embedding_shim.tensorflow", program, str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "result.json").read_text())
    assert report["module"] == "tpu_embedding_shim.tensorflow._midlevel"
    assert report["losses"][-1] < report["losses"][0] and math.isfinite(report["evaluate"])
    assert report["predict"] == [32, 1]
    assert report["step_after_fit"] == 12 and report["evaluate_changed_nothing"]
    assert report["step_after_loop"] == 14 and math.isfinite(report["loop_loss"])
