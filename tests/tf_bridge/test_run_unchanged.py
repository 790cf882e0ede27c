"""The drop-in mode: `python -m tpu_embedding_shim.tensorflow program.py`, `activate()` / `deactivate()`.

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge/test_run_unchanged.py -q
"""

import importlib.util
import io
import os
import subprocess
import sys
import textwrap
from contextlib import redirect_stderr

import pytest
import tensorflow

import tpu_embedding_shim.tensorflow as shim
from tpu_embedding_shim.tensorflow import _mode
from tpu_embedding_shim.tensorflow._overrides import OVERRIDES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


@pytest.fixture(autouse=True)
def mode_off_after_each_test():
    yield
    shim.deactivate()


def snapshot(modules):
    """Every attribute of each of `modules` (TensorFlow's module objects the mode touches), by identity."""
    return {key: dict(vars(module)) for key, module in modules.items()}


# TensorFlow's tf.estimator names: tensorflow-estimator installed (TensorFlow 2.15 and earlier only).
HAS_ESTIMATOR = importlib.util.find_spec("tensorflow_estimator") is not None


def test_activate_replaces_tensorflows_own_names_and_deactivate_restores_every_attribute():
    modules = {id(module): module for module, _, _, _ in _mode._targets() + _mode._added_targets()}
    before = snapshot(modules)
    had = [hasattr(tensorflow, "estimator"), hasattr(tensorflow.compat.v1, "estimator")]
    had.append(hasattr(tensorflow.compat.v1.tpu.experimental, "AdagradParameters"))
    assert not shim.active()
    shim.activate()
    assert shim.active()
    assert tensorflow.distribute.TPUStrategy is OVERRIDES["distribute.TPUStrategy"]
    assert tensorflow.compat.v2.distribute.TPUStrategy is OVERRIDES["distribute.TPUStrategy"]  # Keras reads here
    assert tensorflow.tpu.experimental.embedding.TPUEmbedding is OVERRIDES["tpu.experimental.embedding.TPUEmbedding"]
    # TensorFlow's own tf.estimator, or where it has none the bridge's (tf.estimator.tpu exists in neither)
    assert tensorflow.compat.v1.estimator.tpu.TPUEstimator is OVERRIDES["compat.v1.estimator.tpu.TPUEstimator"]
    assert (
        tensorflow.compat.v1.tpu.experimental.AdagradParameters
        is OVERRIDES["compat.v1.tpu.experimental.AdagradParameters"]
    )
    assert tensorflow.constant is shim.constant  # the rest stays TensorFlow's
    shim.deactivate()
    after = snapshot(modules)
    assert after.keys() == before.keys()
    for key in before:
        changed = {n for n in before[key].keys() | after[key].keys() if before[key].get(n) is not after[key].get(n)}
        assert not changed
    assert tensorflow.distribute.TPUStrategy.__module__ == "tensorflow.python.distribute.tpu_strategy"
    has = [hasattr(tensorflow, "estimator"), hasattr(tensorflow.compat.v1, "estimator")]
    has.append(hasattr(tensorflow.compat.v1.tpu.experimental, "AdagradParameters"))
    assert has == had  # what the mode added where TensorFlow has no tf.estimator is gone again


def test_a_program_importing_tensorflow_compat_v1_reads_the_projects_names_there(tmp_path):
    """From TensorFlow 2.16 on, `import tensorflow.compat.v1 as tf` makes a module object of its own (the
    namespace run again under that name): a TPUEstimator program written so reads `tf.estimator` there."""
    program = tmp_path / "v1_program.py"
    program.write_text(
        "import tensorflow.compat.v1 as tf\n"
        "print(tf.estimator.tpu.TPUEstimator.__module__, tf.tpu.experimental.embedding.TPUEmbedding.__module__)\n"
    )
    result = run("-m", "tpu_embedding_shim.tensorflow", str(program))
    assert result.returncode == 0, result.stderr[-3000:]
    estimator, embedding = result.stdout.split()[-2:]
    assert estimator.startswith("tpu_embedding_shim.") and embedding.startswith("tpu_embedding_shim."), result.stdout


def test_the_mode_only_replaces_names_tensorflow_has():
    names = shim.replaced_names()
    assert "tf.distribute.TPUStrategy" in names
    # Where TensorFlow has tf.estimator, the mode replaces its TPU names; where it has none (TensorFlow 2.16 and
    # later, or 2.15 without tensorflow-estimator), the mode adds the bridge's namespaces, the one exception.
    assert ("tf.compat.v1.estimator.tpu.TPUEstimator" in names) == HAS_ESTIMATOR
    assert ("tf.compat.v1.estimator" in names) == (not HAS_ESTIMATOR)
    assert ("tf.estimator" in names) == (not HAS_ESTIMATOR)
    assert "tf.estimator.tpu.TPUEstimator" not in names  # TensorFlow's v2 tf.estimator has no tpu
    has_v2 = "TPUEmbeddingV2" in dir(tensorflow.tpu.experimental.embedding)  # TensorFlow 2.16 and later
    assert ("tf.tpu.experimental.embedding.TPUEmbeddingV2" in names) == has_v2


