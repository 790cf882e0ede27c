"""`tpu-embedding-shim movielens --dense tf`: the job's model with its dense part in TensorFlow (model_tf.py).

The command line and the missing-TensorFlow error are tested everywhere (TensorFlow's absence is simulated
where it is installed). The TensorFlow tests run where the `tensorflow` extra is installed (a separate venv):

    python -m pytest tests/movielens/test_dense_tf.py -q
"""

import importlib.abc
import json
import os
import re
import sys
import types

import numpy as np
import pytest

from tpu_embedding_shim import cli
from tpu_embedding_shim.movielens import data as ml_data
from tpu_embedding_shim.movielens import job
from tpu_embedding_shim.movielens import model as ml_model

from .test_movielens import TINY_RUN, make_wheel, quiet_config

EXTRA = f"`{job.TF_INSTALL}`"  # the packages themselves: the project is on no package index


@pytest.fixture(scope="module")
def tiny_wheel(tmp_path_factory):
    return make_wheel(tmp_path_factory.mktemp("wheel") / "recbole-1.2.1-py3-none-any.whl")


@pytest.fixture
def tensorflow():
    return pytest.importorskip(
        "tensorflow", reason=f"--dense tf needs TensorFlow (the `tensorflow` extra: {EXTRA}, in a separate venv)"
    )


class _NoTensorFlow(importlib.abc.MetaPathFinder):
    """Refuses TensorFlow as an absent package is refused."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


@pytest.fixture
def no_tensorflow(monkeypatch):
    """TensorFlow cannot be imported (as without the extra), even where it is installed and already imported."""
    for name in ("tensorflow", "tpu_embedding_shim.tensorflow", "tpu_embedding_shim.movielens.model_tf"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # restored after the test
    monkeypatch.setattr(sys, "meta_path", [_NoTensorFlow(), *sys.meta_path])


def _no_download(*args, **kwargs):
    raise AssertionError("the job read or downloaded the data")


@pytest.mark.parametrize("argv, dense", [([], "numpy"), (["--dense", "numpy"], "numpy"), (["--dense", "tf"], "tf")])
def test_the_command_line_passes_the_dense_backend_to_the_job(monkeypatch, tmp_path, argv, dense):
    configs = []
    monkeypatch.setattr(job, "tf_model_module", lambda: types.ModuleType("model_tf"))  # TensorFlow or not
    monkeypatch.setattr(job, "run", configs.append)
    assert cli.main(["movielens", "--output-dir", str(tmp_path / "out"), *argv]) == 0
    assert [config.dense for config in configs] == [dense]


def test_the_command_line_refuses_an_unknown_dense_backend(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["movielens", "--dense", "torch", "--output-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "argument --dense: invalid choice: 'torch' (choose from 'numpy', 'tf')" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_command_line_help_shows_the_dense_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["movielens", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--dense {numpy,tf}" in text and "(needs TensorFlow) (default: numpy)" in text


@pytest.mark.parametrize("dense", ["TF", "tensorflow", "", None])
def test_a_bad_dense_option_is_a_value_error_naming_it(dense):
    with pytest.raises(ValueError, match=r"Option `dense` must be one of \['numpy', 'tf'\]. Received: "):
        job.JobConfig(dense=dense)


def test_without_tensorflow_the_command_line_names_the_extra_before_any_work(
    no_tensorflow, monkeypatch, capsys, tmp_path
):
    monkeypatch.setattr(ml_data, "load", _no_download)
    monkeypatch.setattr(ml_data, "fetch", _no_download)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["movielens", "--dense", "tf", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err  # argparse's usage error
    assert "--dense tf) needs TensorFlow" in err and EXTRA in err and "--dense numpy" in err
    assert not (tmp_path / "out").exists()


def test_without_tensorflow_run_raises_import_error_before_any_work(no_tensorflow, monkeypatch, tmp_path):
    monkeypatch.setattr(ml_data, "load", _no_download)
    message = re.escape(
        f"needs TensorFlow, which is not installed (No module named 'tensorflow'). Install it with {EXTRA}"
    )
    with pytest.raises(ImportError, match=message):
        job.run(job.JobConfig(output_dir=str(tmp_path / "out"), dense="tf", plot=False), echo=lambda line: None)
    assert not (tmp_path / "out").exists()


def test_an_import_error_other_than_a_missing_tensorflow_is_raised_as_it_is(monkeypatch):
    monkeypatch.setitem(sys.modules, "tpu_embedding_shim.movielens.model_tf", None)  # e.g. a broken install
    with pytest.raises(ImportError) as error_info:
        job.tf_model_module()
    assert "model_tf" in str(error_info.value) and "is not installed" not in str(error_info.value)


def test_the_tf_job_trains_evaluates_and_writes_its_outputs(tensorflow, tiny_wheel, tmp_path):
    out = tmp_path / "out"
    lines = []
    result = job.run(quiet_config(out, tiny_wheel, **TINY_RUN, dense="tf"), echo=lines.append)
    assert result.dense == "tf"
    assert result.global_step == 3 * int(np.ceil(600 / 32))
    assert result.train_loss[-1] < result.train_loss[0]
    assert all(0.0 <= auc <= 1.0 for auc in result.test_auc) and result.test_auc[-1] > 0.5
    saved = json.load(open(out / "results.json"))
    assert saved["dense"] == "tf" and saved["test_auc"] == result.test_auc
    assert os.path.isfile(result.checkpoint + ".index")
    assert os.path.isfile(os.path.join(result.export_dir, "manifest.json"))
    assert any(line.startswith("TPU-embedding model (tf)") for line in lines)
    # the dense part that trained is TensorFlow's: its variables, under their TF names, in the TF checkpoint
    names = tensorflow.train.load_checkpoint(str(out / "model")).get_variable_to_shape_map()
    assert {"dense/kernel", "dense/kernel/Adam", "dense_1/kernel", "beta1_power"} <= set(names)


def _activations_model_fn_for(pooled_columns, sequence_columns, layout, dims, **kwargs):
    """A model_fn predicting the feature layers' outputs: what the TF dense part reads."""
    import tpu_embedding_shim.tensorflow as tf

    def model_fn(features, labels, mode, params):
        pooled = tf.keras.layers.DenseFeatures(pooled_columns)(features)
        sequence, lengths = tf.keras.experimental.SequenceFeatures(sequence_columns)(features)
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
            mode, predictions={"pooled": pooled, "sequence": sequence, "lengths": lengths}
        )

    return model_fn


