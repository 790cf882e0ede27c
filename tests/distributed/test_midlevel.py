"""The mid-level API under mpiexec (issue 18): one program, run on N processes and on one, gives one model.

`midlevel_program.py` is a TensorFlow-docs-style training loop (TPUStrategy,
TPUEmbedding, distributed dataset, `strategy.run`); it does not know how
many processes run it. The embeddings (activations, tables, slots) must be
the same bits on every replica as in one process; the dense weight, which
the replicas average with `all_reduce(MEAN)`, equal to float tolerance (a
mean of per-replica means adds in another order than one mean over the
global batch). Checkpoints written by N replicas (each its rows, in a data
file of its own) restore on M. The first
tests need no MPI: they check what a construction decides from the number
of replicas, before any collective.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import replicas
from tpu_embedding_shim.api.midlevel_base import MidLevelBase
from tpu_embedding_shim.engine import SingleProcess
from tpu_embedding_shim.engine.distributed import Ownership
from tpu_embedding_shim.engine.tf_bundle import BundleReader

from .launch import HERE, environment, mpirun, requires_mpi
from .test_equivalence import assert_same_bits

embedding_api = tf.tpu.experimental.embedding

PROGRAM = HERE / "midlevel_program.py"
NUMPY_KERNELS = {"TPU_EMBEDDING_SHIM_KERNELS": "numpy"}  # the same bits as the fast kernels, without compiling them


class SilentWorld(SingleProcess):
    """A world of three replicas that never communicates: enough for what a construction decides."""

    size = 3


def test_the_shards_follow_the_replicas_and_num_shards_must_be_a_multiple_of_them():
    """In a TPUStrategy scope with 3 replicas, TPUEmbedding stores 3 shards per table and TPUEmbeddingV2
    TensorFlow's 4 * 3 SparseCore shards; a `num_shards` of 4 is a ValueError that changes nothing."""
    table = embedding_api.TableConfig(vocabulary_size=8, dim=2)
    config = {"f": embedding_api.FeatureConfig(table=table)}
    with replicas.use_world(SilentWorld()):
        strategy = tf.distribute.TPUStrategy()
        assert strategy.num_replicas_in_sync == 3
        with strategy.scope():
            with pytest.raises(ValueError, match=r"`num_shards` must be a multiple of the number of replicas \(3,"):
                MidLevelBase(config, embedding_api.SGD(learning_rate=0.1), num_shards=4)
            assert table.name is None and table.optimizer is None  # nothing changed
            assert embedding_api.TPUEmbedding(config, embedding_api.SGD(learning_rate=0.1))._engine_spec.num_shards == 3
            v2 = embedding_api.TPUEmbeddingV2(config, embedding_api.SGD(learning_rate=0.1))
            assert (v2._engine_spec.num_shards, v2._engine_spec.partition_strategy) == (12, "mod")
        outside = embedding_api.TPUEmbedding(config, embedding_api.SGD(learning_rate=0.1))
        assert outside._engine_spec.num_shards == 1  # outside a TPUStrategy: this process's own object
        serving = embedding_api.TPUEmbeddingForServing(config, embedding_api.SGD(learning_rate=0.1))
        assert type(serving.engine).__name__ == "Engine"  # serving is never replicated


def run(world_size, scenario, directory, *args):
    """Runs the program on `world_size` processes (1: plain python, no launcher); each replica's record."""
    directory.mkdir(parents=True, exist_ok=True)
    if world_size == 1:
        job = subprocess.run(
            [sys.executable, str(PROGRAM), scenario, str(directory), *map(str, args)],
            env={**environment(), **NUMPY_KERNELS},
            capture_output=True,
            text=True,
            timeout=60,
        )
    else:
        job = mpirun(world_size, PROGRAM, scenario, directory, *args, env=NUMPY_KERNELS)
    assert job.returncode == 0, job.stdout + job.stderr
    records = []
    for rank in range(world_size):
        with np.load(directory / f"rank{rank}.npz") as record:
            records.append({key: record[key] for key in record.files})
    return records


def errors(record):
    return json.loads(str(record["errors"]))


def assert_same_model(got, want, keys):
    """Embeddings bit for bit; the dense weight `w` to float tolerance (module docstring)."""
    for key in keys:
        if key.endswith("/w"):
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6, err_msg=key)
        else:
            assert_same_bits(got[key], want[key], key)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("trained")
    return {n: run(n, "train", root / f"n{n}") for n in (1, 2, 3)}


