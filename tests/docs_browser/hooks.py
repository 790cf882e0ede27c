"""Load the docs site's mkdocs hooks (docs/_ext/*.py, not a package) as modules, for their tests."""

import importlib.util
import pathlib

EXT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "_ext"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", EXT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
