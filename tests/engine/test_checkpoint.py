"""Checkpoints: exact round trips, validation before writing, corruption and mismatch detection."""

import json
import os
import pickle

import numpy as np
import pytest

from tpu_embedding_shim.engine import checkpoint as ckpt
from tpu_embedding_shim.engine.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, FtrlSpec, SGDSpec, TableSpec


def make_spec(*, vocab=10, dim=4, optimizer=None, num_shards=1, partition_strategy="div", names=("users", "items")):
    tables = tuple(TableSpec(name=n, vocabulary_size=vocab + i, dim=dim + i) for i, n in enumerate(names))
    features = tuple(FeatureSpec(name=f"f{i}", table=n, num_buckets=vocab + i) for i, n in enumerate(names))
    return EmbeddingSpec(
        tables=tables,
        features=features,
        optimizer=optimizer or AdagradSpec(learning_rate=0.1),
        num_shards=num_shards,
        partition_strategy=partition_strategy,
    )


def make_state(spec, seed=0):
    """Full tables whose entries are random, including NaN/inf/negative zero (bit-exactness)."""
    rng = np.random.default_rng(seed)
    state = {}
    for table, info in spec.structure().items():
        shape = (info["vocabulary_size"], info["dim"])
        arrays = {"embedding": rng.standard_normal(shape).astype(np.float32)}
        for slot in info["slots"]:
            arrays[slot] = rng.random(shape).astype(np.float32)
        state[table] = arrays
    first = next(iter(state.values()))["embedding"]
    first[0, :3] = [np.nan, np.inf, -0.0]
    return state


def save(directory, spec, state, step=1, **kwargs):
    return save_checkpoint(
        directory, state, step=step, spec_structure=spec.structure(), fingerprint=spec.fingerprint(), **kwargs
    )


def assert_bit_identical(a, b):
    assert set(a) == set(b)
    for table in a:
        assert set(a[table]) == set(b[table]), table
        for slot in a[table]:
            x, y = a[table][slot], b[table][slot]
            assert x.dtype == y.dtype and x.shape == y.shape, (table, slot)
            assert x.tobytes() == y.tobytes(), (table, slot)


# Round trips ----------------------------------------------------------------------


def test_round_trip_is_bit_identical(tmp_path):
    spec = make_spec()
    state = make_state(spec)
    extra = {"optimizer_step": 41, "note": "épsilon", "nested": {"a": [1, 2.5, None, True]}}
    path = save(tmp_path, spec, state, step=42, extra=extra)
    assert os.path.basename(path) == "ckpt-0000000042"
    restored, step, manifest = load_checkpoint(path, spec_structure=spec.structure())
    assert_bit_identical(state, restored)
    assert step == 42
    assert manifest["extra"] == extra
    assert manifest["fingerprint"] == spec.fingerprint()
    assert manifest["spec_structure"] == spec.structure()
    assert latest_checkpoint(tmp_path) == path
    assert all(a.flags.writeable for slots in restored.values() for a in slots.values())


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.bool_])
def test_round_trip_keeps_dtype(tmp_path, dtype):
    spec = make_spec(optimizer=SGDSpec(learning_rate=0.1), names=("t",))
    state = {"t": {"embedding": (np.arange(40).reshape(10, 4) % 3).astype(dtype)}}
    restored, _, _ = load_checkpoint(save(tmp_path, spec, state), spec_structure=spec.structure())
    assert_bit_identical(state, restored)


def test_non_contiguous_and_fortran_arrays_round_trip(tmp_path):
    spec = make_spec(optimizer=SGDSpec(learning_rate=0.1), names=("a", "b"))
    big = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    state = {"a": {"embedding": big[:, ::2]}, "b": {"embedding": np.asfortranarray(np.ones((11, 5), np.float32))}}
    restored, _, _ = load_checkpoint(save(tmp_path, spec, state))
    np.testing.assert_array_equal(restored["a"]["embedding"], big[:, ::2])
    np.testing.assert_array_equal(restored["b"]["embedding"], state["b"]["embedding"])


