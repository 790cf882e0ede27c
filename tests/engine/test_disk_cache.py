"""numba caches this package's kernels in a per-user folder (or NUMBA_CACHE_DIR), never inside the package.

A cache written inside an installed package outlives `pip uninstall` and
turns the leftover folder into an empty namespace package that shadows a
later install (engine/fast/disk_cache.py). Each case runs in a fresh
process with its own HOME, so the kernels compile and the cache is written
during the test.
"""

from __future__ import annotations

import os
import shutil
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


def test_the_folder_stamp_changes_when_any_sibling_source_changes(tmp_path):
    from tpu_embedding_shim.engine.fast.disk_cache import folder_stamp

    (tmp_path / "kernel.py").write_text("x = 1\n")
    (tmp_path / "helper.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not a source")
    first = folder_stamp(str(tmp_path / "kernel.py"))
    assert folder_stamp(str(tmp_path / "helper.py")) == first  # one stamp for the whole folder
    (tmp_path / "notes.txt").write_text("still not a source")
    assert folder_stamp(str(tmp_path / "kernel.py")) == first
    (tmp_path / "helper.py").write_text("y = 3\n")
    assert folder_stamp(str(tmp_path / "kernel.py")) != first
    (tmp_path / "helper.py").write_text("y = 2\n")
    assert folder_stamp(str(tmp_path / "kernel.py")) == first  # the contents decide, not the time


@pytest.mark.parametrize("chosen", [False, True], ids=["user cache", "NUMBA_CACHE_DIR"])
def test_editing_a_helper_module_recompiles_the_kernels_that_inline_it(tmp_path, chosen):
    """forward.py's kernels inline prefetch.py: a cache keyed by forward.py alone would keep the old code."""
    copy = tmp_path / "src" / "tpu_embedding_shim"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    program = tmp_path / "program.py"
    program.write_text(PROGRAM.split("@numba.njit")[0])
    environment = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    environment.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(copy.parent), NUMBA_DEBUG_CACHE="1")
    if chosen:
        environment["NUMBA_CACHE_DIR"] = str(tmp_path / "chosen")

    def compiled_forward() -> bool:
        """Whether a run compiled `forward`'s kernels (saved them) instead of loading them from the cache."""
        done = subprocess.run(
            [sys.executable, str(program)], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr
        log = [line for line in done.stdout.splitlines() if "forward" in line and "[cache]" in line]
        assert log, done.stdout[-2000:]
        return any("data saved" in line for line in log)

    assert compiled_forward()  # an empty cache
    assert not compiled_forward()  # nothing changed: loaded
    prefetch = copy / "engine" / "fast" / "prefetch.py"
    prefetch.write_text(prefetch.read_text() + "\n# an edit\n")
    assert compiled_forward()  # a module the kernels inline changed: compiled again


# A table-batched step (26 tables' updates in one kernel) and a step of the per-feature kernels.
STEPS = textwrap.dedent(
    """
    import numpy as np
    from tpu_embedding_shim.engine import Engine
    from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

    tables = tuple(TableSpec(name=f"t{i}", vocabulary_size=50 + i, dim=4) for i in range(26))
    features = tuple(FeatureSpec(name=f"f{i}", table=f"t{i}", num_buckets=50 + i) for i in range(26))
    engine = Engine(EmbeddingSpec(tables=tables, features=features, optimizer=AdagradSpec(learning_rate=0.1)), seed=0)
    rng = np.random.default_rng(0)
    for batch in (64, 8192):
        result = engine.forward({f"f{i}": rng.integers(0, 50, (batch, 2)) for i in range(26)})
        engine.apply_gradients(result, {name: np.ones_like(a) for name, a in result.activations.items()})
    """
)


def test_a_second_process_loads_every_kernel_from_the_cache(tmp_path):
    """Every kernel a step runs is found in the cache by the next process. numba keys a closure's cache
    entry by its pickled closure variables: a kernel holding another kernel built at run time (whose pickle
    carries a new id in every process) was compiled again by every process, seconds at a program's start."""
    program = tmp_path / "steps.py"
    program.write_text(STEPS)
    environment = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    environment.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(PACKAGE.parent), NUMBA_DEBUG_CACHE="1")

    def saved() -> list[str]:
        done = subprocess.run(
            [sys.executable, str(program)], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return [line for line in done.stdout.splitlines() if "[cache] data saved" in line]

    assert saved()  # an empty cache: compiled and saved
    assert saved() == []  # every kernel loaded
