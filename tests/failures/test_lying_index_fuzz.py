"""Generated lies in a checkpoint's index: any shape, size, offset, shard or slice, CRC-valid.

Whatever the index claims, reading every tensor returns an array or raises
one of the bundle's errors (DataLossError, NotFoundError,
UnimplementedError) naming the file: never MemoryError, OverflowError,
numpy's own errors or a read that does not return. The address space is
capped around each read, so an allocation the checks missed fails here.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine.tf_bundle import BundleError, BundleReader, SlicedTensor, write_bundle

from .conftest import rewrite_index
from .test_memory_bombs import limited_memory

EDGES = [0, 1, 2, 3, 7, 8, 9, 31, 32, 33, 160, 2**31 - 1, 2**31, 2**32, 10**12, 2**62, 2**63 - 5, 2**63 - 1]

values = st.one_of(st.sampled_from(EDGES), st.integers(-(2**63), 2**63 - 1))
dims = st.one_of(st.sampled_from([0, 1, 2, 4, 10**6, 2**31, 2**40, 2**62]), st.integers(0, 2**63 - 1))
lies = st.fixed_dictionaries(
    {},
    optional={
        "shape": st.lists(dims, min_size=0, max_size=3).map(tuple),
        "size": values,
        "offset": values,
        "shard_id": st.sampled_from([0, 1, -1, 2**31]),
        "dtype": st.sampled_from([1, 2, 3, 7, 9, 14, 19, 0, 200]),
    },
)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    directory = tmp_path_factory.mktemp("original")
    prefix = str(directory / "model.ckpt-1")
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    write_bundle(
        prefix,
        {
            "w": table,
            "parts": SlicedTensor((4, 2), [(((0, 2), (0, -1)), table[:2]), (((2, 2), (0, -1)), table[2:])]),
            "names": np.array([b"a", b"bc", b""], dtype=object),
            "step": np.int64(3),
        },
    )
    return prefix


@given(targets=st.lists(st.integers(0, 5), min_size=1, max_size=3), change=st.lists(lies, min_size=1, max_size=3))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_lying_index_is_a_bundle_error_or_a_value(original, tmp_path, targets, change):
    work = tmp_path / f"case-{os.urandom(4).hex()}"
    work.mkdir()
    for name in os.listdir(os.path.dirname(original)):
        shutil.copy(os.path.join(os.path.dirname(original), name), work)
    prefix = str(work / os.path.basename(original))
    edits = dict(zip(targets, change))
    seen = iter(range(10**6))

    def lie(key, entry):
        fields = edits.get(next(seen))
        return dataclasses.replace(entry, **fields) if fields else None

    rewrite_index(prefix, lie)
    try:
        with limited_memory(1 << 30):
            reader = BundleReader(prefix)
            for name in reader.names():
                try:
                    reader.read(name)
                except BundleError as error:
                    assert str(work) in str(error) or prefix in str(error), error
    except BundleError as error:
        assert str(work) in str(error), error


@given(
    shape=st.lists(dims, min_size=0, max_size=3).map(tuple),
    descr=st.sampled_from(["<f4", "<f8", ">f4", "|u1", "<c8", "|O", "<U3", "|b1"]),
    data=st.integers(0, 200),
    manifest_agrees=st.booleans(),
)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_lying_npy_header_is_a_checkpoint_error(tmp_path, shape, descr, data, manifest_agrees):
    import hashlib
    import json

    from tpu_embedding_shim.engine import CheckpointError, Engine
    from tpu_embedding_shim.engine.checkpoint import load_checkpoint
    from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=6, dim=2),),
        features=(FeatureSpec(name="f", table="t", num_buckets=6),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )
    path = Engine(spec, seed=0).save(str(tmp_path / f"c-{os.urandom(4).hex()}"))
    manifest_path = os.path.join(path, "manifest.json")
    manifest = json.load(open(manifest_path))
    entry = manifest["arrays"][0]
    target = os.path.join(path, entry["file"])
    with open(target, "wb") as file:
        np.lib.format.write_array_header_1_0(file, {"descr": descr, "fortran_order": False, "shape": shape})
        file.write(b"\1" * data)
    raw = open(target, "rb").read()
    entry.update(sha256=hashlib.sha256(raw).hexdigest(), size_bytes=len(raw))
    if manifest_agrees:
        entry.update(shape=list(shape), dtype=np.dtype(descr).str)
    json.dump(manifest, open(manifest_path, "w"))
    with limited_memory(1 << 30):
        try:
            load_checkpoint(path)
        except CheckpointError as error:
            assert entry["file"] in str(error), error
