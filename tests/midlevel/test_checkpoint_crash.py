"""tf.train.CheckpointManager saves killed at every step (SIGKILL, in a subprocess): nothing good is lost.

A child process restores a `CheckpointManager(max_to_keep=1)` directory,
sets every value to its save's number, and saves; it dies by SIGKILL right
before the k-th file operation of that save (rename, remove, fsync,
directory removal), for every k, or at random moments while it saves in a
loop. After each death:

- the state file names a complete checkpoint (the new one is recorded
  before the old one is deleted: issue 16, item 4), and a new manager
  restores it, holding exactly the values of its number;
- the next save leaves no temporary file, no incomplete checkpoint and no
  earlier-format temporary directory behind (item 5);
- a save beside a live (stopped) writer is refused (one writer per
  directory) and leaves that writer's temporaries alone, and the writer
  then finishes its save.

The children use the numpy kernels (no numba start-up) and run two at a
time; each is bounded by a timeout.
"""

import os
import random
import re
import shutil
import signal
import sys
import time

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine.tf_bundle import is_bundle, read_state
from tpu_embedding_shim.engine.tf_bundle.debris import LOCK_FILE, DirectoryInUseError

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL") or sys.platform == "win32", reason="needs SIGKILL and flock (POSIX)"
)

E = tf.tpu.experimental.embedding

CHILD = r"""
import os, shutil, signal, sys
import numpy as np
import tpu_embedding_shim as tf

directory, mode, k, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
E = tf.tpu.experimental.embedding

def make(rows):
    table = E.TableConfig(vocabulary_size=rows, dim=4, name="items")
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=table)}, optimizer=E.Adagrad(0.1))
    model = {"w": np.zeros(3)}
    return embedding, model, tf.train.Checkpoint(embedding=embedding, model=model)

def fill(embedding, model, value):
    shape = (embedding._table_config[0].vocabulary_size, 4)
    embedding.engine.load_state({"items": {"embedding": np.full(shape, value, np.float32),
                                           "accumulators": np.full(shape, -value, np.float32)}}, step=int(value))
    model["w"][:] = value

embedding, model, checkpoint = make(rows)
manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1)
manager.restore_or_initialize()

calls = [0]
def hooked(function):
    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            os.kill(os.getpid(), signal.SIGSTOP if mode == "stop" else signal.SIGKILL)
        return function(*args, **kwargs)
    return wrapper

if mode == "loop":
    while True:
        fill(embedding, model, checkpoint.save_counter + 1)
        manager.save()
        print(manager.latest_checkpoint, flush=True)
fill(embedding, model, checkpoint.save_counter + 1)
for name in ("replace", "rename", "remove", "fsync"):
    setattr(os, name, hooked(getattr(os, name)))
shutil.rmtree = hooked(shutil.rmtree)
manager.save()
print(calls[0])
"""


def fresh(rows=8):
    table = E.TableConfig(vocabulary_size=rows, dim=4, name="items")
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=table)}, optimizer=E.Adagrad(0.1))
    model = {"w": np.zeros(3)}
    return embedding, model, tf.train.Checkpoint(embedding=embedding, model=model)


def check(directory, rows=8):
    """The state file names a complete checkpoint; it restores, holding the values of its number."""
    state = read_state(str(directory))
    assert state is not None and is_bundle(state.model_checkpoint_path), sorted(os.listdir(directory))
    embedding, model, checkpoint = fresh(rows)
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=1)
    assert manager.latest_checkpoint == state.model_checkpoint_path
    manager.restore_or_initialize()
    number = int(state.model_checkpoint_path.rsplit("-", 1)[1])
    variables = embedding.variables[embedding._table_config[0]]
    assert np.all(variables["parameters"] == number) and np.all(variables["accumulators"] == -number)
    assert np.all(model["w"] == number) and embedding.engine.global_step == number
    assert checkpoint.save_counter == number
    return number, manager, embedding, model


def assert_clean(directory):
    """Only complete checkpoints and the state file are left (and the lock file of the live manager that saved)."""
    for name in os.listdir(directory):
        if name in ("checkpoint", LOCK_FILE):
            continue
        match = re.fullmatch(r"(ckpt-\d+)\.(index|data-00000-of-00001)", name)
        assert match and is_bundle(os.path.join(directory, match.group(1))), sorted(os.listdir(directory))


