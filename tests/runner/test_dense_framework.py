"""TPUEstimator(dense_framework=...): how the model_fn's dense part runs, stated or chosen by the rule, and logged."""

import importlib.util
import logging
import sys

import numpy as np
import pytest

from .problem import columns, estimator, input_fn_for, make_data, numpy_model_fn

TRAIN = make_data(256, seed=0)


def build(tmp_path, name, **kwargs):
    pooled, sequence, cols = columns()
    made = estimator(tmp_path / name, numpy_model_fn(pooled, sequence), cols)
    if kwargs:  # the same estimator, made again with the keyword
        from tpu_embedding_shim.runner import TPUEstimator

        made = TPUEstimator(
            model_fn=made._model_fn,
            config=made.config,
            train_batch_size=32,
            embedding_config_spec=made._embedding_config_spec,
            **kwargs,
        )
    return made


@pytest.mark.parametrize("value", ["numpy", "TensorFlow", "", None, 1])
def test_a_bad_dense_framework_is_refused_naming_the_argument_and_the_choices(tmp_path, value):
    with pytest.raises(ValueError, match=r"`dense_framework` must be one of \['auto', 'tensorflow', 'python'\]"):
        build(tmp_path, "bad", dense_framework=value)


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed here")
def test_tensorflow_stated_without_tensorflow_installed_says_how_to_install_it(tmp_path):
    with pytest.raises(ImportError, match=r"pip install -e '\.\[tensorflow\]'"):
        build(tmp_path, "tf", dense_framework="tensorflow")


def test_python_stated_trains_as_the_rule_does_and_the_choice_is_logged_once(tmp_path, caplog):
    chosen = build(tmp_path, "auto")
    stated = build(tmp_path, "python", dense_framework="python")
    with caplog.at_level(logging.INFO, logger="tpu_embedding_shim"):
        chosen.train(input_fn_for(TRAIN), steps=3)
        stated.train(input_fn_for(TRAIN), steps=3)
    lines = [r.getMessage() for r in caplog.records if "dense part runs as" in r.getMessage()]
    rule = (
        "TensorFlow is not imported" if "tensorflow" not in sys.modules else "it reads no TensorFlow module or function"
    )
    assert lines == [
        f"TPUEstimator: the model_fn's dense part runs as Python on numpy values (dense_framework='auto': {rule}).",
        "TPUEstimator: the model_fn's dense part runs as Python on numpy values (dense_framework='python').",
    ]
    table = chosen.engine.spec.tables[0].name
    np.testing.assert_array_equal(chosen.engine.table(table), stated.engine.table(table))
