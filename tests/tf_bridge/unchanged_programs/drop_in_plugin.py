"""A pytest plugin that runs a test session in the drop-in mode and records what reached the engine.

`python -m pytest -p tests.tf_bridge.unchanged_programs.drop_in_plugin ...`
with `DROP_IN_REPORT=<file>`: the mode is on before any test module is
imported; at the end the file holds, per test, how many of the project's
mid-level objects it made, the engine steps they took and, for a failed
test, the exception's message.

With `DROP_IN_TPU_SCOPE=1` each test runs inside the scope of the stand-in
`tf.distribute.TPUStrategy`, as a test harness runs such tests on a TPU:
code that takes `tf.distribute.get_strategy()` gets a TPU strategy.
"""

import json
import os

import pytest

import tpu_embedding_shim.tensorflow as shim
from tpu_embedding_shim.tensorflow._midlevel import TPUEmbedding, TPUEmbeddingV2

_made: list = []
_per_test: dict = {}


def _record_made(cls):
    original = cls.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _made.append(self)

    cls.__init__ = recording


def pytest_configure(config):
    shim.activate()
    _record_made(TPUEmbedding)
    _record_made(TPUEmbeddingV2)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    start = len(_made)
    if os.environ.get("DROP_IN_TPU_SCOPE"):  # inside the test method: a unittest setUp resets TF's graph first
        method = item.obj

        def in_scope(*args, **kwargs):
            with shim.distribute.TPUStrategy().scope():
                return method(*args, **kwargs)

        item.obj = in_scope
    try:
        return (yield)
    finally:
        made = _made[start:]
        steps = 0
        for bridge in made:
            engine = bridge.engine_if_built
            steps += 0 if engine is None else int(engine.global_step)
        _per_test[item.nodeid] = {"objects": [type(b).__name__ for b in made], "engine_steps": steps}


def pytest_runtest_logreport(report):
    if report.when == "call" and report.nodeid in _per_test:
        _per_test[report.nodeid]["outcome"] = report.outcome
        if report.failed:  # the exception's message, as pytest's summary line gives it
            crash = getattr(report.longrepr, "reprcrash", None)
            _per_test[report.nodeid]["error"] = crash.message if crash is not None else str(report.longrepr)


def pytest_sessionfinish(session):
    with open(os.environ["DROP_IN_REPORT"], "w") as file:
        json.dump({"active": shim.active(), "tests": _per_test}, file, indent=1)
