"""One writer per CheckpointManager directory (issue 16, item 9), checked with real processes.

A manager that has saved is its directory's writer until it is garbage
collected: a manager (or `Checkpoint.save`) of another process saving
there raises DirectoryInUseError, naming the directory and the holder's
pid, and changes nothing; restoring and `tf.train.load_checkpoint` work
beside it; the lock dies with its process (SIGKILL included), so it never
blocks the next run. Within one process, saves share the lock.
"""

import os
import signal
import sys

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine.tf_bundle.debris import LOCK_FILE, DirectoryInUseError, sole_writer

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL") or sys.platform == "win32", reason="needs SIGKILL and flock (POSIX)"
)

TIMEOUT = 60

HOLDER = r"""
import sys
import numpy as np
import tpu_embedding_shim as tf

model = {"w": np.full(3, 5.0)}
manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), sys.argv[1], max_to_keep=2)
manager.save()
print("saved", flush=True)
sys.stdin.read()  # holds the directory until stdin closes
manager.save()
print("done", flush=True)
"""

SECOND = r"""
import sys
import numpy as np
import tpu_embedding_shim as tf

manager = tf.train.CheckpointManager(tf.train.Checkpoint(model={"w": np.zeros(3)}), sys.argv[1], max_to_keep=2)
try:
    manager.save()
except RuntimeError as error:
    print(type(error).__name__, error)
    sys.exit(3)
"""


def holder(python_child, directory):
    process = python_child.start(HOLDER, directory)
    assert process.stdout.readline() == "saved\n", process.stderr.read()
    return process


def listing(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory)) if name != LOCK_FILE}


def test_a_second_process_saving_is_refused_and_readers_work(tmp_path, python_child):
    first = holder(python_child, tmp_path)
    try:
        before = listing(tmp_path)
        model = {"w": np.zeros(3)}
        checkpoint = tf.train.Checkpoint(model=model)
        manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=2)
        with pytest.raises(DirectoryInUseError) as raised:
            manager.save()
        assert f"process {first.pid} is writing checkpoints in {str(tmp_path)!r}" in str(raised.value)
        assert listing(tmp_path) == before and checkpoint.save_counter == 0  # the refusal changed nothing
        with pytest.raises(DirectoryInUseError, match=str(first.pid)):
            tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
        # Readers take no lock.
        assert manager.latest_checkpoint == str(tmp_path / "ckpt-1")
        manager.restore_or_initialize()
        assert model["w"].tolist() == [5.0, 5.0, 5.0]
        assert tf.train.load_checkpoint(str(tmp_path)).get_tensor("model/w/.ATTRIBUTES/VARIABLE_VALUE").tolist() == [
            5.0,
            5.0,
            5.0,
        ]
        # Another process is refused the same way.
        code, out, _ = python_child.finish(python_child.start(SECOND, tmp_path))
        assert code == 3 and out.startswith("DirectoryInUseError") and f"process {first.pid}" in out
    finally:
        first.stdin.close()
    code, out, err = python_child.finish(first)
    assert code == 0 and out == "done\n", err
    assert LOCK_FILE not in os.listdir(tmp_path)  # removed when the holder ended
    path = manager.save()  # alone now
    assert path is not None and tf.train.latest_checkpoint(str(tmp_path)) == path


def test_a_killed_holder_leaves_no_lock_that_blocks_the_next_run(tmp_path, python_child):
    first = holder(python_child, tmp_path)
    assert (tmp_path / LOCK_FILE).read_text().strip() == str(first.pid)
    first.kill()
    python_child.finish(first)
    model = {"w": np.zeros(3)}
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path), max_to_keep=2)
    manager.restore_or_initialize()
    assert manager.save() == str(tmp_path / "ckpt-2")
    assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())  # this process holds it now
    del manager
    assert LOCK_FILE not in os.listdir(tmp_path)  # a collected manager releases the directory


def test_saves_within_one_process_share_the_lock(tmp_path):
    one = tf.train.CheckpointManager(tf.train.Checkpoint(model={"w": np.ones(2)}), str(tmp_path), max_to_keep=3)
    two = tf.train.CheckpointManager(
        tf.train.Checkpoint(model={"v": np.ones(2)}), str(tmp_path), max_to_keep=3, checkpoint_name="other"
    )
    one.save()
    two.save()
    with sole_writer(str(tmp_path), "test"):
        tf.train.Checkpoint(model={"u": np.ones(1)}).save(str(tmp_path / "third"))
    assert LOCK_FILE in os.listdir(tmp_path)
    del one, two
    assert LOCK_FILE not in os.listdir(tmp_path)


def test_a_read_only_directory_is_read_without_a_lock(tmp_path):
    tf.train.Checkpoint(model={"w": np.ones(2)}).save(str(tmp_path / "ckpt"))
    os.chmod(tmp_path, 0o555)
    try:
        model = {"w": np.zeros(2)}
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path), max_to_keep=1)
        manager.restore_or_initialize()
        assert model["w"].tolist() == [1.0, 1.0] and LOCK_FILE not in os.listdir(tmp_path)
    finally:
        os.chmod(tmp_path, 0o755)


FORKING_HOLDER = r"""
import os, signal, sys
import numpy as np
import tpu_embedding_shim as tf

manager = tf.train.CheckpointManager(tf.train.Checkpoint(model={"w": np.ones(2)}), sys.argv[1], max_to_keep=1)
manager.save()
if os.fork() == 0:  # a worker that outlives the writer
    sys.stdin.read()
    os._exit(0)
print("forked", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_forked_child_outliving_a_killed_writer_does_not_keep_the_lock(tmp_path, python_child):
    writer = python_child.start(FORKING_HOLDER, tmp_path)
    try:
        assert writer.stdout.readline() == "forked\n", writer.stderr.read()
        assert writer.wait(timeout=TIMEOUT) == -signal.SIGKILL
        assert LOCK_FILE in os.listdir(tmp_path)  # the killed writer's file, its lock held by no one
        code, out, _ = python_child.finish(python_child.start(SECOND, tmp_path))  # the forked worker is still alive
        assert code == 0, out
    finally:
        writer.stdin.close()  # the worker ends
