"""A FIFO, a link to an endless device or a directory where a checkpoint's file should be: an error at once.

Reading a FIFO with no writer, or /dev/zero, never returns; every reader
checks that a data file is a regular file before it opens it. An alarm
guards each test, so a regression fails here instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine import CheckpointError, Engine
from tpu_embedding_shim.engine.checkpoint import list_checkpoints, load_checkpoint
from tpu_embedding_shim.engine.tf_bundle import BundleReader, DataLossError, read_state, write_bundle
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and /dev/zero (POSIX)")

KINDS = {
    "fifo": "a FIFO (named pipe)",
    "zero": "a character device",
    "urandom": "a character device",
    "dir": "a directory",
}


@pytest.fixture(autouse=True)
def alarm():
    def hung(signum, frame):
        raise TimeoutError("the read did not return: it blocks on a file that is not a regular file")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def replace_with(path: str, kind: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        os.mkdir(path)
    else:
        os.symlink(f"/dev/{kind}", path)


@pytest.fixture
def bundle(tmp_path):
    prefix = str(tmp_path / "model.ckpt-1")
    write_bundle(prefix, {"w": np.ones((3, 2), np.float32), "global_step": np.int64(1)}, update_state=True)
    return prefix


@pytest.mark.parametrize("kind", KINDS)
def test_a_bundle_index_that_is_not_a_file_is_data_loss(bundle, kind):
    replace_with(bundle + ".index", kind)
    message = rf"model\.ckpt-1\.index is {KINDS[kind]}, not a checkpoint index file"
    with pytest.raises(DataLossError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BundleReader(bundle)
    with pytest.raises(DataLossError, match="not a checkpoint index file"):
        tf.train.load_checkpoint(bundle)
    with pytest.raises(DataLossError, match="not a checkpoint index file"):
        tf.train.list_variables(bundle)


@pytest.mark.parametrize("kind", KINDS)
def test_a_bundle_data_file_that_is_not_a_file_is_data_loss(bundle, kind):
    replace_with(bundle + ".data-00000-of-00001", kind)
    reader = BundleReader(bundle)  # the index alone is fine
    assert reader.shape("w") == (3, 2)
    with pytest.raises(DataLossError, match=rf"data-00000-of-00001 of tensor 'w' is {KINDS[kind][:5]}"):
        reader.read("w")


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_state_file_that_is_not_a_file_is_data_loss_and_not_read(bundle, kind):
    directory = os.path.dirname(bundle)
    replace_with(os.path.join(directory, "checkpoint"), kind)
    message = r"checkpoint state file is a (FIFO \(named pipe\)|character device), not a regular file"
    with pytest.raises(DataLossError, match=message):
        read_state(directory)
    assert tf.train.latest_checkpoint(directory) is None  # TensorFlow too ignores a state file it can't parse


@pytest.mark.parametrize("kind", KINDS)
def test_the_checkpoint_cli_reports_a_data_file_that_is_not_a_file_in_one_line(bundle, kind):
    replace_with(bundle + ".data-00000-of-00001", kind)
    run = subprocess.run(
        [sys.executable, "-m", "tpu_embedding_shim", "checkpoint", "show", bundle, "w"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and "not a regular file" in run.stderr, run.stderr


def _engine_checkpoint(tmp_path) -> str:
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=6, dim=2),),
        features=(FeatureSpec(name="f", table="t", num_buckets=6),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )
    return Engine(spec, seed=0).save(str(tmp_path / "ckpts"))


@pytest.mark.parametrize("kind", KINDS)
def test_an_engine_array_file_that_is_not_a_file_is_refused(tmp_path, kind):
    path = _engine_checkpoint(tmp_path)
    name = sorted(n for n in os.listdir(path) if n.endswith(".npy"))[0]
    replace_with(os.path.join(path, name), kind)
    with pytest.raises(CheckpointError, match=rf"{name} is {KINDS[kind][:5]}.*, not an array file"):
        load_checkpoint(path)
    assert list_checkpoints(os.path.dirname(path)) == []  # an incomplete checkpoint is not listed


@pytest.mark.parametrize("kind", KINDS)
def test_an_engine_manifest_that_is_not_a_file_is_refused(tmp_path, kind):
    path = _engine_checkpoint(tmp_path)
    replace_with(os.path.join(path, "manifest.json"), kind)
    with pytest.raises(CheckpointError, match=rf"manifest\.json is {KINDS[kind][:5]}.*, not a manifest file"):
        load_checkpoint(path)
    assert list_checkpoints(os.path.dirname(path)) == []


@pytest.mark.parametrize("kind", KINDS)
def test_an_export_table_file_that_is_not_a_file_is_refused(tmp_path, kind):
    from tpu_embedding_shim.runner import load_exported
    from tpu_embedding_shim.runner.export import FORMAT, MANIFEST

    table = {"name": "t", "file": "t.npy", "sha256": "0" * 64, "combiner": "sum"}
    (tmp_path / MANIFEST).write_text(json.dumps({"format": FORMAT, "tables": [table]}))
    replace_with(str(tmp_path / "t.npy"), kind)
    with pytest.raises(ValueError, match=rf"t\.npy' is {KINDS[kind][:5]}.*, not a regular file"):
        load_exported(str(tmp_path))