def model_keys(record):
    return [
        k
        for k in record
        if k.startswith(("v1/", "v2/", "step")) and k != "v2/shards/items" and not k.startswith("v2/checkpoint/")
    ]


@requires_mpi
@pytest.mark.parametrize("world_size", [2, 3])
def test_n_replicas_train_the_model_of_one_process(trained, world_size):
    """TPUEmbedding (a bad batch included) and TPUEmbeddingV2 (pipelined): every replica's activations of
    the global batch, tables, slots and `embedding_tables` are one process's bits; the dense weight equal."""
    (one,) = trained[1]
    assert int(one["replicas"]) == 1
    for record in trained[world_size]:
        assert int(record["replicas"]) == world_size  # num_replicas_in_sync
        assert sorted(record) == sorted(one)
        assert_same_model(record, one, model_keys(one))


@requires_mpi
@pytest.mark.parametrize("world_size", [2, 3])
def test_embedding_tables_are_the_full_tables_on_every_replica(trained, world_size):
    for record in trained[world_size]:
        for version in ("v1", "v2"):
            assert record[f"{version}/embedding_tables/items"].shape == (13, 4)
            assert record[f"{version}/embedding_tables/users"].shape == (7, 3)
            assert_same_bits(record[f"{version}/embedding_tables/items"], record[f"{version}/items/parameters"], "")
        # TPUEmbeddingV2 stores 4 * num_replicas_in_sync shards (TensorFlow's SparseCore count), row r on r % S.
        sizes = record["v2/shards/items"].tolist()
        assert len(sizes) == 4 * world_size and sum(sizes) == 13
        # its checkpoint: one row slice per replica (each replica holds 4 consecutive shards of the 4N: one range)
        sizes = Ownership(13, 4 * world_size, "div", world_size).sizes
        ranges = [(sum(sizes[:r]), sizes[r]) for r in range(world_size)]
        assert [tuple(rows) for rows in record["v2/checkpoint/items_slices"]] == ranges


@requires_mpi
@pytest.mark.parametrize("world_size", [2, 3])
def test_a_bad_input_on_one_replica_raises_on_every_replica_and_changes_nothing(trained, world_size):
    """Step 2's global batch holds id 13 (outside the table) in its last example, which the last replica
    gets: it raises ValueError there, PeerFailedError naming it elsewhere, as one process raises ValueError;
    every replica goes on to the next step with nothing changed (the tables are one process's, above)."""
    (one,) = trained[1]
    assert [e.split(":")[0] for e in errors(one)] == ["ValueError"]
    last = world_size - 1
    for rank, record in enumerate(trained[world_size]):
        (error,) = errors(record)
        if rank == last:
            assert error.startswith("ValueError") and "id 13" in error
        else:
            assert error.startswith(f"PeerFailedError: Rank {last} failed") and "id 13" in error
        assert int(record["v1/global_step"]) == int(one["v1/global_step"]) == 3


def state_keys(record, prefix):
    return [k for k in record if k.startswith(prefix + "/")]


TABLE_KEYS = {  # TensorFlow's keys of the program's tables and slots (Adagrad; Adam's with created slots)
    "embedding/items/.ATTRIBUTES/VARIABLE_VALUE": 13,
    "embedding/items.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE": 13,
    "embedding/users/.ATTRIBUTES/VARIABLE_VALUE": 7,
    "embedding/users.Smomenta/.ATTRIBUTES/VARIABLE_VALUE": 7,
    "embedding/users.Svelocities/.ATTRIBUTES/VARIABLE_VALUE": 7,
}


