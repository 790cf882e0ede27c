"""`tpu-embedding-shim checkpoint list|show|convert`, on engine checkpoints and TensorFlow-written ones.

Every bad checkpoint exits with status 1 and one line on stderr naming the
file and the tensor, and leaves the disk as it was (`tree` is compared
before and after). The fixtures under tests/fixtures/tf_checkpoints/ were
written by TensorFlow 2.15; their `expected.json` holds what TensorFlow's
own reader gives (names, dtypes, shapes).
"""

import itertools
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.checkpoint_cli import engine_slot_names
from tpu_embedding_shim.cli import main
from tpu_embedding_shim.engine.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.engine.tf_bundle import BundleEntry, BundleReader, index_file, write_bundle
from tpu_embedding_shim.engine.tf_bundle.table import build_table, read_table
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "tf_checkpoints"
TF_FIXTURES = ["saver_v1", "sharded_v1", "tf2_object"]


def run(*argv):
    return main(["checkpoint", *map(str, argv)])


def tree(root):
    """Every file under `root` with its bytes: what a failed command must leave unchanged."""
    root = pathlib.Path(root)
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.fixture
def engine_ckpt(tmp_path, save_arrays):
    """An engine checkpoint (Adagrad) of 2 tables, step 12, with NaN / inf / -0.0 in a table."""
    rng = np.random.default_rng(0)
    users = rng.standard_normal((5, 4)).astype(np.float32)
    users[0, :3] = [np.nan, np.inf, -0.0]
    users.view(np.uint32)[0, 0] = 0x7FC0BEEF  # a NaN payload survives bit for bit
    tables = {
        "users": {"embedding": users, "accumulators": np.full((5, 4), 0.1, np.float32)},
        "towers/item id": {
            "embedding": np.arange(6, dtype=np.float32).reshape(3, 2),
            "accumulators": np.arange(6, 12, dtype=np.float32).reshape(3, 2),
        },
    }
    return save_arrays(tmp_path / "engine", tables, 12)


def bits(value):
    value = np.asarray(value)
    return value.dtype.str, value.shape, value.tobytes()


# list -------------------------------------------------------------------------------------------


def test_list_an_engine_checkpoint(engine_ckpt, capsys):
    assert run("list", engine_ckpt) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{engine_ckpt}: engine checkpoint, step 12, 5 tensors",
        "name                         dtype    shape",
        "global_step                  int64    []",
        "towers/item id               float32  [3, 2]",
        "towers/item id/accumulators  float32  [3, 2]",
        "users                        float32  [5, 4]",
        "users/accumulators           float32  [5, 4]",
    ]


def test_list_a_directory_of_engine_checkpoints_lists_the_latest(engine_ckpt, capsys):
    assert run("list", os.path.dirname(engine_ckpt), "--verify") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{engine_ckpt}: engine checkpoint, step 12")
    assert out.endswith("verified: every tensor's sha256 matches\n")


@pytest.mark.parametrize("directory", TF_FIXTURES)
def test_list_tensorflow_written_checkpoints(directory, capsys):
    meta = json.loads((FIXTURES / directory / "expected.json").read_text())
    assert run("list", FIXTURES / directory, "--verify") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{FIXTURES / directory / meta['latest']}: TensorFlow checkpoint, {len(meta['tensors'])} tensors"
    listed = [line.split(maxsplit=2) for line in lines[2:-1]]
    assert listed == [
        [name, info["dtype"], "[" + ", ".join(map(str, info["shape"])) + "]"]
        for name, info in sorted(meta["tensors"].items())
    ]
    assert lines[-1] == "verified: every tensor's CRC-32C matches"


# show -------------------------------------------------------------------------------------------


def test_show_a_table(engine_ckpt, capsys):
    assert run("show", engine_ckpt, "towers/item id/accumulators", "--rows", "2", "--start", "1") == 0
    values = np.arange(6, 12, dtype=np.float64)
    assert capsys.readouterr().out.splitlines() == [
        "tensor: towers/item id/accumulators",
        f"checkpoint: {engine_ckpt}: engine checkpoint, step 12",
        "dtype: float32",
        "shape: [3, 2]",
        f"min: 6  max: 11  mean: {values.mean():.6g}  std: {values.std():.6g}",
        "rows 1-2 of 3:",
        "  1: [8. 9.]",
        "  2: [10. 11.]",
    ]


