"""Fixtures that tests in more than one folder use."""

import shutil
import signal

import pytest

from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, TableSpec


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
