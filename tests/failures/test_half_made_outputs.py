"""A write that fails creates nothing: no new directory, no half checkpoint, the state file as it was.

Failures are injected two ways: a write that raises OSError(ENOSPC) after
writing part of its data (monkeypatched), and a real full disk, a 64 KiB
tmpfs, where the machine lets the tests mount one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile

import numpy as np
import pytest

from tpu_embedding_shim import cli
from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.engine import checkpoint as engine_checkpoint
from tpu_embedding_shim.engine.tf_bundle import read_state, write_bundle
from tpu_embedding_shim.engine.tf_bundle import writer as bundle_writer
from tpu_embedding_shim.migrate import migration as migration_module
from tpu_embedding_shim.migrate import to_jax_tpu_embedding
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

from .conftest import snapshot


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def spec(vocabulary_size: int = 6, dim: int = 2) -> EmbeddingSpec:
    return EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=vocabulary_size, dim=dim),),
        features=(FeatureSpec(name="f", table="t", num_buckets=vocabulary_size),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )


@pytest.fixture
def midway(monkeypatch):
    """Makes `module.name` (a function whose first argument is a path it writes) write part of its file,
    then fail as a full disk does."""

    def patch(module, name):
        def half(path, *args, **kwargs):
            target = os.path.join(path, "x") if os.path.isdir(path) else path
            with open(target, "wb") as file:
                file.write(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(module, name, half)

    return patch


# write_bundle --------------------------------------------------------------------------------------------------


def test_a_failed_write_bundle_leaves_no_directory(tmp_path, midway):
    midway(bundle_writer, "_write_data")
    with pytest.raises(OSError, match="No space left"):
        write_bundle(str(tmp_path / "new" / "deeper" / "model.ckpt-1"), {"w": np.ones(3, np.float32)})
    assert os.listdir(tmp_path) == []


def test_a_state_file_that_cannot_be_written_leaves_the_earlier_checkpoints_as_they_were(tmp_path, monkeypatch):
    first = str(tmp_path / "model.ckpt-1")
    write_bundle(first, {"w": np.ones(3, np.float32)}, update_state=True)
    before = snapshot(str(tmp_path))
    monkeypatch.setattr(bundle_writer, "record_latest", full_disk)
    second = str(tmp_path / "model.ckpt-2")
    with pytest.raises(OSError, match="No space left"):
        write_bundle(second, {"w": np.zeros(3, np.float32)}, update_state=True)
    assert snapshot(str(tmp_path)) == before  # no model.ckpt-2 files, the state file unchanged
    assert read_state(str(tmp_path)).model_checkpoint_path == first
    monkeypatch.undo()
    write_bundle(second, {"w": np.zeros(3, np.float32)}, update_state=True)  # a rerun is not refused
    assert read_state(str(tmp_path)).model_checkpoint_path == second


# Engine.save -----------------------------------------------------------------------------------------------------


def test_a_failed_engine_save_leaves_no_directory(tmp_path, midway):
    engine = Engine(spec(), seed=0)
    midway(engine_checkpoint, "_write_array")
    with pytest.raises(OSError, match="No space left"):
        engine.save(str(tmp_path / "run" / "ckpts"))
    assert os.listdir(tmp_path) == []


def test_a_failed_engine_save_into_an_existing_directory_leaves_it_as_it_was(tmp_path, midway):
    engine = Engine(spec(), seed=0)
    engine.save(str(tmp_path))
    before = snapshot(str(tmp_path))
    engine.global_step = 1
    midway(engine_checkpoint, "_write_array")
    with pytest.raises(OSError, match="No space left"):
        engine.save(str(tmp_path))
    assert snapshot(str(tmp_path)) == before


# checkpoint convert, both ways -------------------------------------------------------------------------------


def test_a_failed_convert_to_tensorflow_leaves_no_directory(tmp_path, midway, capsys):
    source = Engine(spec(), seed=0).save(str(tmp_path / "engine"))
    midway(bundle_writer, "_write_data")
    assert cli.main(["checkpoint", "convert", source, str(tmp_path / "tf" / "run") + os.sep]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert sorted(os.listdir(tmp_path)) == ["engine"]


def test_a_failed_convert_to_an_engine_checkpoint_leaves_no_directory(tmp_path, midway, capsys):
    source = Engine(spec(), seed=0).save(str(tmp_path / "engine"))
    assert cli.main(["checkpoint", "convert", source, str(tmp_path / "tf") + os.sep]) == 0
    midway(engine_checkpoint, "_write_array")
    assert cli.main(["checkpoint", "convert", str(tmp_path / "tf"), str(tmp_path / "back" / "deeper")]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert "checkpoint convert: error:" in err and "No space left on device" in err
    assert sorted(os.listdir(tmp_path)) == ["engine", "tf"]


# migrate ---------------------------------------------------------------------------------------------------------


def test_a_failed_migration_write_leaves_no_directory(tmp_path, midway):
    migration = to_jax_tpu_embedding(spec())
    midway(migration_module, "write_npz")
    with pytest.raises(OSError, match="No space left"):
        migration.write(tmp_path / "out" / "deeper")
    assert os.listdir(tmp_path) == []


def test_a_failed_migrate_command_leaves_no_directory(tmp_path, midway, capsys, monkeypatch):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    midway(migration_module, "write_npz")
    argv = ["migrate", "--to", "jax", "tests.migrate.models:small_spec", "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert os.listdir(tmp_path) == []


# A real full disk -------------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_disk():
    """A 64 KiB tmpfs (skipped where mounting is not permitted)."""
    directory = tempfile.mkdtemp()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", directory], capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError) as error:
        os.rmdir(directory)
        pytest.skip(f"cannot mount a tmpfs here ({error})")
    if mounted.returncode != 0:
        os.rmdir(directory)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", directory], capture_output=True, timeout=30)
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def test_a_full_disk_leaves_nothing_behind(tiny_disk, capsys, monkeypatch):
    big = Engine(spec(vocabulary_size=4096, dim=8), seed=0)  # 128 KiB a table: more than the disk holds
    with pytest.raises(OSError) as caught:
        big.save(os.path.join(tiny_disk, "ckpts"))
    assert caught.value.errno == errno.ENOSPC and os.listdir(tiny_disk) == []
    with pytest.raises(OSError) as caught:
        write_bundle(os.path.join(tiny_disk, "tf", "model.ckpt-1"), big.state()["t"], update_state=True)
    assert caught.value.errno == errno.ENOSPC and os.listdir(tiny_disk) == []
    small = Engine(spec(), seed=0).save(os.path.join(tiny_disk, "small"))
    before = snapshot(tiny_disk)
    fd = os.open(os.path.join(tiny_disk, "filler"), os.O_WRONLY | os.O_CREAT)
    with contextlib.suppress(OSError):  # fill the disk
        while True:
            os.write(fd, b"\0" * 1024)
    os.close(fd)
    after_fill = snapshot(tiny_disk)
    assert cli.main(["checkpoint", "convert", small, os.path.join(tiny_disk, "tf", "run") + os.sep]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert snapshot(tiny_disk) == after_fill and set(after_fill) - set(before) == {"filler"}
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    argv = ["migrate", "--to", "jax", "tests.migrate.models:small_spec", "--out", os.path.join(tiny_disk, "out")]
    assert cli.main(argv) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert snapshot(tiny_disk) == after_fill
