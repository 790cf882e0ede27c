"""TPUEstimator saves killed at every step (SIGKILL, in a subprocess), and two processes in one model_dir.

Kills (issue 16, items 4-5 for the runner): a child resumes a model_dir
holding `model.ckpt-2` (keep_checkpoint_max=1), trains one step and saves;
it dies by SIGKILL right before the k-th file operation of that save
(rename, remove, fsync: writing the bundle, the state file, pruning
`model.ckpt-2`, releasing the lock), for every k, or at random moments
while it trains and saves every step. After each death the state file
names a complete checkpoint, and a new run resumes from it and reaches
exactly the values of a run that was never interrupted, leaving no
temporary file or incomplete checkpoint behind.

Two writers (item 9): while a child trains in a model_dir, a second
`train()` there raises DirectoryInUseError naming the directory and the
child's pid; evaluate, predict, export and tf.train.load_checkpoint work
beside it; a killed trainer leaves no lock that blocks the next run.

The children use the numpy kernels and each is bounded by a timeout.
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

from . import tf_program as program

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL") or sys.platform == "win32", reason="needs SIGKILL and flock (POSIX)"
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import os, shutil, signal, sys
sys.path.insert(0, os.path.join(sys.argv[4], "tests", "runner"))
import tf_program as program

model_dir, mode, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
est = program.shim_estimator(model_dir, keep=1, save_checkpoints_steps=1 if mode in ("loop", "hold") else None)
if mode == "loop":  # a checkpoint every step, forever
    def forever(params):
        while True:
            yield program.shim_input_fn(params)
    print("ready", flush=True)
    est.train(forever)
elif mode == "hold":  # trains one step, then waits (holding the model_dir) until stdin closes
    def held(params):
        yield program.shim_input_fn(params)
        print("training", flush=True)
        sys.stdin.read()
        yield program.shim_input_fn(params)
    est.train(held, steps=2)
    print("done", est.global_step, flush=True)
else:
    calls = [0]
    def hooked(function):
        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
            return function(*args, **kwargs)
        return wrapper
    est.engine  # builds or restores the model's state: restoring is not part of the save
    for name in ("replace", "rename", "remove", "fsync"):
        setattr(os, name, hooked(getattr(os, name)))
    shutil.rmtree = hooked(shutil.rmtree)
    est.train(program.shim_input_fn, steps=1)
    print(calls[0])
"""


def values(est):
    return {name: est.get_variable_value(name) for name in est.get_variable_names()}


def assert_same(resumed, reference):
    assert resumed.keys() == reference.keys()
    for name in reference:
        np.testing.assert_array_equal(resumed[name], reference[name], err_msg=name)


def resume_to(model_dir, step):
    """The state file names a complete checkpoint; a new run resumes from it up to `step`. Returns (from, est)."""
    state = read_state(str(model_dir))
    assert state is not None and is_bundle(state.model_checkpoint_path), sorted(os.listdir(model_dir))
    est = program.shim_estimator(model_dir, keep=1, seed=77)  # another seed: everything comes from disk
    start = int(state.model_checkpoint_path.rsplit("-", 1)[1])
    est.train(program.shim_input_fn, max_steps=step)
    assert est.global_step == step
    return start, est