def div_rows(vocabulary_size, world_size):
    """(start, length) of each replica's rows: TensorFlow's `div`, the first V % W replicas one row more."""
    sizes = [vocabulary_size // world_size + (r < vocabulary_size % world_size) for r in range(world_size)]
    return [(sum(sizes[:r]), sizes[r]) for r in range(world_size)]


def assert_written_by_every_replica(prefix, world_size):
    """The directory holds the state file and this checkpoint: one data file per replica; each table and
    slot one key of the full shape, one row slice per replica (its `div` rows, in its own data file), as
    TensorFlow saves a table under TPUStrategy; the rest (object graph, save_counter, the dense weight)
    whole, in replica 0's file."""
    directory, name = os.path.split(prefix)
    data = [f"{name}.data-{r:05d}-of-{world_size:05d}" for r in range(world_size)]
    assert sorted(os.listdir(directory)) == sorted(["checkpoint", *data, f"{name}.index"])
    reader = BundleReader(prefix)
    assert set(TABLE_KEYS) <= set(reader.names())
    for key, vocabulary_size in TABLE_KEYS.items():
        entry = reader.entry(key)
        rows = [(start, length) for start, length in div_rows(vocabulary_size, world_size) if length]
        assert [extents[0] for extents in entry.slices] == rows, key
        assert all(extents[1:] == ((0, -1),) for extents in entry.slices), key
        owners = [reader.slice_entry(key, extents).shard_id for extents in entry.slices]
        assert owners == list(range(world_size)), key
    for key in set(reader.names()) - set(TABLE_KEYS):
        assert reader.entry(key).slices == () and reader.entry(key).shard_id == 0, key


@requires_mpi
def test_a_checkpoint_written_by_n_replicas_restores_on_m(tmp_path):
    """Saved by 1, 2 and 3 replicas (2 and 3: each replica writes its rows); restored 2 -> 1, 2 -> 3, 3 -> 2,
    3 -> 1 and 1 -> 2: every replica restores the saved tables, slots, step and dense weight bit for bit and
    trains on to the same model."""
    saved = {n: run(n, "save", tmp_path / f"save{n}", tmp_path / f"checkpoints{n}") for n in (1, 2, 3)}
    for n, records in saved.items():
        for record in records:
            assert_same_model(record, saved[2][0], state_keys(saved[2][0], "saved"))
            assert json.loads(str(record["checkpoints"])) == [str(tmp_path / f"checkpoints{n}" / "ckpt-2")]
    # The manager kept one checkpoint (replica 0 deleted ckpt-1) and recorded it.
    assert sorted(os.listdir(tmp_path / "checkpoints1")) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    for n in (2, 3):
        assert_written_by_every_replica(str(tmp_path / f"checkpoints{n}" / "ckpt-2"), n)
    restored = {
        (n, m): run(m, "restore", tmp_path / f"restore{n}to{m}", tmp_path / f"checkpoints{n}")
        for n, m in ((2, 1), (2, 3), (3, 2), (3, 1), (1, 2))
    }
    after = restored[2, 1][0]
    for (n, m), records in restored.items():
        assert len(records) == m
        reference = saved[n][0]
        for record in records:
            assert str(record["restored_from"]) == str(tmp_path / f"checkpoints{n}" / "ckpt-2")
            for key in state_keys(reference, "saved"):  # what was saved, bit for bit
                assert_same_bits(record[key.replace("saved/", "restored/", 1)], reference[key], key)
            assert_same_model(record, after, state_keys(after, "after"))


@requires_mpi
@pytest.mark.parametrize("world_size", [2, 3])
def test_a_failed_write_on_one_replica_raises_on_every_replica_and_leaves_nothing(tmp_path, world_size):
    """The last replica can't write its data file (a full disk there): it raises the OSError, every other
    replica PeerFailedError naming it; the save counter stays 0 everywhere, and the checkpoint directory
    holds nothing (no index, no data file, no temporary file, no lock)."""
    checkpoints = tmp_path / "checkpoints"
    records = run(world_size, "failed_shard_write", tmp_path / "records", checkpoints)
    last = world_size - 1
    for rank, record in enumerate(records):
        (error,) = errors(record)
        if rank == last:
            assert error.startswith("OSError: [Errno 28] No space left on device"), error
        else:
            assert error.startswith(f"PeerFailedError: Rank {last} failed") and "No space left" in error, error
        assert int(record["save_counter"]) == 0
    assert os.listdir(checkpoints) == []


@requires_mpi
def test_a_failed_write_on_the_chief_raises_on_every_replica_and_leaves_no_checkpoint(tmp_path):
    """Replica 0's save fails (a file stands where the checkpoint directory should be; a read-only directory
    would not stop root): it raises the OS error there, PeerFailedError naming it on the other replica, the
    save counter stays 0 everywhere, and nothing was written."""
    records = run(2, "failed_save", tmp_path)
    (chief,), (other,) = errors(records[0]), errors(records[1])
    assert chief.split(":")[0] in ("FileExistsError", "NotADirectoryError")
    assert other.startswith("PeerFailedError: Rank 0 failed") and chief.split(":")[0] in other
    assert [int(r["save_counter"]) for r in records] == [0, 0]
    assert sorted(os.listdir(tmp_path)) == ["blocker", "rank0.npz", "rank1.npz"]