def test_the_tf_dense_part_is_the_numpy_mlp_and_its_auc_the_exact_one(tensorflow, tiny_wheel, tmp_path, monkeypatch):
    config = job.JobConfig(
        output_dir=str(tmp_path), wheel=tiny_wheel, batch_size=32, eval_batch_size=64, dense="tf", progress=False
    )
    data = ml_data.load(tiny_wheel)
    losses = []
    estimator = job.build_estimator(config, data, losses)
    estimator.train(job.input_fn_for(data, data.train, shuffle_seed=0), steps=10)
    assert len(losses) == 10
    metrics = estimator.evaluate(job.input_fn_for(data, data.test))
    predictions = estimator.predict(job.input_fn_for(data, data.test), yield_single_examples=False)
    probability = np.concatenate([batch["probability"] for batch in predictions])

    # the same checkpoint's activations, through the numpy MLP holding the TF model's weights
    monkeypatch.setattr(job, "tf_model_module", lambda: types.SimpleNamespace(model_fn_for=_activations_model_fn_for))
    reader = job.build_estimator(config, data, [])
    batches = list(reader.predict(job.input_fn_for(data, data.test), yield_single_examples=False))
    pooled_columns, _ = ml_model.feature_columns(data, os.path.join(str(tmp_path), "zip_prefixes.txt"))
    weights = {"w1": "dense/kernel", "b1": "dense/bias", "w2": "dense_1/kernel", "b2": "dense_1/bias"}
    mlp = ml_model.DenseModel(
        ml_model.pooled_layout(pooled_columns),
        state={name: estimator.get_variable_value(tf_name) for name, tf_name in weights.items()},
    )
    logits = np.concatenate([mlp.forward(b["pooled"], b["sequence"], b["lengths"]) for b in batches])
    np.testing.assert_allclose(probability, ml_model.sigmoid(logits), rtol=1e-5, atol=1e-6)

    labels = data.label[data.test]
    assert metrics["auc"] == pytest.approx(ml_model.auc(labels, probability), abs=1e-3)  # 2000 thresholds
    assert metrics["log_loss"] == pytest.approx(ml_model.log_loss(labels, logits), rel=1e-5)
    assert metrics["global_step"] == 10
