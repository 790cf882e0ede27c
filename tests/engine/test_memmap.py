"""Memory-mapped tables (`Engine(..., table_files=...)`) on the numpy kernels: filled block by block;
a table file that exists is complete (a full disk or a killed creation leaves none)."""

import errno
import logging
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from tpu_embedding_shim.engine import memmap
from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, RowIdInitializer, TableSpec
from tpu_embedding_shim.spec.initializers import Constant


def _spec(initializer, vocab=10, dim=3):
    return EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=vocab, dim=dim, combiner="sum", initializer=initializer),),
        features=(FeatureSpec(name="f", table="t", num_buckets=vocab),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )


def test_an_array_constant_fills_a_file_table_across_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(memmap, "BLOCK_ROWS", 4)  # 10 rows: blocks of 4, 4 and 2
    values = np.arange(30, dtype=np.float32).reshape(10, 3) / 7
    spec = _spec(Constant(values))
    on_file = Engine(spec, kernels="numpy", table_files={"t": str(tmp_path / "t.npy")})
    np.testing.assert_array_equal(on_file.table("t"), Engine(spec, kernels="numpy").table("t"))
    np.testing.assert_array_equal(on_file.table("t"), values)


def test_a_one_value_constant_fills_a_file_table(tmp_path, monkeypatch):
    monkeypatch.setattr(memmap, "BLOCK_ROWS", 4)
    on_file = Engine(_spec(Constant([2.5])), kernels="numpy", table_files={"t": str(tmp_path / "t.npy")})
    assert (on_file.table("t") == 2.5).all()


def test_a_constant_of_the_wrong_size_creates_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(memmap, "BLOCK_ROWS", 4)
    path = tmp_path / "t.npy"
    with pytest.raises(TypeError, match=r"has 12 elements, but got `shape` \(10, 3\) with 30 elements"):
        Engine(_spec(Constant(np.ones(12))), kernels="numpy", table_files={"t": str(path)})
    assert not os.path.exists(path)  # no half-filled file that a rerun would take for the table


def test_a_full_disk_is_an_oserror_at_creation_and_leaves_no_file(tmp_path, monkeypatch):
    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(OSError, match=r"No space left on the device for the table file .*t\.npy.*bytes"):
        Engine(_spec(Constant(1.0)), kernels="numpy", table_files={"t": str(tmp_path / "t.npy")})
    assert os.listdir(tmp_path) == []  # no partial or complete file that a rerun would take for the table


KILLED_CREATION = """
import os, signal, sys
import numpy as np
from tpu_embedding_shim.engine import memmap
from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, RowIdInitializer, TableSpec

memmap.BLOCK_ROWS = 100
rows_of = memmap.initial_rows
def block_then_die(table, initializer, rows):
    if table.name == "t" and rows.start >= 300:  # three blocks of the table written, then killed as by `kill -9`
        os.kill(os.getpid(), signal.SIGKILL)
    return rows_of(table, initializer, rows)
memmap.initial_rows = block_then_die
spec = EmbeddingSpec(tables=(TableSpec(name="t", vocabulary_size=1000, dim=4, combiner="sum",
                                       initializer=RowIdInitializer()),),
                     features=(FeatureSpec(name="f", table="t", num_buckets=1000),),
                     optimizer=AdagradSpec(learning_rate=0.1))
Engine(spec, kernels="numpy", table_files={"t": sys.argv[1]})
"""


def test_a_creation_killed_halfway_is_built_again_not_reused(tmp_path, caplog):
    path = str(tmp_path / "t.npy")
    killed = subprocess.run([sys.executable, "-c", KILLED_CREATION, path], timeout=120, capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not os.path.exists(path) and os.path.exists(path + ".partial")  # the slot made it, the table did not
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=1000, dim=4, combiner="sum", initializer=RowIdInitializer()),),
        features=(FeatureSpec(name="f", table="t", num_buckets=1000),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )
    with caplog.at_level(logging.WARNING, logger="tpu_embedding_shim.engine.memmap"):
        reopened = Engine(spec, kernels="numpy", table_files={"t": path})
    assert "incomplete table file" in caplog.text
    np.testing.assert_array_equal(reopened.table("t"), Engine(spec, kernels="numpy").table("t"))  # every row
    assert sorted(os.listdir(tmp_path)) == ["t.npy", "t.npy.accumulators.npy"]
