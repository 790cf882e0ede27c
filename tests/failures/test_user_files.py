"""`migrate` never deletes or overwrites what it did not write; `--force` replaces only its own earlier output."""

from __future__ import annotations

import os

import pytest

from tests.migrate.models import small_spec
from tpu_embedding_shim import cli
from tpu_embedding_shim.migrate import to_jax_tpu_embedding, to_tf_midlevel
from tpu_embedding_shim.migrate.migration import MARKER_FILE

from .conftest import snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def migrate_cli(out, *extra: str, to: str = "jax") -> int:
    return cli.main(["migrate", "--to", to, "tests.migrate.models:small_spec", "--out", str(out), *extra])


@pytest.fixture(autouse=True)
def from_the_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name", ["report.md", "model.py", "weights.npz"])
@pytest.mark.parametrize("force", [False, True])
def test_a_directory_named_like_an_output_file_is_never_deleted(tmp_path, capsys, name, force):
    (tmp_path / name).mkdir()
    (tmp_path / name / "mine.txt").write_text("the user's")
    before = snapshot(str(tmp_path))
    assert migrate_cli(tmp_path, *["--force"] * force) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err
    assert ("did not write" in err) if force else ("never overwrites" in err and "--force" in err)
    assert snapshot(str(tmp_path)) == before


def test_out_dot_never_overwrites_the_users_model_and_report(tmp_path, capsys, monkeypatch):
    (tmp_path / "model.py").write_text("# my model\n")
    (tmp_path / "report.md").write_text("# my report\n")
    before = snapshot(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", ROOT)
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--force"]):
        assert migrate_cli(".", *extra) == 1
        err = capsys.readouterr().err
        assert "model.py" in err and "report.md" in err
        assert snapshot(str(tmp_path)) == before


def test_force_replaces_an_earlier_migrations_output_only(tmp_path, capsys):
    assert migrate_cli(tmp_path) == 0
    assert sorted(os.listdir(tmp_path)) == [MARKER_FILE, "model.py", "report.md", "weights.npz"]
    (tmp_path / "notes.txt").write_text("mine")
    assert migrate_cli(tmp_path) == 1  # a rerun without --force refuses
    assert "already holds model.py, weights.npz, report.md" in capsys.readouterr().err
    assert migrate_cli(tmp_path, "--force") == 0
    assert (tmp_path / "notes.txt").read_text() == "mine"
    # another target: the earlier migration's weights.npz goes, its own output replaces it
    assert migrate_cli(tmp_path, "--force", to="tf-midlevel") == 0
    assert sorted(os.listdir(tmp_path)) == [MARKER_FILE, "model.py", "notes.txt", "report.md", "tf_checkpoint"]


def test_force_refuses_an_output_file_the_user_changed_since(tmp_path, capsys):
    assert migrate_cli(tmp_path) == 0
    with open(tmp_path / "model.py", "a") as file:
        file.write("# my change\n")
    before = snapshot(str(tmp_path))
    assert migrate_cli(tmp_path, "--force") == 1
    err = capsys.readouterr().err
    assert "holds model.py, which an earlier migration did not write (or which changed since" in err
    assert snapshot(str(tmp_path)) == before


def test_the_python_api_refuses_the_same(tmp_path):
    (tmp_path / "weights.npz").mkdir()
    (tmp_path / "weights.npz" / "mine").write_text("x")
    migration = to_jax_tpu_embedding(small_spec())
    with pytest.raises(FileExistsError, match=r"already holds weights\.npz: a migration never overwrites files"):
        migration.write(tmp_path)
    with pytest.raises(FileExistsError, match=r"holds weights\.npz, which an earlier migration did not write"):
        migration.write(tmp_path, force=True)
    assert sorted(os.listdir(tmp_path)) == ["weights.npz"] and os.listdir(tmp_path / "weights.npz") == ["mine"]
    other = to_tf_midlevel(small_spec())
    paths = other.write(tmp_path / "fresh")
    assert [os.path.basename(p) for p in paths] == ["model.py", "tf_checkpoint", "report.md"]
    assert other.write(tmp_path / "fresh", force=True) == paths
    with pytest.raises(TypeError, match="Argument `force` must be True or False"):
        other.write(tmp_path / "fresh", force="yes")
    with pytest.raises(ValueError, match="Argument `directory` must be a non-empty path. Received: ''"):
        other.write("")


def test_a_directory_named_like_the_marker_is_never_deleted(tmp_path, capsys):
    (tmp_path / MARKER_FILE).mkdir()
    (tmp_path / MARKER_FILE / "mine.txt").write_text("the user's")
    before = snapshot(str(tmp_path))
    for extra in ([], ["--force"]):
        assert migrate_cli(tmp_path, *extra) == 1
        assert MARKER_FILE in capsys.readouterr().err
        assert snapshot(str(tmp_path)) == before
