"""Root pytest configuration: doctests run over the package, except the entry point.

Optional extras are optional for the tests too: the README's test command
(`pip install -e '.[test]' && python -m pytest`) must pass with nothing
else installed. Modules that import an optional package at module level
are not collected without it (their doctests need it); the tests that use
them skip with a reason naming the extra:

- the PyTorch bridge needs torch (the `torch` extra);
- `tpu_embedding_shim.tensorflow`, `runner/tf_bridge.py` (with `tf_run.py`, `tf_data.py` and `tf_hooks.py`),
  `runner/tf_serving.py`, `movielens/model_tf.py`, docs/tensorflow_bridge.md and docs/run_unchanged.md need
  TensorFlow (the `tensorflow` extra; tests/tf_bridge runs the pages where it is installed);
- `migrate/runtime/torchrec_model.py` (the code a generated TorchRec model.py runs) needs torchrec;
- the fast kernels in `engine/fast/` need numba (the `fast` extra);
  `engine/fast/__init__.py` itself imports nothing optional and is kept.
"""

import importlib.util
from pathlib import Path

# Scripts that regenerate test fixtures with real TensorFlow are run by hand, never imported by the suite.
collect_ignore = ["tpu_embedding_shim/__main__.py"]
collect_ignore_glob = ["tests/fixtures/*"]
# Programs written as for a TPU (and a pytest plugin) that tests/tf_bridge runs in subprocesses in the drop-in mode:
# importing one would run it.
collect_ignore_glob.append("tests/tf_bridge/unchanged_programs/*")
if importlib.util.find_spec("torch") is None:
    collect_ignore.append("tpu_embedding_shim/runner/torch_bridge.py")
if importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchrec") is None:
    collect_ignore.append("tpu_embedding_shim/migrate/runtime/torchrec_model.py")
if importlib.util.find_spec("tensorflow") is None:
    collect_ignore_glob.append("tpu_embedding_shim/tensorflow/*")
    collect_ignore.append("docs/tensorflow_bridge.md")
    collect_ignore.append("docs/run_unchanged.md")
    collect_ignore += [
        "tpu_embedding_shim/runner/tf_bridge.py",
        "tpu_embedding_shim/runner/tf_data.py",
        "tpu_embedding_shim/runner/tf_hooks.py",
        "tpu_embedding_shim/runner/tf_run.py",
        "tpu_embedding_shim/runner/tf_serving.py",
        "tpu_embedding_shim/movielens/model_tf.py",
    ]
if importlib.util.find_spec("numba") is None:
    fast = Path(__file__).parent / "tpu_embedding_shim" / "engine" / "fast"
    collect_ignore += [
        str(path.relative_to(Path(__file__).parent)) for path in sorted(fast.glob("*.py")) if path.name != "__init__.py"
    ]