def test_restores_into_other_shard_count_and_strategy(tmp_path):
    saved_with = make_spec(num_shards=4, partition_strategy="div")
    state = make_state(saved_with)
    path = save(tmp_path, saved_with, state)
    restore_into = make_spec(num_shards=3, partition_strategy="mod")
    assert restore_into.fingerprint() == saved_with.fingerprint()
    restored, _, _ = load_checkpoint(path, spec_structure=restore_into.structure())
    assert_bit_identical(state, restored)


@pytest.mark.parametrize(
    "name",
    [
        "towers/user/embedding",
        "a b",
        "ünïcødé",
        "..",
        ".hidden",
        "x" * 300,
        "a_b",
        "a/b",
        "CON",
        "t:1\\2*?",
    ],
)
def test_odd_table_names(tmp_path, name):
    spec = make_spec(names=(name, "a_b" if name != "a_b" else "a/b"))
    state = make_state(spec)
    path = save(tmp_path, spec, state)
    files = [f for f in os.listdir(path) if f.endswith(".npy")]
    assert len(files) == 4 and all(not f.startswith(".") and "/" not in f and len(f) < 120 for f in files)
    restored, _, manifest = load_checkpoint(path, spec_structure=spec.structure())
    assert_bit_identical(state, restored)
    assert {e["table"] for e in manifest["arrays"]} == set(spec.structure())


def test_file_names_are_unambiguous():
    names = {ckpt.array_file_name(t, s) for t, s in [("a/b", "x"), ("a_b", "x"), ("a", "b__x"), ("a__b", "x")]}
    assert len(names) == 4


def test_resaving_a_step_replaces_it(tmp_path):
    spec = make_spec()
    save(tmp_path, spec, make_state(spec, seed=1), step=5)
    second = make_state(spec, seed=2)
    path = save(tmp_path, spec, second, step=5)
    assert list_checkpoints(tmp_path) == [path]
    assert_bit_identical(second, load_checkpoint(path)[0])
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000005"]


# Listing and pruning --------------------------------------------------------------


def test_keep_prunes_oldest(tmp_path):
    spec = make_spec()
    state = make_state(spec)
    for step in range(1, 8):
        save(tmp_path, spec, state, step=step * 10, keep=3)
    assert [os.path.basename(p) for p in list_checkpoints(tmp_path)] == [
        "ckpt-0000000050",
        "ckpt-0000000060",
        "ckpt-0000000070",
    ]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000050", "ckpt-0000000060", "ckpt-0000000070"]


def test_keep_never_deletes_the_checkpoint_just_written(tmp_path):
    spec = make_spec()
    state = make_state(spec)
    for step in (10, 20):
        save(tmp_path, spec, state, step=step, keep=2)
    path = save(tmp_path, spec, state, step=5, keep=2)
    assert os.path.isdir(path)
    assert [os.path.basename(p) for p in list_checkpoints(tmp_path)] == ["ckpt-0000000005", "ckpt-0000000020"]


def test_latest_and_list_ignore_incomplete_directories(tmp_path):
    spec = make_spec()
    good = save(tmp_path, spec, make_state(spec), step=1)
    (tmp_path / ".tmp-ckpt-0000000009-1-abc").mkdir()
    (tmp_path / "ckpt-0000000008").mkdir()  # no manifest
    (tmp_path / "ckpt-0000000007").mkdir()
    (tmp_path / "ckpt-0000000007" / "manifest.json").write_text("{ truncated")
    (tmp_path / "not-a-checkpoint").mkdir()
    assert list_checkpoints(tmp_path) == [good]
    assert latest_checkpoint(tmp_path) == good


