"""A save killed at any moment leaves the previous good checkpoint loadable.

Two tests, each forking child processes that save checkpoints (a fork is a
real separate process that can be SIGKILLed, without paying an
interpreter start-up per kill):

* random SIGKILLs: a child saves in a loop (about 15 MB per checkpoint, so a
  save takes tens of milliseconds, and every other save replaces the
  checkpoint of the same step); the parent kills it at seeded random moments;
* crash points: a child dies (`os._exit`, no cleanup) right before the k-th
  rename, fsync, directory removal or array write of a save, for every k.

After every death the directory must hold a loadable latest checkpoint
whose checksums verify and whose contents are the ones saved at its step.
"""

import contextlib
import os
import random
import shutil
import signal
import time
import traceback
import warnings

import numpy as np
import pytest

from tpu_embedding_shim.engine import checkpoint
from tpu_embedding_shim.engine.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint

pytestmark = pytest.mark.skipif(
    not (hasattr(os, "fork") and hasattr(signal, "SIGKILL")), reason="needs fork and SIGKILL (POSIX)"
)

TABLES = ("users", "items")
CRASH_CODE = 17


def structure(vocab, dim):
    return {t: {"vocabulary_size": vocab, "dim": dim, "slots": ["accumulators"]} for t in TABLES}


def save(directory, step, value, vocab, dim, keep=2):
    """A checkpoint whose every entry encodes the save: embedding = value, accumulators = -value."""
    state = {
        t: {
            "embedding": np.full((vocab, dim), value, np.float32),
            "accumulators": np.full((vocab, dim), -value, np.float32),
        }
        for t in TABLES
    }
    return checkpoint.save_checkpoint(
        directory,
        state,
        step=step,
        spec_structure=structure(vocab, dim),
        fingerprint="crash-test",
        extra={"value": value},
        keep=keep,
    )


def fork(body):
    """Runs `body()` in a forked child; returns its pid. The child never returns into pytest."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, Python >= 3.12
        pid = os.fork()
    if pid == 0:
        code = 0
        try:
            body()
        except BaseException:
            with contextlib.suppress(Exception):
                os.write(2, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    return pid


def check_directory(directory, vocab, dim, *, must_exist):
    """Every listed checkpoint loads, verifies, and holds what was saved at its step."""
    paths = list_checkpoints(directory)
    latest = latest_checkpoint(directory)
    if must_exist:
        assert latest is not None, sorted(os.listdir(directory))
    for path in paths:
        state, step, manifest = load_checkpoint(path, spec_structure=structure(vocab, dim))
        value = manifest["extra"]["value"]
        assert int(value) // 10 == step, (path, value)
        for table in TABLES:
            emb, acc = state[table]["embedding"], state[table]["accumulators"]
            assert np.all(emb == value) and np.all(acc == -value), (path, table)
    return latest


def test_random_sigkill_never_loses_the_last_good_checkpoint(tmp_path):
    directory = str(tmp_path / "sigkill")
    rng = random.Random(20240607)
    saved_any = False
    saves = 0
    kill = 0
    while kill < 30 or (saves < 10 and kill < 300):  # 30 kills, and more on a loaded machine until 10 saves
        kill += 1
        read_end, write_end = os.pipe()

        def loop(start=kill * 1000, read_end=read_end, write_end=write_end):
            os.close(read_end)
            i = 0
            while True:
                step = start + i // 2  # each step saved twice: the second save replaces the first
                save(directory, step, float(step * 10 + i % 2), 60_000, 16)
                os.write(write_end, b"s")
                i += 1

        pid = fork(loop)
        os.close(write_end)
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read_end, "rb") as pipe:
            done = pipe.read().count(b"s")
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        saves += done
        saved_any = saved_any or done > 0
        check_directory(directory, 60_000, 16, must_exist=saved_any)
        # Debris from a crashed save is bounded (at most a temporary, a set-aside and a deletion).
        assert len(os.listdir(directory)) <= 2 + 3, sorted(os.listdir(directory))
    assert saves >= 10, saves
    # A clean save afterwards removes all debris.
    save(directory, 10**6, 1e7, 60_000, 16)
    names = sorted(os.listdir(directory))
    assert names[-1] == "ckpt-0001000000" and len(names) == 2 and all(n.startswith("ckpt-") for n in names)
    check_directory(directory, 60_000, 16, must_exist=True)


def _prepare(directory):
    """Steps 1 and 2 saved cleanly, the starting point of every crash-point run."""
    for step in (1, 2):
        save(directory, step, float(step * 10), 50, 4)


def _saves_with_crash_at(directory, crash_at, counter):
    """Replaces step 2, then saves step 3 (pruning step 1), dying before hooked call `crash_at`."""

    def hook(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            counter[0] += 1
            if counter[0] == crash_at:
                os._exit(CRASH_CODE)  # no cleanup, no finally blocks
            return real(*args, **kwargs)

        setattr(module, name, wrapper)

    for module, name in [(os, "rename"), (os, "fsync"), (shutil, "rmtree"), (np.lib.format, "write_array")]:
        hook(module, name)
    save(directory, 2, 21.0, 50, 4)
    save(directory, 3, 30.0, 50, 4)


def test_crash_at_every_point_of_a_save(tmp_path):
    template = str(tmp_path / "template")
    _prepare(template)
    total = 0
    read_end, write_end = os.pipe()

    def dry_run():
        counter = [0]
        _saves_with_crash_at(shutil.copytree(template, str(tmp_path / "dry")), 0, counter)
        os.write(write_end, str(counter[0]).encode())

    pid = fork(dry_run)
    os.close(write_end)
    assert os.waitpid(pid, 0)[1] == 0
    with os.fdopen(read_end, "rb") as pipe:
        total = int(pipe.read())
    assert total >= 20, total
    for crash_at in range(1, total + 1):
        directory = shutil.copytree(template, str(tmp_path / f"crash{crash_at}"))
        pid = fork(lambda directory=directory, crash_at=crash_at: _saves_with_crash_at(directory, crash_at, [0]))
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == CRASH_CODE, (crash_at, status)
        latest = check_directory(directory, 50, 4, must_exist=True)
        assert load_checkpoint(latest)[1] in (2, 3), (crash_at, latest)
        # The next save cleans up after the crash and leaves only real checkpoints.
        save(directory, 4, 40.0, 50, 4)
        names = sorted(os.listdir(directory))
        assert all(n.startswith("ckpt-") for n in names) and len(names) == 2, (crash_at, names)
        check_directory(directory, 50, 4, must_exist=True)
