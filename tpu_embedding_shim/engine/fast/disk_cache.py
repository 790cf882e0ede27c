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
entries. `NUMBA_CACHE_DIR`, when set, still decides.

numba chooses a cache's folder by asking, in order, the locator classes of
`numba.core.caching.CacheImpl._locator_classes` (not a documented hook; a
numba without that list keeps its default). `register()` puts its own two
locators first (`NUMBA_CACHE_DIR`'s folder when set, else the per-user
one); they answer for files of this package only, so other libraries'
caches stay where numba puts them. It must run before a kernel is decorated
with `cache=True`: every module here that compiles one imports this module
first.

numba keys a cached kernel by its own source file only, but a kernel here
inlines functions of its sibling modules (`forward.py` reads rows through
`prefetch.py`, the summing kernels call `forward.quantized`): edit one of
those and the cache would still hand out the kernel compiled from the old
code. So a kernel of this package is keyed by every `.py` file of its
folder (`folder_stamp`): an edit to any of them recompiles the folder's
kernels once.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

from numba.core import caching

__all__ = ["PackageCacheLocator", "PackageChosenCacheLocator", "register", "package_root", "folder_stamp"]


def package_root() -> str:
    """The folder of the installed `tpu_embedding_shim` package (its sources)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _FolderStamped:
    """A locator of this package's files only, keyed by its kernel's whole folder (`folder_stamp`)."""

    source_file: str

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        root = package_root()
        if os.path.commonpath([root, os.path.abspath(py_file)]) != root:
            return None
        locator = super().from_function(py_func, py_file)  # type: ignore[misc]
        if locator is not None:
            locator.source_file = os.path.abspath(py_file)
        return locator

    def get_source_stamp(self) -> bytes:
        return folder_stamp(self.source_file)


class PackageCacheLocator(_FolderStamped, caching.UserWideCacheLocator):
    """numba's per-user cache location, for the source files of this package only."""


class PackageChosenCacheLocator(_FolderStamped, caching.UserProvidedCacheLocator):
    """The folder `NUMBA_CACHE_DIR` names, for the source files of this package only."""


def folder_stamp(py_file: str) -> bytes:
    """A digest of every `.py` file in `py_file`'s folder (names and contents): it changes when any of them does."""
    folder = os.path.dirname(os.path.abspath(py_file))
    files = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            stat = os.stat(os.path.join(folder, name))
            files.append((name, stat.st_mtime_ns, stat.st_size))
    return _digest(folder, tuple(files))


@functools.cache
def _digest(folder: str, files: tuple[tuple[str, int, int], ...]) -> bytes:
    """The digest of `files` (name, mtime, size) in `folder`; memoized on those stamps, so each load of a
    cached kernel does not read the folder again, and an edit (a new stamp) is read anew."""
    digest = hashlib.sha256()
    for name, _, _ in files:
        with open(os.path.join(folder, name), "rb") as source:
            digest.update(name.encode() + b"\0" + hashlib.sha256(source.read()).digest())
    return digest.digest()


def register() -> None:
    """Makes numba cache this package's kernels outside it, keyed by their folders (idempotent)."""
    locators = getattr(caching.CacheImpl, "_locator_classes", None)
    if not isinstance(locators, list) or PackageCacheLocator in locators:
        return
    chosen = caching.UserProvidedCacheLocator  # NUMBA_CACHE_DIR: still asked first, for this package too
    at = locators.index(chosen) if chosen in locators else 0
    locators[at:at] = [PackageChosenCacheLocator, PackageCacheLocator]


register()