def test_show_counts_non_finite_values_and_leaves_them_out(engine_ckpt, capsys):
    assert run("show", engine_ckpt, "users", "--rows", "1") == 0
    out = capsys.readouterr().out
    users = load_checkpoint(engine_ckpt)[0]["users"]["embedding"].astype(np.float64)
    finite = users[np.isfinite(users)]
    stats = f"min: {finite.min():.6g}  max: {finite.max():.6g}  mean: {finite.mean():.6g}  std: {finite.std():.6g}"
    assert stats in out
    assert "non-finite: 1 NaN, 1 inf (left out of the statistics)" in out
    assert "  0: [    nan     inf -0.      " in out


def test_show_scalars_strings_bools_bfloat16_and_empty_tensors(capsys):
    saver = FIXTURES / "saver_v1"
    cases = {
        "global_step": ["dtype: int64", "shape: []", "value: 42"],
        "vocab": [
            "dtype: string",
            "shape: [3]",
            "lengths: 0-5 bytes, 10 in all",
            "elements 0-2 of 3:",
            "  0: b'apple'",
            "  1: b''",
            "  2: b'caf\\xc3\\xa9'",
        ],
        "mask": ["dtype: bool", "shape: [3]", "true: 2 of 3", "values 0-2 of 3: [ True False  True]"],
        "empty": ["dtype: float32", "shape: [0, 3]", "(empty)"],
    }
    for name, expected in cases.items():
        assert run("show", saver, name) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == f"tensor: {name}" and lines[2:] == expected, lines
    assert run("show", saver, "brain") == 0
    assert "dtype: bfloat16 (read as float32)" in capsys.readouterr().out
    assert run("show", saver, "lr:0") == 0  # a graph tensor name: ':0' is dropped, as tf.train.load_variable does
    assert capsys.readouterr().out.splitlines()[0] == "tensor: lr"


def test_show_a_long_string_is_cut_short(capsys):
    assert run("show", FIXTURES / "tf2_object", "_CHECKPOINTABLE_OBJECT_GRAPH") == 0
    out = capsys.readouterr().out
    graph = BundleReader(str(FIXTURES / "tf2_object" / "ckpt-1")).read("_CHECKPOINTABLE_OBJECT_GRAPH")[()]
    assert f"length: {len(graph)} bytes" in out and f"... ({len(graph)} bytes)" in out
    assert max(len(line) for line in out.splitlines()[-1:]) < 100


def test_show_an_unknown_name_suggests_the_near_ones(capsys):
    assert run("show", FIXTURES / "saver_v1", "embedding") == 1
    err = capsys.readouterr().err
    assert "no tensor 'embedding'" in err and "'input_layer/user_embedding/embedding_weights'" in err


# convert ----------------------------------------------------------------------------------------


def test_engine_to_tensorflow_to_engine_bit_for_bit(engine_ckpt, tmp_path, capsys):
    tf_dir = tmp_path / "tf"
    assert run("convert", engine_ckpt, f"{tf_dir}{os.sep}") == 0
    prefix = tf_dir / "model.ckpt-12"
    assert capsys.readouterr().out == (
        f"wrote {prefix} (model.ckpt-12.index, model.ckpt-12.data-00000-of-00001; "
        f"the state file {tf_dir / 'checkpoint'} names it)\n"
    )
    assert sorted(os.listdir(tf_dir)) == ["checkpoint", "model.ckpt-12.data-00000-of-00001", "model.ckpt-12.index"]
    assert tf.train.latest_checkpoint(str(tf_dir)) == str(prefix)
    reader = BundleReader(str(prefix))
    assert reader.dtype_name("global_step") == "int64" and reader.read("global_step")[()] == 12
    original, step, _ = load_checkpoint(engine_ckpt)
    for table, arrays in original.items():
        for slot, array in arrays.items():
            assert bits(reader.read(table if slot == "embedding" else f"{table}/{slot}")) == bits(array)

    assert run("convert", tf_dir, tmp_path / "back") == 0
    path = latest_checkpoint(tmp_path / "back")
    assert capsys.readouterr().out == f"wrote {path} (an engine checkpoint: manifest.json and 4 .npy files)\n"
    state, back_step, manifest = load_checkpoint(path)
    assert back_step == step == 12
    assert {t: {s: bits(a) for s, a in arrays.items()} for t, arrays in state.items()} == {
        t: {s: bits(a) for s, a in arrays.items()} for t, arrays in original.items()
    }
    assert manifest["extra"] == {"converted_from": str(prefix)}


