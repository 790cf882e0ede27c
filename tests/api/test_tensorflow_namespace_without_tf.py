"""`tpu_embedding_shim.tensorflow` without TensorFlow: an ImportError that names the extra; the core never needs it.

Runs in the TF-free suite. Where TensorFlow is installed, the import runs in
a subprocess in which TensorFlow is hidden (a `sys.meta_path` finder that
refuses it, as an absent package is refused).
"""

import ast
import importlib.util
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "tpu_embedding_shim"
if sys.version_info >= (3, 12):  # TensorFlow 2.15 has no wheels there
    INSTALL = (
        r"TensorFlow 2.15 has no wheels for Python 3\.\d+: pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 "
        r"\(the `tensorflow-latest` extra; in the project's checkout: pip install -e '\.\[tensorflow-latest\]'\)"
    )
else:
    INSTALL = (
        r"pip install tensorflow-cpu==2.15.1 tensorflow-estimator==2.15.0 "
        r"\(the `tensorflow` extra; in the project's checkout: pip install -e '\.\[tensorflow\]'\)"
    )
MESSAGE = r"tpu_embedding_shim.tensorflow needs TensorFlow, which is not installed .*Install it: " + INSTALL

WITHOUT_TENSORFLOW = textwrap.dedent("""
    import importlib.abc, sys

    class NoTensorFlow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTensorFlow())
    import tpu_embedding_shim as shim                 # the numpy API needs no TensorFlow
    assert shim.tpu.experimental.embedding.TPUEmbedding
    try:
        import tpu_embedding_shim.tensorflow
    except ImportError as error:
        print(type(error).__name__ + ": " + str(error))
    else:
        print("imported")
""")


def test_importing_the_bridge_without_tensorflow_is_an_import_error_naming_the_extra():
    if importlib.util.find_spec("tensorflow") is None:
        with pytest.raises(ImportError, match=MESSAGE):
            import tpu_embedding_shim.tensorflow  # noqa: F401
        assert "tpu_embedding_shim.tensorflow" not in sys.modules
        return
    result = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch("ImportError: " + MESSAGE + r".*", result.stdout.strip(), flags=re.S), result.stdout


def _imports(path):
    """Every module a file imports, relative imports resolved against its package."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


CORE = ("spec", "engine", "compat")
# The optional bridges that run TensorFlow code, as torch_bridge.py runs PyTorch: imported only where TensorFlow is.
TENSORFLOW_BRIDGES = (
    "tensorflow",
    "runner/tf_bridge.py",
    "runner/tf_data.py",
    "runner/tf_run.py",
    "runner/tf_serving.py",
    "runner/tf_hooks.py",
)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_core_never_imports_tensorflow_and_nothing_imports_the_namespace(path):
    where = path.relative_to(PACKAGE).as_posix()
    for name in _imports(path):
        if not where.startswith(("tensorflow/", "movielens/model_tf.py")):  # model_tf: imported for --dense tf only
            assert not name.startswith("tpu_embedding_shim.tensorflow"), f"{where} imports {name}"
        if name.split(".")[0] == "tensorflow":
            assert where.split("/")[0] not in CORE, f"{where} imports {name}"
            assert where.startswith(TENSORFLOW_BRIDGES), f"{where} imports {name}"


def test_the_import_scan_resolves_relative_imports():
    module = PACKAGE / "compat" / "v2" / "nn.py"
    names = set(_imports(module))
    assert "tpu_embedding_shim.api.embedding_ops" in names


ON_PYTHON_3_12 = WITHOUT_TENSORFLOW.replace(
    "    import tpu_embedding_shim.tensorflow\n",
    "    sys.version_info = (3, 12, 0, 'final', 0)\n    import tpu_embedding_shim.tensorflow\n",
)


def test_on_python_3_12_the_import_error_says_tensorflow_2_15_has_no_wheels_and_names_2_21():
    """TensorFlow 2.15 (the `tensorflow` extra) has no wheels for Python >= 3.12: the hint is the 2.21 packages."""
    result = subprocess.run([sys.executable, "-c", ON_PYTHON_3_12], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (
        "Install it: TensorFlow 2.15 has no wheels for Python 3.12: pip install tensorflow-cpu==2.21.0 "
        "tf-keras==2.21.0 (the `tensorflow-latest` extra; in the project's checkout: "
        "pip install -e '.[tensorflow-latest]')"
    ) in result.stdout, result.stdout
    assert "tensorflow-estimator" not in result.stdout
