"""A session hook's `end()` runs only for a call that completed, as in TensorFlow's MonitoredSession.

A train() or evaluate() that an error ended, and a predict() generator
closed before its last batch, never call `end(session)` (TensorFlow's
CheckpointSaverHook saves in `end`: an error must not write a checkpoint),
not even when the next call cleans up what the interrupted one left. The
same program runs on this project's TPUEstimator and, as the oracle, on
TensorFlow 2.15's own with use_tpu=False.
"""

import pytest
import tensorflow as real_tf

import tpu_embedding_shim.tensorflow as shim_tf

from .test_estimator_tf_model_fn import B, before_program, examples, make_input_fn
from .tf_versions import needs_estimator, needs_keras_2


class HookError(Exception):
    """What the test's hook raises from after_run."""


class Recorder(real_tf.compat.v1.train.SessionRunHook):
    """Logs begin() and end(); raises HookError from its `fail_at`-th after_run."""

    def __init__(self, log, fail_at=None):
        self.log, self.fail_at, self.runs = log, fail_at, 0

    def begin(self):
        self.log.append("begin")

    def after_run(self, run_context, run_values):
        self.runs += 1
        if self.runs == self.fail_at:
            raise HookError(f"after_run {self.runs}")

    def end(self, session):
        self.log.append("end")


EXPECTED = {
    "train, failing": ["begin"],
    "train": ["begin", "end"],
    "evaluate, failing": ["begin"],
    "evaluate": ["begin", "end"],
    "predict, closed early": ["begin"],
    "predict": ["begin", "end"],
}


def hook_events(tf, model_dir):
    """Each call's hook log: a failing and a completing train(), evaluate() and predict() in turn."""
    estimator = before_program(tf, model_dir, use_tpu=tf is shim_tf)
    features, labels = examples(4 * B)
    events = {}

    def hook(name, fail_at=None):
        events[name] = []
        return [Recorder(events[name], fail_at)]

    with pytest.raises(HookError):
        estimator.train(make_input_fn(features, labels), steps=3, hooks=hook("train, failing", fail_at=2))
    estimator.train(make_input_fn(features, labels), steps=1, hooks=hook("train"))
    with pytest.raises(HookError):
        estimator.evaluate(make_input_fn(features, labels), hooks=hook("evaluate, failing", fail_at=2))
    estimator.evaluate(make_input_fn(features, labels), steps=1, hooks=hook("evaluate"))
    predictions = estimator.predict(make_input_fn(features, labels), hooks=hook("predict, closed early"))
    next(predictions)
    predictions.close()
    assert len(list(estimator.predict(make_input_fn(features, labels), hooks=hook("predict")))) == 4 * B
    return events


@needs_keras_2
def test_only_a_completed_call_ends_its_hooks(tmp_path):
    assert hook_events(shim_tf, tmp_path) == EXPECTED


@needs_estimator
@needs_keras_2
def test_tensorflows_own_estimator_ends_the_same_hooks(tmp_path):
    assert hook_events(real_tf, tmp_path) == EXPECTED