def test_a_converted_checkpoint_restores_into_an_engine(tmp_path):
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=5, dim=2),),
        features=(FeatureSpec(name="f", table="t", num_buckets=5),),
        optimizer=AdagradSpec(learning_rate=0.5),
    )
    engine = Engine(spec, seed=1)
    result = engine.forward({"f": np.array([[0, 3]])})
    engine.apply_gradients(result, {"f": np.ones((1, 2), np.float32)})
    path = engine.save(str(tmp_path / "a"))
    assert run("convert", path, tmp_path / "tf" / "model") == 0
    assert run("convert", tmp_path / "tf" / "model", tmp_path / "b") == 0
    restored = Engine(spec, seed=2)
    restored.restore(str(tmp_path / "b"))
    assert restored.global_step == engine.global_step == 1
    for table, arrays in engine.state().items():
        for slot, array in arrays.items():
            np.testing.assert_array_equal(restored.state()[table][slot], array)


def convert_written(directory, tensors, **options):
    """Writes `tensors` as a TensorFlow checkpoint (prefix `directory/m`; `options` go to write_bundle), then runs
    `checkpoint convert` on it to `directory/out`; returns the exit status."""
    prefix = str(directory / "m")
    write_bundle(prefix, tensors, **options)
    return run("convert", prefix, directory / "out")


def test_a_tensorflow_checkpoint_of_the_engines_form_converts(tmp_path, capsys):
    tensors = {
        "t": np.ones((3, 2), np.float32),
        "t/momenta": np.zeros((3, 2), np.float32),
        "t/velocities": np.full((3, 2), 0.5, np.float32),
        "b": np.array([[1.5, 2.0]], np.float32),
    }
    assert convert_written(tmp_path, tensors, dtypes={"b": "bfloat16"}) == 0
    assert "no global_step in the checkpoint: the engine checkpoint gets step 0" in capsys.readouterr().err
    state, step, _ = load_checkpoint(latest_checkpoint(tmp_path / "out"))
    assert step == 0 and sorted(state) == ["b", "t"] and sorted(state["t"]) == ["embedding", "momenta", "velocities"]
    assert state["b"]["embedding"].tolist() == [[1.5, 2.0]]  # bfloat16 arrives as float32


def test_a_tpuestimator_checkpoint_is_refused_in_two_lines_pointing_to_migrate(tmp_path, capsys):
    """TensorFlow wrote saver_v1 (a table, its /Adagrad slot, dense variables): no list of names, the next step."""
    before = tree(tmp_path)
    src = FIXTURES / "saver_v1"
    assert run("convert", src, tmp_path / "out") == 1
    err = capsys.readouterr().err
    first, second = err.splitlines()
    assert first.startswith(
        f"tpu-embedding-shim checkpoint convert: error: {src / 'model.ckpt-42'} is a TPUEstimator checkpoint: "
        "1 embedding table under TensorFlow's variable names with their optimizer slots (/Adagrad) and "
        "9 other tensors, the model's other variables (brain, counts, dense/bias, dense/kernel, ...). "
    )
    assert second.startswith(
        "To move its tables and optimizer state to another library, run: tpu-embedding-shim migrate "
        f"--to {{torchrec,keras-rs,jax,tf-midlevel}} MODULE:OBJECT --checkpoint {src} --out DIR, "
    )
    assert tree(tmp_path) == before


