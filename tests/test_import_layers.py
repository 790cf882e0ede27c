"""The package's layers, as the code imports them: no module imports a higher layer, and no import cycle.

progress <- spec <- engine <- api <- checkpoints (a program's, read as tables) <- runner (with the framework
bridges) <- migrate <- the TF-shaped namespaces (`compat/`, `tensorflow/`, the package's `__init__`) <- cli /
movielens

(docs/architecture.md draws them). Every `import` statement of every module
counts, at module level or inside a function: an import inside a function
hides an edge of the graph, it does not remove it.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

PACKAGE = "tpu_embedding_shim"
ROOT = pathlib.Path(__file__).resolve().parents[1] / PACKAGE

# A module belongs to the first layer with a matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("namespaces", ("compat", "tensorflow", "")),  # "" is the package's own __init__
    ("cli", ("cli", "checkpoint_cli", "migrate_cli", "movielens", "__main__")),
    ("progress", ("progress",)),
    ("spec", ("spec",)),
    ("engine", ("engine",)),
    ("api", ("api",)),
    ("checkpoints", ("checkpoints",)),
    ("runner", ("runner",)),
    ("migrate", ("migrate",)),
]
ORDER = ["progress", "spec", "engine", "api", "checkpoints", "runner", "migrate", "namespaces", "cli"]


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> str:
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            if prefix == "" and module == "":
                return layer
            if prefix and (module == prefix or module.startswith(prefix + ".")):
                return layer
    raise AssertionError(f"module {module!r} is in no layer: add it to LAYERS")


def import_statements(path: pathlib.Path, module: str):
    """(package-relative module, names) for each `from ... import names` of the package in `path`, and
    (module, None) for each `import tpu_embedding_shim.x`; at module level or inside a function."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    yield alias.name[len(PACKAGE) + 1 :], None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                target = node.module[len(PACKAGE) + 1 :]
            else:
                continue
            yield target, [alias.name for alias in node.names]


def imports_of(path: pathlib.Path, module: str, modules: set[str]) -> set[str]:
    """The package's modules that `module` imports (package-relative names)."""
    found: set[str] = set()

    def add(name: str) -> None:
        while name and name not in modules:  # `from .x import y`: y may be a name in x, not a module
            name = name.rpartition(".")[0]
        if name != module and (name or module):
            found.add(name)

    for target, names in import_statements(path, module):
        for name in names or [None]:
            candidate = target if name is None else (f"{target}.{name}" if target else name)
            add(candidate if candidate in modules else target)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(paths)
    return {module: imports_of(path, module, modules) for module, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if ORDER.index(layer_of(target)) > ORDER.index(layer_of(module)):
                out.append(f"{module or PACKAGE} ({layer_of(module)}) imports {target or PACKAGE} ({layer_of(target)})")
    return out


def test_every_module_is_in_a_layer():
    for module in import_graph():
        layer_of(module)


def test_no_module_imports_a_higher_layer():
    assert upward_imports(import_graph()) == []


def test_no_import_cycle():
    assert cycles(import_graph()) == []


# The engine's public API: what the layers above may import of it (docs/architecture.md).
PUBLIC_ENGINE_PACKAGES = ("engine", "engine.tf_bundle")


def private_engine_imports() -> list[str]:
    out = []
    public = {name: set(importlib.import_module(f"{PACKAGE}.{name}").__all__) for name in PUBLIC_ENGINE_PACKAGES}
    for path in sorted(ROOT.rglob("*.py")):
        module = module_name(path)
        if layer_of(module) in ("spec", "engine"):
            continue
        for target, names in import_statements(path, module):
            if target != "engine" and not target.startswith("engine."):
                continue
            if target not in public:
                out.append(f"{module} imports {target}: import the engine's public names from {PUBLIC_ENGINE_PACKAGES}")
                continue
            for name in names or []:
                if name not in public[target]:
                    out.append(f"{module} imports {target}.{name}, which is not in {target}.__all__")
    return out


def test_the_layers_above_the_engine_import_only_its_public_names():
    assert private_engine_imports() == []


def test_the_checker_sees_relative_absolute_and_function_level_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from ..spec import tables\nimport tpu_embedding_shim.engine.lookup\ndef f():\n    from .. import runner\n"
    )
    modules = {"spec", "spec.tables", "engine", "engine.lookup", "runner", "api", "api.m"}
    assert imports_of(source, "api.m", modules) == {"spec.tables", "engine.lookup", "runner"}
    assert upward_imports({"api.m": {"runner"}, "runner": set()}) == ["api.m (api) imports runner (runner)"]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def loaded_by(statement: str) -> set[str]:
    """The package's modules a fresh interpreter has loaded after `statement`."""
    code = f"import sys\n{statement}\nprint(' '.join(m for m in sys.modules if m.startswith('{PACKAGE}')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {m[len(PACKAGE) + 1 :] for m in out.split() if m != PACKAGE}


def test_a_lower_layer_imports_alone():
    assert {layer_of(m) for m in loaded_by("import tpu_embedding_shim.spec")} == {"spec"}
    assert {layer_of(m) for m in loaded_by("import tpu_embedding_shim.engine")} <= {"spec", "engine"}
    assert {layer_of(m) for m in loaded_by("import tpu_embedding_shim.api.feature_columns")} <= {
        "spec",
        "engine",
        "api",
    }


def test_the_namespace_names_load_at_first_use():
    assert "compat.v2" not in loaded_by("import tpu_embedding_shim")
    assert "compat.v2" in loaded_by("import tpu_embedding_shim as tf; tf.feature_column")
    # `tf.estimator` is TensorFlow's namespace, also after the runner is imported:
    names = loaded_by(
        "import tpu_embedding_shim.runner.tpu_estimator\nimport tpu_embedding_shim as tf\n"
        "assert tf.estimator.__name__ == 'tpu_embedding_shim.compat.v2.estimator', tf.estimator\n"
        "assert 'tpu_embedding_shim.runner' in sys.modules"
    )
    assert "runner.tpu_estimator" in names


def class_assignments() -> list[str]:
    """Each `<x>.__class__ = ...` in the package: a module that swaps its class hides what it is."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Attribute) and target.attr == "__class__" for target in node.targets
            ):
                out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return out


def test_no_module_swaps_its_class():
    # The namespace modules report a missing TensorFlow name with a module-level `__getattr__` (PEP 562).
    assert class_assignments() == []


def test_migrate_reads_checkpoints_without_the_runner():
    # A converter reads a program's checkpoint through `checkpoints/`; it never needs the model_fn runner.
    graph = import_graph()
    assert [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if layer_of(module) == "migrate"
        for target in sorted(targets)
        if layer_of(target) == "runner"
    ] == []
