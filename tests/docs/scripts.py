"""The docs' own scripts (docs/plots/), imported by file: docs/ is not a package."""

import importlib.util
import pathlib

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def load_script(name: str):
    """The module docs/plots/<name>.py."""
    spec = importlib.util.spec_from_file_location(name, DOCS / "plots" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
