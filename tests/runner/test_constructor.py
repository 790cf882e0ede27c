"""TensorFlow's constructor checks: TPUEstimator, RunConfig, TPUConfig, the specs."""

import inspect

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.runner import EstimatorSpec, ModeKeys, TPUEstimatorSpec

from .problem import columns


def model_fn(features, labels, mode, params):
    raise AssertionError("not called")


def spec(**kwargs):
    return tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=columns()[2], optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1), **kwargs
    )


def make(tmp_path, **kwargs):
    args = dict(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path)),
        train_batch_size=8,
        embedding_config_spec=spec(),
    )
    args.update(kwargs)
    return tf.compat.v1.estimator.tpu.TPUEstimator(**args)


# (kwargs, exception, message) as TensorFlow 2.15 raises them.
CASES = [
    (dict(config=None), ValueError, "`config` must be provided with type `tpu_config.RunConfig`"),
    (dict(config=tf.estimator.RunConfig()), ValueError, "`config` must be provided with type `tpu_config.RunConfig`"),
    (
        dict(params={"batch_size": 3}),
        ValueError,
        r"\['batch_size', 'context'\] are reserved keys but existed in params",
    ),
    (dict(params={"context": 3}), ValueError, "are reserved keys"),
    (dict(params={"dense_state": {}}), ValueError, "reserved by this runner"),
    (dict(train_batch_size=None), ValueError, "`train_batch_size` cannot be `None`"),
    (dict(train_batch_size=0), ValueError, "train_batch_size must be positive, got 0"),
    (dict(train_batch_size=2.0), TypeError, "train_batch_size must be int, got <class 'float'>"),
    (dict(eval_batch_size=-1), ValueError, "eval_batch_size must be positive, got -1"),
    (dict(predict_batch_size="8"), TypeError, "predict_batch_size must be int"),
    (
        dict(
            config=tf.estimator.tpu.RunConfig(tpu_config=tf.estimator.tpu.TPUConfig(per_host_input_for_training=False))
        ),
        ValueError,
        "Only PER_HOST_V1 and PER_HOST_V2 is supported when using TPU Embedding; got 1.",
    ),
    (
        dict(
            config=tf.estimator.tpu.RunConfig(
                tpu_config=tf.estimator.tpu.TPUConfig(per_host_input_for_training=False, num_cores_per_replica=2)
            )
        ),
        ValueError,
        "Model parallelism only supports per host input for training",
    ),
    (
        dict(model_fn=lambda features, labels, mode: None, params={"lr": 1}),
        ValueError,
        r"does not include params argument, but params \(\{'lr': 1\}\) is passed to Estimator",
    ),
    (dict(model_fn=lambda labels, mode, params: None), ValueError, "must include features argument"),
    (dict(model_fn=lambda features, params, extra: None), ValueError, r"has following not expected args: \['extra'\]"),
    (dict(model_fn=None), ValueError, "model_fn must be provided"),
    (dict(export_saved_model_api_version=3), ValueError, "export_saved_model_api_version should be 1 or 2; got 3."),
    (dict(embedding_config_spec={"feature_columns": []}), TypeError, "must be an EmbeddingConfigSpec"),
    (
        dict(model_dir="/a", config=tf.estimator.tpu.RunConfig(model_dir="/b")),
        ValueError,
        "`model_dir` are set both in constructor and `RunConfig`, but with different values",
    ),
]


@pytest.mark.parametrize("kwargs, error, message", CASES, ids=[str(i) for i in range(len(CASES))])
def test_constructor_checks(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        make(tmp_path, **kwargs)


def test_accepted_where_tensorflow_accepts(tmp_path):
    # TensorFlow refuses mod sharding whenever anything runs on CPU; here both strategies work.
    est = make(tmp_path, use_tpu=False, train_batch_size=None, embedding_config_spec=spec(partition_strategy="mod"))
    assert est.embedding_config_spec.partition_strategy == "mod"
    make(tmp_path, eval_on_tpu=False, embedding_config_spec=spec(partition_strategy="mod"))
    # use_tpu=False: no batch size needed; TPU input checks don't apply.
    make(
        tmp_path,
        use_tpu=False,
        train_batch_size=None,
        config=tf.estimator.tpu.RunConfig(tpu_config=tf.estimator.tpu.TPUConfig(per_host_input_for_training=False)),
    )
    # model_dir from the config, or a temporary directory.
    est = make(tmp_path, config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path / "c")))
    assert est.model_dir == str(tmp_path / "c") and est.config.model_dir == str(tmp_path / "c")
    assert make(tmp_path, config=tf.estimator.tpu.RunConfig()).model_dir
    # model_fn may also take config; params are deep-copied.
    params = {"lr": [1]}
    est = make(tmp_path, model_fn=lambda features, labels, mode, params, config: None, params=params)
    params["lr"].append(2)
    assert est.params == {"lr": [1]}