def test_latest_ignores_checkpoint_with_missing_or_truncated_file(tmp_path):
    spec = make_spec()
    first = save(tmp_path, spec, make_state(spec), step=1)
    second = save(tmp_path, spec, make_state(spec), step=2)
    npy = sorted(f for f in os.listdir(second) if f.endswith(".npy"))[0]
    with open(os.path.join(second, npy), "r+b") as f:
        f.truncate(100)
    assert latest_checkpoint(tmp_path) == first


def test_missing_directory_has_no_checkpoints(tmp_path):
    assert latest_checkpoint(tmp_path / "nope") is None
    assert list_checkpoints(tmp_path / "nope") == []


def test_save_cleans_stale_temporaries(tmp_path):
    spec = make_spec()
    stale = tmp_path / ".tmp-ckpt-0000000003-99999-zz"
    stale.mkdir()
    (stale / "half.npy").write_bytes(b"\x93NUMPY")
    (tmp_path / ".del-ckpt-1-aa").mkdir()
    save(tmp_path, spec, make_state(spec), step=4)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000004"]


def test_crash_between_the_two_renames_of_a_replacement_is_recovered(tmp_path):
    """A crash after `ckpt-N` moved aside but before the new one arrived."""
    spec = make_spec()
    state = make_state(spec)
    path = save(tmp_path, spec, state, step=3)
    aside = tmp_path / ".old-ckpt-0000000003-123-ab"
    os.rename(path, aside)
    assert list_checkpoints(tmp_path) == [str(aside)]  # readers fall back to it
    assert_bit_identical(state, load_checkpoint(latest_checkpoint(tmp_path))[0])
    save(tmp_path, spec, state, step=4)  # the next save puts it back
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000003", "ckpt-0000000004"]


def test_failed_save_leaves_previous_checkpoint_and_no_debris(tmp_path, monkeypatch):
    spec = make_spec()
    state = make_state(spec)
    good = save(tmp_path, spec, state, step=1)
    real_write = ckpt._write_array
    calls = []

    def failing_write(*args):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        return real_write(*args)

    monkeypatch.setattr(ckpt, "_write_array", failing_write)
    with pytest.raises(OSError, match="disk full"):
        save(tmp_path, spec, state, step=2)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000001"]
    assert latest_checkpoint(tmp_path) == good


def test_failed_replacement_restores_the_old_checkpoint(tmp_path, monkeypatch):
    spec = make_spec()
    state = make_state(spec)
    path = save(tmp_path, spec, state, step=1)
    real_rename = os.rename

    def rename(src, dst):
        if os.path.basename(str(src)).startswith(".tmp-ckpt-"):
            raise OSError("rename failed")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="rename failed"):
        save(tmp_path, spec, make_state(spec, seed=9), step=1)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000001"]
    assert_bit_identical(state, load_checkpoint(path)[0])


# Validation before writing ---------------------------------------------------------


