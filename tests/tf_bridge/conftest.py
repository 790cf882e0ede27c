"""tests/tf_bridge needs TensorFlow: where it is not installed, each module here is skipped, saying why.

The modules import `tensorflow` like any other package; this file stands in
for the `pytest.importorskip` each of them would otherwise start with. They
run where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge -q
"""

import importlib.util
import sys

import pytest

REASON = (
    "the TensorFlow bridge tests need TensorFlow (the `tensorflow` extra: tensorflow-cpu==2.15.1, in a separate venv)"
)


class NeedsTensorFlow(pytest.File):
    """A module that is not imported: collecting it (its tests and its doctests) skips it with REASON."""

    def collect(self):
        pytest.skip(REASON)


if importlib.util.find_spec("tensorflow") is None:

    @pytest.hookimpl(wrapper=True)
    def pytest_collect_file(file_path, parent):
        collectors = yield
        if not collectors or file_path.name in ("conftest.py", "__init__.py"):
            return collectors
        return [NeedsTensorFlow.from_parent(parent, path=file_path)]


@pytest.fixture(autouse=True)
def tensorflows_global_seed_is_cleared_after_each_test():
    """A test that sets TensorFlow's global seed (tf.random.set_seed, keras.utils.set_random_seed) sets it for
    itself: cleared after it, the tables of the tests that follow do not depend on which tests ran before."""
    yield
    tensorflow = sys.modules.get("tensorflow")
    if tensorflow is not None:
        tensorflow.random.set_seed(None)
