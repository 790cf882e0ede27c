"""Fixtures that tests in more than one folder use."""

import os
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tpu_embedding_shim.engine.checkpoint import save_checkpoint
from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, TableSpec

ROOT = Path(__file__).resolve().parents[1]


# Checkpoints and the processes that write them ---------------------------------------------------------------


@pytest.fixture
def python_child():
    """Child processes running a Python script with this checkout and the numpy kernels (each bounded).

    `python_child.start(script, *args)` starts `python -c script *args` (PYTHONPATH: the checkout;
    TPU_EMBEDDING_SHIM_KERNELS=numpy); its stdin, stdout and stderr are text pipes.
    `python_child.finish(process)` waits for it (60 s at most) and gives (returncode, stdout, stderr); a
    stdin the test closed on purpose (the child's signal to go on) is left closed.
    """

    def start(script, *args):
        env = dict(os.environ, TPU_EMBEDDING_SHIM_KERNELS="numpy", PYTHONPATH=str(ROOT))
        return subprocess.Popen(
            [sys.executable, "-c", script, *map(str, args)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(process):
        if process.stdin is not None and process.stdin.closed:
            process.stdin = None
        out, err = process.communicate(timeout=60)
        return process.returncode, out, err

    return types.SimpleNamespace(start=start, finish=finish)


@pytest.fixture
def killed_copies(tmp_path):
    """Kills a save before each of its file operations in turn: `killed_copies(base, steps, start, at_once)`.

    For k = 1 .. steps, copies the directory `base` to `tmp_path / f"kill-{k}"` and calls `start(directory, k)`,
    which starts a child process that saves there and kills itself (SIGKILL) right before its k-th file
    operation; `at_once` children run side by side. Yields `(k, directory)` once that child has died by
    SIGKILL, for the caller to check what the kill left.
    """

    def run(base, steps, start, at_once):
        for first in range(1, steps + 1, at_once):
            batch = []
            for k in range(first, min(first + at_once, steps + 1)):
                directory = tmp_path / f"kill-{k}"
                shutil.copytree(base, directory)
                batch.append((k, directory, start(directory, k)))
            for k, directory, process in batch:
                _, err = process.communicate(timeout=60)
                assert process.returncode == -signal.SIGKILL, (k, err)
                yield k, directory

    return run


@pytest.fixture
def two_table_engine():
    """Builds the engine the checkpoint readers' tests save: `two_table_engine(optimizer, users, items, item_table)`.

    Tables `users` [users, 3] and `item_table` [items, 2] (a name with a '/' tests the nested names), read by
    the features `u` and `i`; seed 0.
    """

    def make(optimizer, *, users, items, item_table):
        spec = EmbeddingSpec(
            tables=(
                TableSpec(name="users", vocabulary_size=users, dim=3),
                TableSpec(name=item_table, vocabulary_size=items, dim=2),
            ),
            features=(
                FeatureSpec(name="u", table="users", num_buckets=users),
                FeatureSpec(name="i", table=item_table, num_buckets=items),
            ),
            optimizer=optimizer,
        )
        return Engine(spec, seed=0)

    return make


@pytest.fixture
def save_arrays():
    """`save_arrays(directory, tables, step)`: save_checkpoint of {table: {slot: array}}, the structure read off
    the arrays (rows and columns of `embedding`, the other keys as slots); returns the checkpoint's path."""

    def save(directory, tables, step):
        structure = {
            name: {
                "vocabulary_size": arrays["embedding"].shape[0],
                "dim": arrays["embedding"].shape[1],
                "slots": sorted(s for s in arrays if s != "embedding"),
            }
            for name, arrays in tables.items()
        }
        return save_checkpoint(str(directory), tables, step=step, spec_structure=structure, fingerprint="f")

    return save


# The seed pages' programs (../shared/seeds), run with this package (tests/docs, tests/midlevel) and with
# TensorFlow (tests/tf_bridge): `tf` is the module the program imports, `tpu_embedding_shim` or
# `tpu_embedding_shim.tensorflow`. --------------------------------------------------------------------------


@pytest.fixture
def page_tpu_columns():
    """`page_tpu_columns(tf, vocabulary_size)`: the TPU columns of pages 000 and 002 (the same lines on both).

    `a` and `b` share a table, `c` has its own, each of dimension 10; the pages'
    `tf.feature_column.categorical_column_with_identity(...)` is filled in with `vocabulary_size`.
    """

    def columns(tf, vocabulary_size):
        column_a, column_b, column_c = [
            tf.feature_column.categorical_column_with_identity(key, vocabulary_size) for key in ("a", "b", "c")
        ]
        tpu_shared_columns = tf.tpu.experimental.shared_embedding_columns([column_a, column_b], 10)
        tpu_non_shared_column = tf.tpu.experimental.embedding_column(column_c, 10)
        return [tpu_non_shared_column] + tpu_shared_columns

    return columns


@pytest.fixture
def sparse_core_feature_config():
    """`sparse_core_feature_config(tf)`: page 003's `feature_config` filled in, and its two tables.

    Gives (feature_config, items, users): `clicked` and `history` (a sequence of 3) read `items` [40, 4],
    `user` reads `users` [16, 4].
    """

    def config(tf):
        E = tf.tpu.experimental.embedding
        table = E.TableConfig(vocabulary_size=40, dim=4, name="items")
        user_table = E.TableConfig(vocabulary_size=16, dim=4, name="users")
        feature_config = {
            "clicked": E.FeatureConfig(table=table),
            "history": E.FeatureConfig(table=table, max_sequence_length=3),
            "user": E.FeatureConfig(table=user_table),
        }
        return feature_config, table, user_table

    return config


@pytest.fixture
def page_004_loop():
    """`page_004_loop(tf, strategy, embedding, tpu_step, training)`: the loop of page 004's two steps.

    Gives the body the page's `training_step` (training=True) and `evalution_step` (False) share,
    `step(dataset_iterator, num_steps)`: `num_steps` times, the next batch's embedding features are enqueued
    and `strategy.run(tpu_step, args=(tpu_features,))` runs on the rest. The page decorates it with
    `@tf.function`; so does the caller.
    """

    def loop(tf, strategy, embedding, tpu_step, training):
        def step(dataset_iterator, num_steps):
            for _ in tf.range(num_steps):
                embedding_features, tpu_features = next(dataset_iterator)
                embedding.enqueue(embedding_features, training=training)
                strategy.run(tpu_step, args=(tpu_features,))

        return step

    return loop


@pytest.fixture
def page_004_run(page_004_loop):
    """`page_004_run(tf, strategy, embedding, dataset_iterator, training_tpu_step, evaluation_tpu_step)`.

    Page 004's `training_step` and `evalution_step` (sic), each `@tf.function` over `page_004_loop`, run as the
    tests of the page run them: 10 evaluation steps, 100 training steps, 10 evaluation steps. Gives the tables
    (by name) before and after the training steps.
    """

    def run(tf, strategy, embedding, dataset_iterator, training_tpu_step, evaluation_tpu_step):
        training_step = tf.function(page_004_loop(tf, strategy, embedding, training_tpu_step, training=True))
        evalution_step = tf.function(page_004_loop(tf, strategy, embedding, evaluation_tpu_step, training=False))
        evalution_step(dataset_iterator, 10)
        before = {t.name: v.copy() for t, v in embedding.embedding_tables.items()}
        training_step(dataset_iterator, 100)
        after = {t.name: v.copy() for t, v in embedding.embedding_tables.items()}
        evalution_step(dataset_iterator, 10)
        return before, after

    return run
