"""A memory-mapped table file cut short after it was complete is refused on open, never read as zeros."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec


def spec() -> EmbeddingSpec:
    return EmbeddingSpec(
        tables=(TableSpec(name="big", vocabulary_size=64, dim=4),),
        features=(FeatureSpec(name="f", table="big", num_buckets=64),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )


@pytest.fixture
def table_file(tmp_path):
    path = str(tmp_path / "big.npy")
    engine = Engine(spec(), seed=0, table_files={"big": path})
    values = engine.table("big")
    del engine
    return path, values


@pytest.mark.parametrize("which", ["table", "slot"])
@pytest.mark.parametrize("cut", [4, 64 * 4 * 4 // 2, 64 * 4 * 4 - 1])
def test_a_table_file_cut_short_is_refused_and_left_as_it_is(table_file, which, cut):
    path, _ = table_file
    target = path if which == "table" else f"{path}.accumulators.npy"
    size = os.path.getsize(target)
    os.truncate(target, size - cut)
    with pytest.raises(ValueError, match=rf"The table file '.*{os.path.basename(target)}' has {size - cut:,} bytes"):
        Engine(spec(), seed=0, table_files={"big": path})
    assert os.path.getsize(target) == size - cut  # not extended with zeros


def test_a_complete_table_file_reopens_with_its_values(table_file):
    path, values = table_file
    assert Engine(spec(), seed=1, table_files={"big": path}).table("big").tolist() == values.tolist()


def test_a_table_file_grown_or_of_another_shape_is_refused(table_file):
    path, _ = table_file
    with open(path, "ab") as file:
        file.write(b"\0" * 16)
    with pytest.raises(ValueError, match="needs .* the file was cut short \\(or extended\\)"):
        Engine(spec(), seed=0, table_files={"big": path})
    np.save(path, np.zeros((64, 5), np.float32))
    with pytest.raises(ValueError, match=r"holds float32 \(64, 5\); expected float32 \(64, 4\)"):
        Engine(spec(), seed=0, table_files={"big": path})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_table_file_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    path = str(tmp_path / "big.npy")
    os.mkfifo(path) if kind == "fifo" else os.symlink("/dev/zero", path)

    def hung(signum, frame):
        raise TimeoutError("opening the table file blocked")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(ValueError, match=r"is a (FIFO \(named pipe\)|character device), not a regular file"):
            Engine(spec(), seed=0, table_files={"big": path})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