@pytest.mark.parametrize(
    "mutate, error, match",
    [
        (lambda s: s.pop("items"), ValueError, r"missing \['items'\]"),
        (lambda s: s.update(extra_table={"embedding": np.zeros((2, 2), np.float32)}), ValueError, "unexpected"),
        (lambda s: s["users"].pop("accumulators"), ValueError, r"table 'users' must have arrays"),
        (lambda s: s["users"].update(momenta=np.zeros((10, 4), np.float32)), ValueError, "must have arrays"),
        (lambda s: s["users"].update(embedding=np.zeros((9, 4), np.float32)), ValueError, r"of shape \(10, 4\)"),
        (lambda s: s["users"].update(embedding=[[0.0] * 4] * 10), TypeError, "numpy.ndarray"),
        (lambda s: s["users"].update(embedding=np.empty((10, 4), object)), TypeError, "no objects"),
        (lambda s: s["users"].update(accumulators=np.zeros((3, 4), np.float32)), ValueError, "with 10 rows"),
        (lambda s: s.__setitem__("users", np.zeros(3)), TypeError, r"state\['users'\]"),
    ],
)
def test_bad_state_raises_before_anything_is_written(tmp_path, mutate, error, match):
    spec = make_spec()
    state = make_state(spec)
    mutate(state)
    with pytest.raises(error, match=match):
        save(tmp_path / "ckpts", spec, state)
    assert not (tmp_path / "ckpts").exists()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"step": -1}, ValueError, "step"),
        ({"step": 1.0}, ValueError, "step"),
        ({"keep": 0}, ValueError, "keep"),
        ({"extra": {"f": object()}}, TypeError, "JSON-serialisable"),
        ({"extra": {"x": float("nan")}}, TypeError, "JSON-serialisable"),
        ({"extra": [1]}, TypeError, "extra"),
        ({"fingerprint": 3}, TypeError, "fingerprint"),
        ({"spec_structure": {}}, TypeError, "spec_structure"),
        ({"spec_structure": {"users": {"dim": 4}}}, ValueError, "spec_structure"),
    ],
)
def test_bad_arguments_raise_before_anything_is_written(tmp_path, kwargs, error, match):
    spec = make_spec()
    args = dict(step=1, spec_structure=spec.structure(), fingerprint=spec.fingerprint())
    args.update(kwargs)
    with pytest.raises(error, match=match):
        save_checkpoint(tmp_path / "ckpts", make_state(spec), **args)
    assert not (tmp_path / "ckpts").exists()


# Loading: mismatches and corruption ---------------------------------------------------


def test_mismatched_vocabulary_names_table_expected_and_found(tmp_path):
    path = save(tmp_path, make_spec(vocab=10), make_state(make_spec(vocab=10)))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, spec_structure=make_spec(vocab=12).structure())
    message = str(info.value)
    assert "table 'users': expected vocabulary_size=12, found vocabulary_size=10" in message
    assert "table 'items': expected vocabulary_size=13, found vocabulary_size=11" in message


def test_mismatched_dim_and_slots(tmp_path):
    path = save(tmp_path, make_spec(), make_state(make_spec()))
    with pytest.raises(CheckpointError, match=r"table 'users': expected dim=5, found dim=4"):
        load_checkpoint(path, spec_structure=make_spec(dim=5).structure())
    ftrl = make_spec(optimizer=FtrlSpec(learning_rate=0.1)).structure()
    with pytest.raises(
        CheckpointError, match=r"expected optimizer slots \['accumulators', 'linears'\], found \['accumulators'\]"
    ):
        load_checkpoint(path, spec_structure=ftrl)


def test_missing_and_unexpected_tables(tmp_path):
    path = save(tmp_path, make_spec(), make_state(make_spec()))
    other = make_spec(names=("users", "ads")).structure()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, spec_structure=other)
    assert "table 'ads' is expected by the spec" in str(info.value)
    assert "table 'items' is in the checkpoint but not in the spec" in str(info.value)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="No checkpoint"):
        load_checkpoint(tmp_path / "ckpt-0000000001")
    spec = make_spec()
    path = save(tmp_path, spec, make_state(spec))
    with pytest.raises(CheckpointError, match="did you mean latest_checkpoint"):
        load_checkpoint(tmp_path)
    assert isinstance(CheckpointError("x"), ValueError)
    assert path


def _npy_files(path):
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".npy"))