RUN_CONFIG_CASES = [
    (
        dict(save_checkpoints_steps=10, save_checkpoints_secs=10),
        ValueError,
        "Can not provide both save_checkpoints_steps and save_checkpoints_secs.",
    ),
    (dict(save_checkpoints_steps=-1), ValueError, "save_checkpoints_steps should be >= 0"),
    (dict(keep_checkpoint_max=-1), ValueError, "keep_checkpoint_max should be >= 0"),
    (dict(log_step_count_steps=-5), ValueError, "log_step_count_steps should be >= 0"),
    (dict(model_dir=""), ValueError, "model_dir should be non-empty"),
    (dict(tf_random_seed=1.5), ValueError, "tf_random_seed must be integer."),
    (dict(tpu_config={"iterations_per_loop": 2}), TypeError, "must be a TPUConfig"),
]


@pytest.mark.parametrize("kwargs, error, message", RUN_CONFIG_CASES, ids=[str(i) for i in range(len(RUN_CONFIG_CASES))])
def test_run_config_checks(kwargs, error, message):
    with pytest.raises(error, match=message):
        tf.estimator.tpu.RunConfig(**kwargs)


def test_run_config_defaults_and_replace():
    config = tf.estimator.tpu.RunConfig()
    assert (config.save_checkpoints_steps, config.save_checkpoints_secs) == (None, 600)
    assert config.keep_checkpoint_max == 5 and config.log_step_count_steps == 100
    config = tf.estimator.tpu.RunConfig(save_checkpoints_steps=7)
    assert (config.save_checkpoints_steps, config.save_checkpoints_secs) == (7, None)
    replaced = config.replace(save_checkpoints_secs=30)
    assert (replaced.save_checkpoints_steps, replaced.save_checkpoints_secs) == (None, 30)
    assert isinstance(replaced, tf.compat.v1.estimator.tpu.RunConfig) and replaced.tpu_config == config.tpu_config
    with pytest.raises(ValueError, match="not a valid RunConfig property"):
        config.replace(bogus=1)


TPU_CONFIG_CASES = [
    (dict(iterations_per_loop=0), ValueError, "Invalid TPUConfig `iterations_per_loop` value"),
    (dict(iterations_per_loop="10x"), ValueError, "Invalid TPUConfig `iterations_per_loop` value"),
    (dict(num_shards=0), ValueError, "TPUConfig num_shards must be positive, got 0"),
    (dict(num_shards=2.0), TypeError, "TPUConfig num_shards must be int"),
    (dict(num_cores_per_replica=3), ValueError, "num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64, 128; got 3"),
    (
        dict(eval_training_input_configuration=3),
        ValueError,
        "eval_training_input_configuration must be PER_HOST_V1 or SLICED",
    ),
    (
        dict(input_partition_dims=[[1], [1], [1]]),
        ValueError,
        "input_partition_dims must be a list/tuple with one or two",
    ),
    (dict(input_partition_dims=[[1, 2]]), ValueError, "input_partition_dims is only supported in PER_HOST_V2 mode."),
    (dict(initial_infeed_sleep_secs=-1), ValueError, "TPUConfig initial_infeed_sleep_secs must be positive"),
]


@pytest.mark.parametrize("kwargs, error, message", TPU_CONFIG_CASES, ids=[str(i) for i in range(len(TPU_CONFIG_CASES))])
def test_tpu_config_checks(kwargs, error, message):
    with pytest.raises(error, match=message):
        tf.estimator.tpu.TPUConfig(**kwargs)