def test_the_runners_own_checkpoint_names_the_dense_models_state(tmp_path, capsys):
    table = np.ones((4, 2), np.float32)
    meta = json.dumps({"format": "tpu_embedding_shim.tpu_estimator", "version": 1}).encode()
    prefix = write_bundle(
        str(tmp_path / "model" / "model.ckpt-3"),
        {
            "dense_features/user_embedding/embedding_weights": table,
            "dense_features/user_embedding/embedding_weights/Adagrad": table,
            "w1": np.ones((3, 2), np.float32),
            "b1": np.zeros(2, np.float32),
            "global_step": np.int64(3),
            "_TPU_EMBEDDING_SHIM_STATE": np.array(meta, dtype=object),
        },
        update_state=True,
    )
    assert run("convert", tmp_path / "model", tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert f"{prefix} is a TPUEstimator checkpoint: 1 embedding table " in err
    assert "and 2 other tensors, the dense model's state (b1, w1)." in err
    assert f"--checkpoint {tmp_path / 'model'} --out DIR" in err and len(err.splitlines()) == 2
    assert not (tmp_path / "out").exists()


def test_another_form_is_refused_listing_what_does_not_fit_by_reason(tmp_path, capsys):
    tensors = {
        "t": np.ones((3, 2), np.float32),
        "dense/bias": np.zeros(2, np.float64),
        "lr": np.float32(0.1),
        "vocab": np.array([b"a", b"b"], dtype=object),
        "global_step": np.int64(3),
    }
    assert convert_written(tmp_path, tensors) == 1
    err = capsys.readouterr().err
    assert ": not convertible to an engine checkpoint: its tensors must be `<table>`" in err
    assert (
        "These do not fit:\n  - not a [vocabulary_size, dim] table of numbers: dense/bias (float64 [2]), "
        "lr (float32 []), vocab (string [2])\n"
    ) in err
    assert "global_step" not in err.split("These do not fit:")[1]  # it fits
    assert not (tmp_path / "out").exists()


def test_every_unfit_form_is_named(tmp_path, capsys):
    tensors = {
        "t": np.ones((3, 2), np.float32),
        "t/accumulators": np.ones((2, 2), np.float32),
        "s": np.ones(3, np.float32),
        "s/accumulators": np.ones((3, 2), np.float32),
        "global_step": np.float32(3),
    }
    assert convert_written(tmp_path, tensors) == 1
    err = capsys.readouterr().err
    assert "  - a slot must be numbers with the table's 3 rows: t/accumulators (float32 [2, 2])\n" in err
    assert "  - a slot of s, which is not a table: s/accumulators (float32 [3, 2])\n" in err
    assert "  - the global step must be an int64 (or int32) scalar: global_step (float32 [])\n" in err
    assert not (tmp_path / "out").exists()


def test_convert_never_overwrites(engine_ckpt, tmp_path, capsys):
    assert run("convert", engine_ckpt, tmp_path / "tf" / "model.ckpt-12") == 0
    before = tree(tmp_path)
    assert run("convert", engine_ckpt, tmp_path / "tf") == 1
    assert "already holds a TensorFlow checkpoint" in capsys.readouterr().err
    assert run("convert", tmp_path / "tf", os.path.dirname(engine_ckpt)) == 1
    assert "ckpt-0000000012' already exists" in capsys.readouterr().err
    assert tree(tmp_path) == before


def test_a_table_nested_in_another_is_announced_and_comes_back_as_its_slot(tmp_path, capsys, save_arrays):
    path = save_arrays(
        tmp_path / "e",
        {"a": {"embedding": np.ones((2, 2), np.float32)}, "a/momenta": {"embedding": np.zeros((2, 2), np.float32)}},
        1,
    )
    assert run("convert", path, tmp_path / "tf" / "m") == 0
    assert "tables 'a/momenta' are named after another table plus '/<name>'" in capsys.readouterr().err
    assert run("convert", tmp_path / "tf" / "m", tmp_path / "back") == 0
    state = load_checkpoint(latest_checkpoint(tmp_path / "back"))[0]
    assert sorted(state) == ["a"] and sorted(state["a"]) == ["embedding", "momenta"]


def test_what_has_no_place_in_tensorflows_format_is_announced(tmp_path, capsys):
    path = save_checkpoint(
        str(tmp_path / "e"),
        {"t": {"embedding": np.ones((2, 2), np.float32)}},
        step=1,
        spec_structure={"t": {"vocabulary_size": 2, "dim": 2, "slots": []}},
        fingerprint="x",
        extra={"dataset": "movielens", "epoch": 2},
    )
    assert run("convert", path, tmp_path / "tf" / "m") == 0
    assert "not converted: the manifest's `extra` (dataset, epoch)" in capsys.readouterr().err


def test_slot_names_are_the_engines_optimizers():
    assert engine_slot_names() == ["accumulators", "linears", "mom", "momenta", "ms", "velocities"]


# Errors: exit 1, one line naming the file and the tensor, nothing written ----------------------------


def corrupt(path, position, flip=0x01):
    data = bytearray(pathlib.Path(path).read_bytes())
    data[position] ^= flip
    pathlib.Path(path).write_bytes(bytes(data))


def truncate(path, size):
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[:size])