def save_first(directory, rows=8):
    embedding, model, checkpoint = fresh(rows)
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=1)
    shape = (rows, 4)
    embedding.engine.load_state(
        {"items": {"embedding": np.ones(shape, np.float32), "accumulators": -np.ones(shape, np.float32)}}, step=1
    )
    model["w"][:] = 1
    manager.save()


def test_a_kill_before_any_step_of_a_save_loses_nothing(tmp_path, killed_copies, python_child):
    base = tmp_path / "base"
    save_first(base)
    dry = tmp_path / "dry"
    shutil.copytree(base, dry)

    def kill_at(directory, k):  # a child that dies before the k-th file operation of its save (never for k = 0)
        return python_child.start(CHILD, directory, "kill", k, 8)

    code, out, err = python_child.finish(kill_at(dry, 0))
    assert code == 0, err
    steps = int(out.split()[-1])
    assert 10 <= steps <= 40, steps  # renames, removes and fsyncs of one save
    assert check(dry)[0] == 2
    outcomes = {}
    for k, directory in killed_copies(base, steps, kill_at, at_once=2):
        outcomes[k], manager, _embedding, model = check(directory)
        # The next save removes what the killed one left, and is itself complete.
        model["w"][:] = 7
        path = manager.save()
        assert_clean(directory)
        assert is_bundle(path) and read_state(str(directory)).model_checkpoint_path == path
    # Early kills keep ckpt-1, late ones (after the state file named ckpt-2) keep ckpt-2.
    assert set(outcomes.values()) == {1, 2}
    assert outcomes[1] == 1 and outcomes[steps] == 2


def test_random_kills_while_saving_in_a_loop(tmp_path, python_child):
    directory = tmp_path / "loop"
    rows = 40_000  # 0.6 MB per table: a save takes a few milliseconds
    rng = random.Random(1234)
    deadline = time.monotonic() + 40
    kills = 0
    while kills < 8 and time.monotonic() < deadline:
        process = python_child.start(CHILD, directory, "loop", 0, rows)
        first = process.stdout.readline()  # it has saved once: it runs its loop now
        assert first, process.stderr.read()
        time.sleep(rng.uniform(0.0, 0.08))
        process.kill()
        python_child.finish(process)
        kills += 1
        check(directory, rows)
    assert kills == 8
    _, manager, _, _ = check(directory, rows)
    manager.save()
    assert_clean(directory)


def test_debris_is_removed_by_the_next_save_but_a_live_writers_files_are_not(tmp_path, python_child):
    directory = tmp_path / "live"
    save_first(directory)
    # A writer stopped in the middle of its save (before its third file operation: its two files are written
    # and fsynced, not yet renamed): its temporaries exist and it holds the directory's lock.
    writer = python_child.start(CHILD, directory, "stop", 3, 8)
    _, status = os.waitpid(writer.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), writer.stderr.read()
    temporaries = sorted(n for n in os.listdir(directory) if "tempstate" in n)
    assert len(temporaries) == 2, sorted(os.listdir(directory))
    (directory / "ckpt-6.data-00000-of-00001").write_bytes(b"no index")  # an incomplete checkpoint
    (directory / ".checkpoint.tmp-00ff").write_text("half a state file")
    debris = {"ckpt-6.data-00000-of-00001", ".checkpoint.tmp-00ff"}
    try:
        _embedding, _model, checkpoint = fresh()
        manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=1, checkpoint_name="other")
        with pytest.raises(DirectoryInUseError, match=rf"process {writer.pid} is writing checkpoints in"):
            manager.save()  # one writer per directory (issue 16, item 9)
        names = set(os.listdir(directory))
        assert set(temporaries) <= names and debris <= names  # nothing is removed beside a live writer
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    code, _, err = python_child.finish(writer)
    assert code == 0, err
    assert check(directory)[0] == 2

    # Alone in the directory, the next save removes every leftover of killed saves.
    manager = tf.train.CheckpointManager(fresh()[2], str(directory), max_to_keep=1)
    manager.save()
    names = set(os.listdir(directory))
    assert not names & debris and not any("tempstate" in n for n in names)