def test_tpu_config_fields():
    config = tf.estimator.tpu.TPUConfig(iterations_per_loop="30s", num_shards=4, per_host_input_for_training=True)
    assert config.iterations_per_loop == "30s" and config.num_shards == 4
    assert config.per_host_input_for_training == tf.estimator.tpu.InputPipelineConfig.PER_HOST_V1
    assert config._replace(num_shards=2).num_shards == 2
    with pytest.raises(ValueError, match="TPUConfig num_shards must be positive"):
        config._replace(num_shards=0)  # checked again
    assert isinstance(config, tuple) and config._fields[:2] == ("iterations_per_loop", "num_shards")
    assert config == tuple(config) and config[1] == 4


# str(inspect.signature(...)) of TensorFlow 2.15.1 (tensorflow-estimator 2.15), plus the project's
# `embedding_gradients` field at the end of each spec.
TF_SPEC_SIGNATURES = {
    EstimatorSpec: "(mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None, export_outputs=None, "
    "training_chief_hooks=None, training_hooks=None, scaffold=None, evaluation_hooks=None, prediction_hooks=None",
    TPUEstimatorSpec: "(mode, predictions=None, loss=None, train_op=None, eval_metrics=None, export_outputs=None, "
    "scaffold_fn=None, host_call=None, training_hooks=None, evaluation_hooks=None, prediction_hooks=None",
}


@pytest.mark.parametrize("spec", list(TF_SPEC_SIGNATURES), ids=lambda spec: spec.__name__)
def test_specs_have_tensorflows_signature_and_fields(spec):
    assert str(inspect.signature(spec)) == TF_SPEC_SIGNATURES[spec] + ", embedding_gradients=None)"
    made = spec(ModeKeys.PREDICT, {"p": 1})  # positionally, in TensorFlow's order
    assert made.predictions == {"p": 1} and made._fields[-1] == "embedding_gradients"
    assert made == spec(mode=ModeKeys.PREDICT, predictions={"p": 1}) and repr(made).startswith(spec.__name__ + "(")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        spec(ModeKeys.PREDICT, predictions=1, bogus=2)


SPEC_CASES = [
    (lambda: EstimatorSpec("bogus", loss=1.0), ValueError, "mode must be one of"),
    (lambda: EstimatorSpec(ModeKeys.TRAIN, train_op=lambda: None), ValueError, "Missing loss."),
    (lambda: EstimatorSpec(ModeKeys.TRAIN, loss=1.0), ValueError, "Missing train_op."),
    (lambda: EstimatorSpec(ModeKeys.EVAL), ValueError, "Missing loss."),
    (lambda: EstimatorSpec(ModeKeys.PREDICT), ValueError, "Missing predictions."),
    (lambda: EstimatorSpec(ModeKeys.TRAIN, loss=1.0, train_op="minimize"), TypeError, "zero-argument callable"),
    (
        lambda: TPUEstimatorSpec(ModeKeys.EVAL, loss=1.0, eval_metrics=lambda: None),
        ValueError,
        "eval_metrics should be tuple or list",
    ),
    (
        lambda: TPUEstimatorSpec(ModeKeys.EVAL, loss=1.0, eval_metrics=(lambda: None,)),
        ValueError,
        "eval_metrics should have two elements.",
    ),
    (lambda: TPUEstimatorSpec(ModeKeys.EVAL, loss=1.0, eval_metrics=(1, [])), TypeError, "should be callable"),
]


@pytest.mark.parametrize("make_spec, error, message", SPEC_CASES, ids=[str(i) for i in range(len(SPEC_CASES))])
def test_spec_checks(make_spec, error, message):
    with pytest.raises(error, match=message):
        make_spec()


def test_mode_keys_and_namespaces():
    assert (tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.EVAL, tf.estimator.ModeKeys.PREDICT) == (
        "train",
        "eval",
        "infer",
    )
    assert tf.estimator.tpu.TPUEstimator is tf.compat.v1.estimator.tpu.TPUEstimator
    assert tf.estimator.tpu.TPUEstimatorSpec is tf.compat.v1.estimator.tpu.TPUEstimatorSpec
    assert tf.compat.v1.estimator.EstimatorSpec is tf.estimator.EstimatorSpec
    spec = TPUEstimatorSpec(ModeKeys.PREDICT, predictions={"p": np.zeros(2)})
    assert spec._fields[-1] == "embedding_gradients"
