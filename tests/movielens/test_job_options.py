"""The MovieLens job's options are checked before anything is read or written, and a corrupt cached
download names the file (it raised BadZipFile on every later run)."""

import logging
import os
import subprocess

import pytest

from tpu_embedding_shim import cli
from tpu_embedding_shim.movielens import data as ml_data
from tpu_embedding_shim.movielens.job import JobConfig

from .test_movielens import make_wheel


@pytest.mark.parametrize(
    "option, value",
    [
        ("epochs", 0),
        ("epochs", -1),
        ("max_examples", 0),
        ("max_examples", -5),
        ("batch_size", 0),
        ("num_shards", 0),
        ("epochs", 2.5),
        ("epochs", True),
        ("embedding_learning_rate", 0.0),
        ("dense_learning_rate", float("nan")),
        ("partition_strategy", "DIV"),
    ],
)
def test_a_bad_option_is_a_value_error_naming_it(option, value):
    with pytest.raises(ValueError, match=f"Option `{option}` must be .* Received: "):
        JobConfig(**{option: value})


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epochs", "0"], "`--epochs` must be an int >= 1. Received: 0."),
        (["--max-examples", "-5"], "`--max-examples` must be an int >= 1 or None"),
    ],
)
def test_the_command_line_refuses_a_bad_option_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["movielens", *argv, "--output-dir", str(out)])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err  # argparse's usage error, no traceback
    assert not out.exists()


def test_the_command_line_help_shows_every_option_with_its_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["movielens", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines at the terminal's width
    for option, default in [
        ("--epochs", "5"),
        ("--batch-size", "256"),
        ("--num-shards", "2"),
        ("--partition-strategy", "div"),
        ("--output-dir", "movielens_output"),
    ]:
        assert option in text and f"(default: {default})" in text


def test_many_shards_are_allowed_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="tpu_embedding_shim.movielens"):
        JobConfig(num_shards=5000)
    assert "num_shards=5000" in caplog.text and "slower" in caplog.text


def test_a_corrupt_cached_wheel_names_the_file_to_delete(tmp_path):
    wheel = tmp_path / "recbole-1.2.1-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(
        ml_data.DataError,
        match=r"The cached download .*recbole-1\.2\.1-py3-none-any\.whl' is not a readable recbole==1\.2\.1 "
        r"wheel .* Delete it and run again",
    ):
        ml_data.read_tables(str(wheel), cached=True)


def test_a_user_file_that_is_no_wheel_is_not_to_be_deleted(tmp_path):
    notes = tmp_path / "README.md"
    notes.write_text("# notes\n")
    with pytest.raises(ml_data.DataError) as error:
        ml_data.load(str(notes))
    assert str(error.value).startswith(f"--wheel {str(notes)!r} is not a readable recbole==1.2.1 wheel")
    assert "Delete" not in str(error.value) and "recbole-1.2.1-py3-none-any.whl" in str(error.value)


def test_a_corrupt_cached_download_is_fetched_again(tmp_path, monkeypatch, caplog):
    cached = tmp_path / "recbole-1.2.1-py3-none-any.whl"
    cached.write_bytes(b"not a zip")
    fetched = []

    def fake_fetch(directory=None, quiet=True):  # the cache: corrupt first, a good download after it is removed
        if not cached.exists():
            make_wheel(cached)
            fetched.append(str(cached))
        return str(cached)

    monkeypatch.setattr(ml_data, "fetch", fake_fetch)
    with caplog.at_level(logging.WARNING, logger="tpu_embedding_shim.movielens"):
        data = ml_data.load()
    assert fetched == [str(cached)] and len(data.train) > 0 and os.path.exists(cached)
    assert "Downloading it again" in caplog.text


def test_a_wheel_fetched_on_another_host_is_kept_in_this_hosts_cache(tmp_path, monkeypatch):
    """What replica 0 sends to a host whose cache lacks the data: written whole, then found as a download."""
    monkeypatch.setenv("TPU_EMBEDDING_SHIM_CACHE", str(tmp_path / "cache"))
    assert ml_data.cached() is None
    wheel = make_wheel(tmp_path / "recbole-1.2.1-py3-none-any.whl")
    kept = ml_data.keep(
        (tmp_path / "recbole-1.2.1-py3-none-any.whl").read_bytes(), "/elsewhere/" + os.path.basename(wheel)
    )
    assert kept == str(tmp_path / "cache" / "recbole-1.2.1-py3-none-any.whl") == ml_data.cached() == ml_data.fetch()
    assert os.listdir(tmp_path / "cache") == ["recbole-1.2.1-py3-none-any.whl"]  # no temporary left
    assert len(ml_data.load().train) > 0


@pytest.mark.parametrize("pip_fails", [False, True])
def test_a_download_in_progress_is_never_seen_in_the_cache(tmp_path, monkeypatch, pip_fails):
    """pip writes the wheel as it downloads: while it does, the cache has no wheel another process could read
    half of; after, the whole wheel (or, where pip failed, nothing and no leftovers)."""
    cache = tmp_path / "cache"
    seen_during = []

    def fake_pip(command, **kwargs):
        target = command[command.index("-d") + 1]
        with open(os.path.join(target, "recbole-1.2.1-py3-none-any.whl"), "wb") as part:
            part.write(b"PK\x03\x04 the first bytes of a zip")
            seen_during.append(ml_data.cached(str(cache)))
        if pip_fails:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: connection reset")
        make_wheel(os.path.join(target, "recbole-1.2.1-py3-none-any.whl"))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(ml_data.subprocess, "run", fake_pip)
    if pip_fails:
        with pytest.raises(ml_data.DataError, match="exit code 1: ERROR: connection reset"):
            ml_data.fetch(str(cache))
        assert os.listdir(cache) == []
    else:
        path = ml_data.fetch(str(cache))
        assert path == str(cache / "recbole-1.2.1-py3-none-any.whl") and os.listdir(cache) == [os.path.basename(path)]
        assert len(ml_data.load(path).train) > 0
    assert seen_during == [None]