@pytest.mark.parametrize("where", ["header", "middle", "end"])
def test_flipped_bytes_are_detected(tmp_path, where):
    spec = make_spec()
    path = save(tmp_path, spec, make_state(spec))
    target = _npy_files(path)[1]
    data = bytearray(open(target, "rb").read())
    index = {"header": 20, "middle": len(data) // 2, "end": len(data) - 1}[where]
    data[index] ^= 0xFF
    open(target, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match=r"corrupt: sha256 expected"):
        load_checkpoint(path)


def test_missing_array_file_is_detected(tmp_path):
    spec = make_spec()
    path = save(tmp_path, spec, make_state(spec))
    os.remove(_npy_files(path)[0])
    with pytest.raises(CheckpointError, match="file not found"):
        load_checkpoint(path)


def _rewrite_manifest(path, edit):
    manifest_path = os.path.join(path, "manifest.json")
    manifest = json.load(open(manifest_path))
    edit(manifest)
    json.dump(manifest, open(manifest_path, "w"))


def test_pickled_object_array_is_refused_even_with_a_matching_checksum(tmp_path):
    spec = make_spec(optimizer=SGDSpec(learning_rate=0.1), names=("t",))
    path = save(tmp_path, spec, {"t": {"embedding": np.zeros((10, 4), np.float32)}})
    target = _npy_files(path)[0]
    payload = np.empty((10, 4), dtype=object)
    payload[0, 0] = {"evil": "pickle"}
    np.save(target, payload, allow_pickle=True)
    import hashlib

    digest = hashlib.sha256(open(target, "rb").read()).hexdigest()
    size = os.path.getsize(target)

    def edit(manifest):
        manifest["arrays"][0].update(sha256=digest, size_bytes=size, dtype="|O")

    _rewrite_manifest(path, edit)
    with pytest.raises(CheckpointError, match="allow_pickle=False"):
        load_checkpoint(path)


def test_raw_pickle_file_is_refused(tmp_path):
    spec = make_spec(optimizer=SGDSpec(learning_rate=0.1), names=("t",))
    path = save(tmp_path, spec, {"t": {"embedding": np.zeros((10, 4), np.float32)}})
    target = _npy_files(path)[0]
    open(target, "wb").write(pickle.dumps(np.zeros((10, 4), np.float32)))
    import hashlib

    digest = hashlib.sha256(open(target, "rb").read()).hexdigest()
    _rewrite_manifest(path, lambda m: m["arrays"][0].update(sha256=digest, size_bytes=os.path.getsize(target)))
    with pytest.raises(CheckpointError, match="cannot be read safely"):
        load_checkpoint(path)


def test_manifest_shape_or_dtype_disagreeing_with_file_is_detected(tmp_path):
    spec = make_spec()
    path = save(tmp_path, spec, make_state(spec))
    _rewrite_manifest(path, lambda m: m["arrays"][0].update(dtype="<f8"))
    with pytest.raises(CheckpointError, match=r"expected shape \(\d+, \d+\) dtype <f8, found .* dtype <f4"):
        load_checkpoint(path)


def test_manifest_cannot_point_outside_the_checkpoint(tmp_path):
    spec = make_spec()
    path = save(tmp_path, spec, make_state(spec))
    _rewrite_manifest(path, lambda m: m["arrays"][0].update(file="../../etc/passwd"))
    with pytest.raises(CheckpointError, match="not a plain file name"):
        load_checkpoint(path)
    assert latest_checkpoint(tmp_path) is None


def test_unknown_format_version_is_refused(tmp_path):
    spec = make_spec()
    path = save(tmp_path, spec, make_state(spec))
    _rewrite_manifest(path, lambda m: m.update(format_version=99))
    with pytest.raises(CheckpointError, match="format_version 99"):
        load_checkpoint(path)


def test_manifest_is_readable_and_complete(tmp_path):
    spec = make_spec()
    path = save(tmp_path, spec, make_state(spec), step=3, extra={"k": 1})
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    assert manifest["format_version"] == 1 and manifest["step"] == 3
    entry = manifest["arrays"][0]
    assert set(entry) >= {"table", "slot", "file", "shape", "dtype", "sha256", "size_bytes"}
    assert entry["table"] == "users" and entry["slot"] == "embedding" and entry["shape"] == [10, 4]
    assert [(e["table"], e["slot"]) for e in manifest["arrays"]] == [
        ("users", "embedding"),
        ("users", "accumulators"),
        ("items", "embedding"),
        ("items", "accumulators"),
    ]
