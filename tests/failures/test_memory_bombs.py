"""Files that claim more than they hold: every claim is checked against the file before anything is allocated.

Each checkpoint here is small and checksum-valid; only its index (or .npy
header) lies. Before the checks these raised MemoryError (terabytes) or
OverflowError. The address space is limited to 2 GiB around each read, so a
regression is a MemoryError here, not a machine that swaps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine import CheckpointError, Engine
from tpu_embedding_shim.engine.checkpoint import load_checkpoint
from tpu_embedding_shim.engine.tf_bundle import BundleReader, DataLossError
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

from .conftest import rewrite_index, slice_key, snapshot


@contextlib.contextmanager
def limited_memory(limit: int = 2 << 30):
    """Caps the process's address space while the block runs (where the OS allows it)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        current = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (current + limit, hard))
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _lie(prefix: str, name: str, **fields) -> None:
    rewrite_index(prefix, lambda key, entry: dataclasses.replace(entry, **fields) if key == name.encode() else None)


HUGE = [(10**6, 10**6), (2**40, 2**40), (2**31, 2**31, 4)]


@pytest.mark.parametrize("shape", HUGE)
def test_a_numeric_tensor_claiming_a_huge_shape_is_data_loss(small_bundle, shape):
    _lie(small_bundle, "w", shape=shape)
    before = snapshot(os.path.dirname(small_bundle))
    message = r"\.index: tensor 'w' .*(stored size of 32 bytes|more elements than any array can hold)"
    with limited_memory(), pytest.raises(DataLossError, match=message):
        BundleReader(small_bundle).read("w")
    assert snapshot(os.path.dirname(small_bundle)) == before


@pytest.mark.parametrize("size", [2**40, 2**61, 2**63 - 1, 2**63 - 5])
def test_a_numeric_tensor_whose_shape_and_size_agree_but_exceed_the_file_is_data_loss(small_bundle, size):
    rows = size // 8
    _lie(small_bundle, "w", shape=(rows, 2), size=rows * 8)
    message = (
        r"data-00000-of-00001: tensor 'w' needs bytes"
        if size <= 2**61
        else r"\.index: tensor 'w' has shape \[\d+, 2\], more elements than any array can hold"
    )
    with limited_memory(), pytest.raises(DataLossError, match=message):
        BundleReader(small_bundle).read("w")


def test_a_partitioned_tensor_claiming_a_huge_shape_is_refused_before_allocating(small_bundle):
    # The whole tensor and its one slice both claim [10**6, 10**6]: 3.64 TiB before the checks.
    big = (10**6, 10**6)

    def change(key, entry):
        if key == b"parts":
            return dataclasses.replace(entry, shape=big, slices=(((0, -1), (0, -1)),))
        if key == slice_key("parts", ((0, 2), (0, -1))):
            return dataclasses.replace(entry, shape=big, size=4 * 10**12)
        return None

    rewrite_index(small_bundle, change)
    # the slice's key names extents (0, 2): give the index the key of the full slice instead
    path = small_bundle + ".index"
    from tpu_embedding_shim.engine.tf_bundle.table import build_table, read_table

    pairs = read_table(open(path, "rb").read(), path)
    pairs = [
        (slice_key("parts", ((0, -1), (0, -1))) if k == slice_key("parts", ((0, 2), (0, -1))) else k, v)
        for k, v in pairs
    ]
    open(path, "wb").write(build_table(sorted(pairs)))
    with limited_memory(), pytest.raises(DataLossError, match=r"slice \[:, :\] of tensor 'parts' needs bytes"):
        BundleReader(small_bundle).read("parts")


def test_slices_that_claim_more_than_the_data_files_hold_are_data_loss(small_bundle):
    # Both slices point at the same bytes: each fits the file, together they claim more than the file holds.
    def change(key, entry):
        if key == b"parts":
            return dataclasses.replace(entry, shape=(2**20, 2), slices=tuple(((i * 2, 2), (0, -1)) for i in range(2)))
        return None

    rewrite_index(small_bundle, change)
    with pytest.raises(DataLossError, match=r"slices of tensor 'parts' cover 8 of its 2097152 elements"):
        BundleReader(small_bundle).read("parts")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"shape": (10**12,)}, r"tensor 'names' \(string \[1000000000000\]\) has a stored size of 9 bytes"),
        ({"shape": (10**12,), "size": 10**12}, r"tensor 'names' needs bytes \[\d+, 1000000000\d+\), the file has"),
        ({"size": 2**63 - 5}, r"tensor 'names' needs bytes \[\d+, 922337203685477\d+\), the file has"),
        ({"size": 2**62}, r"tensor 'names' needs bytes"),
        ({"offset": -3}, r"tensor 'names' has offset -3 and size 9; both must be >= 0"),
        ({"offset": 2**62}, r"tensor 'names' needs bytes \[4611686018427387904, "),
    ],
)
def test_a_string_tensor_claiming_more_than_its_file_is_data_loss(small_bundle, fields, message):
    _lie(small_bundle, "names", **fields)
    with limited_memory(), pytest.raises(DataLossError, match=message):
        BundleReader(small_bundle).read("names")