def assert_clean(model_dir):
    """Only the state file and complete checkpoints are left (no temporaries, no incomplete checkpoint, no lock)."""
    for name in os.listdir(model_dir):
        if name == "checkpoint":
            continue
        match = re.fullmatch(r"(model\.ckpt-\d+)\.(index|data-00000-of-00001)", name)
        assert match and is_bundle(os.path.join(model_dir, match.group(1))), sorted(os.listdir(model_dir))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A model_dir at step 2 (keep_checkpoint_max=1), and the values of an uninterrupted run to step 4."""
    base = tmp_path_factory.mktemp("base")
    program.shim_estimator(base, keep=1).train(program.shim_input_fn, steps=2)
    once = program.shim_estimator(tmp_path_factory.mktemp("once"), keep=1)
    once.train(program.shim_input_fn, steps=4)
    return base, values(once)


def test_a_kill_before_any_step_of_a_runner_save_loses_nothing(tmp_path, reference, killed_copies, python_child):
    base, expected = reference
    dry = tmp_path / "dry"
    shutil.copytree(base, dry)

    def kill_at(directory, k):  # a child that dies before the k-th file operation of its save (never for k = 0)
        return python_child.start(CHILD, directory, "kill", k, ROOT)

    code, out, err = python_child.finish(kill_at(dry, 0))
    assert code == 0, err
    steps = int(out.split()[-1])
    assert 8 <= steps <= 40, steps  # renames, fsyncs and removes of one save, its pruning, the lock
    assert resume_to(dry, 4)[0] == 3
    starts = {}
    for k, directory in killed_copies(base, steps, kill_at, at_once=3):
        starts[k], est = resume_to(directory, 4)
        assert_same(values(est), expected)  # bit for bit, from whichever checkpoint survived
        assert_clean(directory)  # the resumed run's save removed what the killed one left
    # Early kills resume from model.ckpt-2, late ones (after the state file named model.ckpt-3) from 3: the
    # pruning of model.ckpt-2 (keep_checkpoint_max=1) lies between.
    assert set(starts.values()) == {2, 3}
    assert starts[1] == 2 and starts[steps] == 3


def test_random_kills_while_the_runner_saves_every_step(tmp_path, python_child):
    directory = tmp_path / "loop"
    rng = random.Random(4321)
    deadline = time.monotonic() + 30
    kills = 0
    while kills < 5 and time.monotonic() < deadline:
        process = python_child.start(CHILD, directory, "loop", 0, ROOT)
        assert process.stdout.readline() == "ready\n", process.stderr.read()
        while read_state(str(directory)) is None and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # until its first save
        time.sleep(rng.uniform(0.0, 0.3))
        process.kill()
        python_child.finish(process)
        kills += 1
        state = read_state(str(directory))
        assert state is not None and is_bundle(state.model_checkpoint_path), sorted(os.listdir(directory))
    assert kills == 5
    step = int(read_state(str(directory)).model_checkpoint_path.rsplit("-", 1)[1])
    once = program.shim_estimator(tmp_path / "once", keep=1)
    once.train(program.shim_input_fn, steps=step + 2)
    _, est = resume_to(directory, step + 2)
    assert_same(values(est), values(once))
    assert_clean(directory)


def test_a_second_trainer_is_refused_while_readers_work(tmp_path, reference, python_child):
    base, _ = reference
    directory = tmp_path / "shared"
    shutil.copytree(base, directory)
    trainer = python_child.start(CHILD, directory, "hold", 0, ROOT)
    try:
        assert trainer.stdout.readline() == "training\n", trainer.stderr.read()
        second = program.shim_estimator(directory, keep=1)
        with pytest.raises(DirectoryInUseError) as raised:
            second.train(program.shim_input_fn, steps=1)
        message = str(raised.value)
        assert f"process {trainer.pid}" in message and repr(str(directory)) in message
        assert isinstance(raised.value, RuntimeError)
        # Readers need no lock: they read the trainer's latest checkpoint (step 3, saved before it waited).
        reader = program.shim_estimator(directory, keep=1)
        assert reader.latest_checkpoint() == str(directory / "model.ckpt-3")
        metrics = reader.evaluate(program.shim_input_fn, steps=1)
        assert metrics["global_step"] == 3
        predictions = list(reader.predict(program.shim_input_fn, yield_single_examples=False))
        assert predictions and np.all(np.isfinite(predictions[0]["logits"]))
        exported = reader.export_embeddings(str(tmp_path / "export"))
        assert os.path.isdir(exported)
        assert tf.train.load_checkpoint(str(directory)).get_variable_to_shape_map()
        # A tf.train.Checkpoint save into the trainer's directory is refused too.
        with pytest.raises(DirectoryInUseError, match=f"process {trainer.pid}"):
            tf.train.Checkpoint(model={"w": np.ones(2)}).save(str(directory / "other"))
    finally:
        trainer.stdin.close()
    code, out, err = python_child.finish(trainer)
    assert code == 0 and out.split()[-2:] == ["done", "4"], err
    assert LOCK_FILE not in os.listdir(directory)  # a clean exit removes it
    second.train(program.shim_input_fn, steps=1)  # now alone: it resumes from the trainer's last checkpoint
    assert second.global_step == 5


def test_a_killed_trainer_leaves_no_lock_that_blocks_the_next_run(tmp_path, reference, python_child):
    base, _ = reference
    directory = tmp_path / "killed"
    shutil.copytree(base, directory)
    trainer = python_child.start(CHILD, directory, "hold", 0, ROOT)
    assert trainer.stdout.readline() == "training\n", trainer.stderr.read()
    assert (directory / LOCK_FILE).read_text().strip() == str(trainer.pid)
    trainer.kill()
    python_child.finish(trainer)
    assert LOCK_FILE in os.listdir(directory)  # the file stays, its lock died with the process
    est = program.shim_estimator(directory, keep=1)
    est.train(program.shim_input_fn, steps=1)
    assert est.global_step == 4
    assert_clean(directory)


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_a_lost_state_file_resumes_from_the_newest_checkpoint_on_disk(tmp_path, reference, state, caplog):
    """A state file removed or emptied by hand (our writes never leave one so) must not start training afresh
    over the checkpoints: the newest complete model.ckpt-N on disk is the latest."""
    base, expected = reference
    model_dir = tmp_path / "model"
    shutil.copytree(base, model_dir)
    if state == "missing":
        os.remove(model_dir / "checkpoint")
    else:
        (model_dir / "checkpoint").write_text("")
    est = program.shim_estimator(model_dir, keep=1, seed=77)
    assert est.latest_checkpoint().endswith("model.ckpt-2")
    est.train(program.shim_input_fn, max_steps=4)
    assert_same(values(est), expected)
    assert "newest complete one on disk" in caplog.text