@pytest.fixture
def tf_ckpt(tmp_path):
    prefix = tmp_path / "src" / "model.ckpt-5"
    write_bundle(
        str(prefix),
        {
            "t": np.arange(8, dtype=np.float32).reshape(4, 2),
            "t/accumulators": np.ones((4, 2), np.float32),
            "global_step": np.int64(5),
        },
    )
    return prefix


def expect_failure(capsys, root, argv, *fragments):
    before = tree(root)
    assert run(*argv) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines and lines[0].startswith(f"tpu-embedding-shim checkpoint {argv[0]}: error: "), captured.err
    for fragment in fragments:
        assert fragment in captured.err, (fragment, captured.err)
    assert "Traceback" not in captured.err
    assert tree(root) == before


def test_a_crc_mismatch(tf_ckpt, tmp_path, capsys):
    data = f"{tf_ckpt}.data-00000-of-00001"
    reader = BundleReader(str(tf_ckpt))
    corrupt(data, reader.entry("t/accumulators").offset + 3)
    for argv in (
        ["show", tf_ckpt, "t/accumulators"],
        ["convert", tf_ckpt, tmp_path / "out"],
        ["list", tf_ckpt, "--verify"],
    ):
        expect_failure(capsys, tmp_path, argv, data, "tensor 't/accumulators'", "checksum does not match")


