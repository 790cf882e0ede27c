"""numba caches this package's kernels in a per-user folder (or NUMBA_CACHE_DIR), never inside the package.

A cache written inside an installed package outlives `pip uninstall` and
turns the leftover folder into an empty namespace package that shadows a
later install (engine/fast/disk_cache.py). Each case runs in a fresh
process with its own HOME, so the kernels compile and the cache is written
during the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba", reason="needs numba (the `fast` extra)")

import tpu_embedding_shim

PACKAGE = Path(tpu_embedding_shim.__file__).parent

# Compiles a kernel of engine/fast and one of engine/tf_bundle (each cache=True), and one of the caller's own.
PROGRAM = textwrap.dedent(
    """
    import numba, numpy as np
    from tpu_embedding_shim.engine.fast import forward
    from tpu_embedding_shim.engine.tf_bundle.crc32c import crc32c_numba

    assert crc32c_numba(b"abc") == 0x364B3FB7
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = np.empty((1, 3), np.float32)
    forward.pooled(table, np.array([1, 2], np.int32), np.array([0, 2], np.int64), np.empty(0, np.float32), out)
    assert out.tolist() == [[9.0, 11.0, 13.0]], out

    @numba.njit(cache=True)
    def users_own(x):
        return x + 1

    assert users_own(1) == 2
    """
)


def cache_files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc")}


def run(tmp_path: Path, **env: str) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    environment = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    environment.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(PACKAGE.parent), **env)
    subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=environment, check=True, timeout=600)


def test_the_package_kernels_are_cached_in_the_users_cache_folder(tmp_path):
    before = cache_files(PACKAGE)
    run(tmp_path)
    assert cache_files(PACKAGE) == before, "numba wrote its cache inside the package"
    cached = cache_files(tmp_path / "home" / ".cache" / "numba")
    names = {p.name.split(".")[0] for p in cached}
    assert {"crc32c", "forward"} <= names, sorted(names)
    # The caller's own function keeps numba's default: the __pycache__ beside its file.
    assert any(p.name.startswith("program.users_own") for p in cache_files(tmp_path / "__pycache__"))


def test_numba_cache_dir_still_decides(tmp_path):
    before = cache_files(PACKAGE)
    run(tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "chosen"))
    assert cache_files(PACKAGE) == before
    names = {p.name.split(".")[0] for p in cache_files(tmp_path / "chosen")}
    assert {"crc32c", "forward", "program"} <= names, sorted(names)
    assert not (tmp_path / "home" / ".cache" / "numba").exists()