def test_a_library_reading_tensorflow_takes_the_projects_classes_and_its_isinstance_checks_hold():
    with shim.activated():
        strategy = tensorflow.distribute.TPUStrategy(tensorflow.distribute.cluster_resolver.TPUClusterResolver(""))
        assert isinstance(strategy, (tensorflow.distribute.experimental.TPUStrategy, tensorflow.distribute.TPUStrategy))
        assert isinstance(strategy, tensorflow.distribute.Strategy)  # also a TensorFlow strategy, for Keras
        feature = strategy.extended.tpu_hardware_feature.embedding_feature
        assert feature == tensorflow.tpu.experimental.HardwareFeature.EmbeddingFeature.V1
        with strategy.scope():
            assert tensorflow.distribute.get_strategy() is strategy
        optimizer = tensorflow.tpu.experimental.embedding.SGD(0.1)
        assert isinstance(optimizer, tensorflow.tpu.experimental.embedding.SGD)
    assert not shim.active() and not isinstance(optimizer, tensorflow.tpu.experimental.embedding.SGD)


def test_activated_leaves_the_mode_as_it_found_it():
    shim.activate()
    with shim.activated():
        assert shim.active()
    assert shim.active()
    shim.deactivate()
    with shim.activated():
        assert shim.active()
    assert not shim.active()


def test_load_ext_turns_the_mode_on_and_says_so():
    stderr = io.StringIO()
    with redirect_stderr(stderr):
        shim.load_ipython_extension(None)
    assert shim.active()
    assert stderr.getvalue().startswith("tpu_embedding_shim: TensorFlow's TPU-embedding names run on the CPU engine")
    shim.unload_ipython_extension(None)
    assert not shim.active()


PROGRAM = textwrap.dedent("""
    import sys
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    print(__name__, sys.argv[1:], type(strategy).__module__)
""")


def test_python_m_runs_the_program_as_main_with_its_arguments(tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    result = run("-m", "tpu_embedding_shim.tensorflow", "program.py", "--flag", "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "__main__ ['--flag', 'x'] tpu_embedding_shim.tensorflow._distribute"
    assert "tpu_embedding_shim: TensorFlow's TPU-embedding names run on the CPU engine" in result.stderr
    plain = run("program.py", cwd=tmp_path)  # the same program on TensorFlow alone: no TPU to resolve
    assert plain.returncode == 1


def test_python_m_runs_a_module_with_m(tmp_path):
    (tmp_path / "tpu_program.py").write_text(PROGRAM)
    result = run("-m", "tpu_embedding_shim.tensorflow", "-m", "tpu_program", "a", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "__main__ ['a'] tpu_embedding_shim.tensorflow._distribute"


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "error: give the program to run (a .py file, or -m module)"),
        (["missing.py"], "error: can't open file 'missing.py': no such file"),
        (["--verbose", "x.py"], "error: unknown option '--verbose': options go after the program"),
        (["-m"], "error: argument -m: give the module to run"),
    ],
)
def test_usage_errors_exit_2_with_one_message(tmp_path, args, message):
    result = run("-m", "tpu_embedding_shim.tensorflow", *args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr and "Traceback" not in result.stderr


NO_TPU_NAMES = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    tf.keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
    history = model.fit(x, y, epochs=3, batch_size=16, verbose=0)
    column = tf.feature_column.numeric_column("a")
    print([round(v, 6) for v in history.history["loss"]], type(column).__module__, tf.distribute.get_strategy())
""")


def test_a_program_that_uses_no_tpu_name_runs_as_on_tensorflow(tmp_path):
    (tmp_path / "program.py").write_text(NO_TPU_NAMES)
    plain = run("program.py", cwd=tmp_path)
    dropped_in = run("-m", "tpu_embedding_shim.tensorflow", "program.py", cwd=tmp_path)
    assert plain.returncode == 0 and dropped_in.returncode == 0, dropped_in.stderr[-2000:]
    assert dropped_in.stdout.split(" <")[0] == plain.stdout.split(" <")[0]  # the losses and the column, to the bit
    assert "_DefaultDistributionStrategy" in dropped_in.stdout