def test_a_truncated_data_file(tf_ckpt, tmp_path, capsys):
    data = f"{tf_ckpt}.data-00000-of-00001"
    entry = BundleReader(tf_ckpt).entry("t/accumulators")  # the last tensor in the file: cut inside it
    truncate(data, entry.offset + entry.size // 2)
    for argv in (["show", tf_ckpt, "t/accumulators"], ["convert", tf_ckpt, tmp_path / "out"]):
        expect_failure(capsys, tmp_path, argv, data, "tensor 't/accumulators'", "truncated")


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_truncated_or_corrupt_index(tf_ckpt, tmp_path, capsys, damage):
    index = index_file(str(tf_ckpt))
    if damage == "truncate":
        truncate(index, os.path.getsize(index) - 10)
    else:
        corrupt(index, 5)
    for argv in (["list", tf_ckpt], ["show", tf_ckpt, "t"], ["convert", tf_ckpt, tmp_path / "out"]):
        expect_failure(capsys, tmp_path, argv, index)


def test_an_unknown_dtype(tf_ckpt, tmp_path, capsys):
    index = pathlib.Path(index_file(str(tf_ckpt)))
    pairs = read_table(index.read_bytes(), "index")
    key = next(i for i, (k, _) in enumerate(pairs) if k == b"t/accumulators")
    entry = BundleEntry.decode(pairs[key][1])
    pairs[key] = (
        pairs[key][0],
        BundleEntry(99, entry.shape, entry.shard_id, entry.offset, entry.size, entry.crc32c).encode(),
    )
    index.write_bytes(build_table(pairs))
    assert run("list", tf_ckpt) == 0  # listing reads the index only: the dtype is named
    assert "t/accumulators  unknown dtype 99  [4, 2]" in capsys.readouterr().out
    expect_failure(
        capsys,
        tmp_path,
        ["show", tf_ckpt, "t/accumulators"],
        str(tf_ckpt),
        "tensor 't/accumulators'",
        "unknown dtype 99",
    )
    expect_failure(capsys, tmp_path, ["list", tf_ckpt, "--verify"], "tensor 't/accumulators'", "unknown dtype 99")
    expect_failure(
        capsys,
        tmp_path,
        ["convert", tf_ckpt, tmp_path / "out"],
        "a slot must be numbers with the table's 4 rows: t/accumulators (unknown dtype 99 [4, 2])",
    )


def test_a_corrupt_engine_array(engine_ckpt, tmp_path, capsys):
    manifest = json.loads(pathlib.Path(engine_ckpt, "manifest.json").read_text())
    entry = next(e for e in manifest["arrays"] if e["table"] == "users" and e["slot"] == "accumulators")
    corrupt(os.path.join(engine_ckpt, entry["file"]), -1)
    for argv in (
        ["show", engine_ckpt, "users/accumulators"],
        ["convert", engine_ckpt, tmp_path / "out"],
        ["list", engine_ckpt, "--verify"],
    ):
        expect_failure(capsys, tmp_path, argv, "table 'users' slot 'accumulators'", entry["file"], "sha256")


def test_a_missing_or_truncated_engine_array_and_a_broken_manifest(engine_ckpt, tmp_path, capsys):
    manifest_path = pathlib.Path(engine_ckpt, "manifest.json")
    manifest = json.loads(manifest_path.read_text())
    entry = next(e for e in manifest["arrays"] if e["table"] == "users" and e["slot"] == "embedding")
    truncate(os.path.join(engine_ckpt, entry["file"]), 100)
    expect_failure(
        capsys, tmp_path, ["convert", engine_ckpt, tmp_path / "out"], "table 'users' slot 'embedding'", entry["file"]
    )
    os.remove(os.path.join(engine_ckpt, entry["file"]))
    expect_failure(capsys, tmp_path, ["show", engine_ckpt, "users"], entry["file"], "file not found")
    manifest_path.write_text(manifest_path.read_text()[:-20])
    expect_failure(capsys, tmp_path, ["list", engine_ckpt], f"{engine_ckpt}", "manifest.json is not valid JSON")


def test_a_table_tensorflow_has_no_dtype_for(tmp_path, capsys, save_arrays):
    if np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("this platform's long double is a double: no numpy dtype without a TensorFlow code")
    path = save_arrays(tmp_path / "e", {"t": {"embedding": np.ones((2, 2), np.longdouble)}}, 1)
    expect_failure(capsys, tmp_path, ["convert", path, tmp_path / "tf" / "m"], "tensor 't'", "float128")


def one_line_failure(capsys, root, argv):
    """Runs a failing command; its one stderr line after the `error: ` prefix."""
    expect_failure(capsys, root, argv)
    run(*argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.split(": error: ", 1)[1].rstrip("\n")


def test_missing_paths_and_files_that_are_not_checkpoints(tmp_path, capsys):
    nope = tmp_path / "nope"
    assert one_line_failure(capsys, tmp_path, ["list", nope]) == (
        f"{str(nope)!r} does not exist (nor {str(nope) + '.index'!r}): pass a directory or a checkpoint prefix "
        "such as run/model.ckpt-100"
    )
    (tmp_path / "notes.txt").write_text("x")
    assert one_line_failure(capsys, tmp_path, ["show", tmp_path / "notes.txt", "t"]).endswith(
        "is a file, not a checkpoint: pass a directory or a checkpoint prefix such as run/model.ckpt-100"
    )
    assert one_line_failure(capsys, tmp_path, ["list", tmp_path]) == (
        f"{str(tmp_path)!r} holds no checkpoint: no 'checkpoint' state file naming one, no engine checkpoint "
        "(ckpt-<step>), in it or in its subdirectories"
    )


def job_output(root):
    """A directory laid out as the MovieLens job's: `model/` holds the checkpoint (and its state file)."""
    return write_bundle(
        str(root / "job" / "model" / "model.ckpt-5"), {"t": np.ones((4, 2), np.float32)}, update_state=True
    )


def test_a_file_of_a_checkpoint_names_what_to_pass(tmp_path, capsys):
    tf_ckpt = job_output(tmp_path)
    directory = os.path.dirname(tf_ckpt)
    state = os.path.join(directory, "checkpoint")
    assert one_line_failure(capsys, tmp_path, ["list", state]) == (
        f"{state!r} is a file, the state file of a checkpoint directory: pass the directory, {directory!r}"
    )
    index = index_file(str(tf_ckpt))
    assert one_line_failure(capsys, tmp_path, ["list", index]) == (
        f"{index!r} is a file, one file of a checkpoint: pass its prefix, {str(tf_ckpt)!r}"
    )


def test_a_directory_whose_subdirectory_holds_the_checkpoint_gives_the_command(tmp_path, capsys):
    """The MovieLens job writes movielens_output/model/: `list movielens_output` says to list model/."""
    tf_ckpt = job_output(tmp_path)
    job = pathlib.Path(tf_ckpt).parent.parent
    model = pathlib.Path(tf_ckpt).parent
    assert one_line_failure(capsys, job, ["list", job, "--verify"]) == (
        f"{str(job)!r} holds no checkpoint, but its subdirectory {str(model)!r} does; "
        f"run: tpu-embedding-shim checkpoint list {model} --verify"
    )
    assert one_line_failure(capsys, job, ["show", job, "t", "--rows", "2"]).endswith(
        f"run: tpu-embedding-shim checkpoint show {model} t --rows=2 --start=0"
    )
    assert one_line_failure(capsys, job, ["convert", job, job / "out"]).endswith(
        f"run: tpu-embedding-shim checkpoint convert {model} {job / 'out'}"
    )
    (job / "other").mkdir()
    write_bundle(str(job / "other" / "m"), {"t": np.ones((2, 2), np.float32)}, update_state=True)
    assert one_line_failure(capsys, job, ["list", job]) == (
        f"{str(job)!r} holds no checkpoint, but its subdirectories {str(model)!r}, {str(job / 'other')!r} do"
    )


def test_help_describes_every_argument():
    for action, arguments in (("list", ["PATH"]), ("show", ["PATH", "NAME"]), ("convert", ["SRC", "DST"])):
        proc = subprocess.run(
            [sys.executable, "-m", "tpu_embedding_shim", "checkpoint", action, "--help"],
            capture_output=True,
            text=True,
        )
        positional = proc.stdout.split("positional arguments:")[1].split("options:")[0]
        for argument in arguments:
            line = next(line for line in positional.splitlines() if line.strip().startswith(argument))
            assert line.strip() != argument, (action, argument)  # a help text follows the name
        assert "None" not in proc.stdout


def test_bad_option_values_are_usage_errors_naming_the_option(tf_ckpt):
    for value in ("-1", "x"):
        proc = subprocess.run(
            [sys.executable, "-m", "tpu_embedding_shim", "checkpoint", "show", str(tf_ckpt), "t", "--rows", value],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2
        assert proc.stderr.splitlines()[-1] == (
            f"tpu-embedding-shim checkpoint show: error: argument --rows: must be an int >= 0, got {value!r}"
        )


def test_the_installed_command_exits_1_without_a_traceback_and_2_on_usage(tf_ckpt):
    corrupt(f"{tf_ckpt}.data-00000-of-00001", BundleReader(str(tf_ckpt)).entry("t").offset + 2)
    command = [sys.executable, "-m", "tpu_embedding_shim.cli", "checkpoint"]
    proc = subprocess.run(command + ["show", str(tf_ckpt), "t"], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "tensor 't'" in proc.stderr
    proc = subprocess.run(command + ["show", str(tf_ckpt)], capture_output=True, text=True)
    assert proc.returncode == 2 and "the following arguments are required: NAME" in proc.stderr


# Round trips ------------------------------------------------------------------------------------

CASES = itertools.count()
names = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"), min_size=1, max_size=10)


@st.composite
def engine_states(draw):
    """{table: {slot: array}}: random names ('/' inside table names too), sizes (empty ones), dtypes and slots."""
    parts = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    tables = {}
    for i, part in enumerate(parts):
        name = part if i % 2 == 0 else f"sc/ope/{part}"  # no table is named 'sc/ope': no table nests in another
        if name == "global_step":
            continue
        rows, dim = draw(st.integers(0, 5)), draw(st.integers(1, 4))
        dtype = draw(st.sampled_from(["float32", "float64", "float16", "int32", "int64"]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        arrays = {"embedding": (rng.standard_normal((rows, dim)) * 100).astype(dtype)}
        for slot in draw(st.lists(st.sampled_from(engine_slot_names()), max_size=2, unique=True)):
            arrays[slot] = rng.standard_normal((rows, dim)).astype("float32")
        tables[name] = arrays
    return tables


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=engine_states(), step=st.integers(0, 2**40))
def test_any_engine_checkpoint_round_trips_through_tensorflows_format(tmp_path, capsys, save_arrays, state, step):
    assume(state)
    case = tmp_path / str(next(CASES))
    path = save_arrays(case / "a", state, step)
    assert run("convert", path, case / "tf" / "model") == 0
    assert run("convert", case / "tf" / "model", case / "b") == 0
    capsys.readouterr()
    back, back_step, _ = load_checkpoint(latest_checkpoint(case / "b"))
    assert back_step == step
    assert {t: {s: bits(a) for s, a in arrays.items()} for t, arrays in back.items()} == {
        t: {s: bits(a) for s, a in arrays.items()} for t, arrays in state.items()
    }