def test_the_checkpoint_cli_prints_one_line_for_a_lying_index(small_bundle):
    _lie(small_bundle, "names", size=2**63 - 5)
    for argv in (["list", small_bundle, "--verify"], ["show", small_bundle, "names"]):
        run = subprocess.run(
            [sys.executable, "-m", "tpu_embedding_shim", "checkpoint", *argv], capture_output=True, text=True
        )
        assert run.returncode == 1, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "error:" in run.stderr and "tensor 'names' needs bytes" in run.stderr


# Engine checkpoints: a .npy header against its manifest ---------------------------------------------------


def _engine_checkpoint(tmp_path) -> str:
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=6, dim=2),),
        features=(FeatureSpec(name="f", table="t", num_buckets=6),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )
    return Engine(spec, seed=0).save(str(tmp_path / "ckpts"))


def _rewrite_npy(path: str, entry: dict, header: dict, data: bytes = b"") -> None:
    target = os.path.join(path, entry["file"])
    with open(target, "wb") as file:
        np.lib.format.write_array_header_1_0(file, header)
        file.write(data)
    raw = open(target, "rb").read()
    manifest_path = os.path.join(path, "manifest.json")
    manifest = json.load(open(manifest_path))
    for item in manifest["arrays"]:
        if item["file"] == entry["file"]:
            item.update(sha256=hashlib.sha256(raw).hexdigest(), size_bytes=len(raw))
    json.dump(manifest, open(manifest_path, "w"))


@pytest.mark.parametrize("shape", [(10**5, 10**5 * 2), (2**40, 2), (6, 2**50)])
def test_an_npy_header_claiming_another_shape_than_the_manifest_is_refused(tmp_path, shape):
    path = _engine_checkpoint(tmp_path)
    entry = json.load(open(os.path.join(path, "manifest.json")))["arrays"][0]
    _rewrite_npy(path, entry, {"descr": "<f4", "fortran_order": False, "shape": shape}, b"\0" * 48)
    with (
        limited_memory(),
        pytest.raises(
            CheckpointError,
            match=rf"table 't' slot '{entry['slot']}' .*: expected shape \(6, 2\) dtype <f4, found shape",
        ),
    ):
        load_checkpoint(path)


def test_an_npy_header_whose_data_is_short_of_its_shape_is_refused(tmp_path):
    path = _engine_checkpoint(tmp_path)
    entry = json.load(open(os.path.join(path, "manifest.json")))["arrays"][0]
    _rewrite_npy(path, entry, {"descr": "<f4", "fortran_order": False, "shape": (6, 2)}, b"\0" * 40)
    with pytest.raises(CheckpointError, match=r"the header claims 48 bytes of data after byte \d+, the file has"):
        load_checkpoint(path)


def test_the_checkpoint_cli_prints_one_line_for_a_lying_npy_header(tmp_path):
    path = _engine_checkpoint(tmp_path)
    entry = json.load(open(os.path.join(path, "manifest.json")))["arrays"][0]
    _rewrite_npy(path, entry, {"descr": "<f4", "fortran_order": False, "shape": (2**40, 2)}, b"\0" * 48)
    name = "t" if entry["slot"] == "embedding" else f"t/{entry['slot']}"
    run = subprocess.run(
        [sys.executable, "-m", "tpu_embedding_shim", "checkpoint", "show", path, name], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "found shape (1099511627776, 2)" in run.stderr


# tf.nn: a SparseTensor's dense_shape is not allocated ------------------------------------------------------


def test_embedding_lookup_sparse_with_a_huge_dense_shape_returns_the_rows_up_to_the_last_id():
    params = np.arange(20, dtype=np.float32).reshape(10, 2)
    ids = tf.SparseTensor(indices=[[0, 0]], values=[3], dense_shape=[10**12, 2])
    with limited_memory():
        out = tf.nn.embedding_lookup_sparse(params, ids, None)
        later = tf.nn.embedding_lookup_sparse(
            params,
            tf.SparseTensor(indices=[[4, 1]], values=[2], dense_shape=[10**12, 10**9]),
            tf.SparseTensor(indices=[[4, 1]], values=[2.0], dense_shape=[10**12, 10**9]),
            combiner="sum",
        )
    assert out.tolist() == [[6.0, 7.0]]  # TensorFlow: [1, 2], one row per row up to the last with an id
    assert later.shape == (5, 2) and later[4].tolist() == [8.0, 10.0] and not later[:4].any()


def test_a_safe_lookup_whose_dense_shape_does_not_fit_in_memory_is_a_value_error_naming_it():
    params = np.arange(20, dtype=np.float32).reshape(10, 2)
    ids = tf.SparseTensor(indices=[[0, 0]], values=[3], dense_shape=[10**12, 2])
    with (
        limited_memory(),
        pytest.raises(ValueError, match=r"Argument `sparse_ids`: its dense_shape \[1000000000000, 2\]"),
    ):
        tf.nn.safe_embedding_lookup_sparse(params, ids)
