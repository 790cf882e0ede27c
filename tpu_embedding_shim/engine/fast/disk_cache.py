"""Where numba keeps this package's compiled kernels: a per-user cache directory, never inside the package.

numba's default cache for a module is the `__pycache__` beside its source
when that folder is writable, which for an installed package is inside
site-packages. pip uninstalls a package by its RECORD, which does not list
those files, so the folder stays behind; Python then imports the leftover
`tpu_embedding_shim/` as an empty namespace package ahead of a later
(editable) install, and every import of the package breaks. So this
package's kernels are cached where numba caches for a read-only install:
numba's per-user cache directory (`~/.cache/numba` on Linux), in a
subfolder named after the source file's full path, so installs never share
entries. `NUMBA_CACHE_DIR`, when set, still decides (numba's own locator for
it is asked first).

numba chooses a cache's folder by asking, in order, the locator classes of
`numba.core.caching.CacheImpl._locator_classes` (not a documented hook; a
numba without that list keeps its default). `register()` puts
`PackageCacheLocator` right after the `NUMBA_CACHE_DIR` one; it answers for
files of this package only, so other libraries' caches stay where numba puts
them. It must run before a kernel is decorated with `cache=True`: every
module here that compiles one imports this module first.
"""

from __future__ import annotations

import os
from typing import Any

from numba.core import caching

__all__ = ["PackageCacheLocator", "register", "package_root"]


def package_root() -> str:
    """The folder of the installed `tpu_embedding_shim` package (its sources)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class PackageCacheLocator(caching.UserWideCacheLocator):
    """numba's per-user cache location, for the source files of this package only."""

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        root = package_root()
        if os.path.commonpath([root, os.path.abspath(py_file)]) != root:
            return None
        return super().from_function(py_func, py_file)


def register() -> None:
    """Makes numba cache this package's kernels outside it (idempotent)."""
    locators = getattr(caching.CacheImpl, "_locator_classes", None)
    if not isinstance(locators, list) or PackageCacheLocator in locators:
        return
    after = caching.UserProvidedCacheLocator  # NUMBA_CACHE_DIR
    locators.insert(locators.index(after) + 1 if after in locators else 0, PackageCacheLocator)


register()
