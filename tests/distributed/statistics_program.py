"""Lookup statistics of a training run, alone (`Engine`) or under `mpiexec -n N` (`DistributedEngine`).

    python statistics_program.py DIRECTORY
    mpiexec -n N python statistics_program.py DIRECTORY

STEPS training lookups of global batches of 12 examples (ragged ids; two features share table `a`), each rank
looking up its contiguous rows; the statistics are flushed halfway and at the end (the second flush merges
into the first's files). `test_statistics.py` compares DIRECTORY with the one-process run's, byte for byte.
"""

import sys

import numpy as np

from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.engine.distributed import DistributedEngine, communicator
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec

GLOBAL_BATCH = 12
STEPS = 80


def spec(directory):
    return EmbeddingSpec(
        tables=(TableSpec(name="a", vocabulary_size=20, dim=2), TableSpec(name="b", vocabulary_size=7, dim=2)),
        features=(
            FeatureSpec(name="clicks", table="a", num_buckets=20),
            FeatureSpec(name="views", table="a", num_buckets=20),
            FeatureSpec(name="user", table="b", num_buckets=7),
        ),
        optimizer=SGDSpec(learning_rate=0.1),
        num_shards=6,
        partition_strategy="mod",
        profile_data_directory=directory,
    )


def global_batch(rng):
    def ragged(vocabulary, most):
        return [list(rng.integers(0, vocabulary, size=rng.integers(0, most + 1))) for _ in range(GLOBAL_BATCH)]

    return {"clicks": ragged(20, 4), "views": ragged(20, 2), "user": ragged(7, 1)}


def main(directory):
    comm = communicator()
    rank, size = comm.rank, comm.size
    engine = Engine(spec(directory), seed=0, kernels="numpy") if size == 1 else DistributedEngine(spec(directory), comm)
    per_rank = -(-GLOBAL_BATCH // size)
    lo, hi = min(rank * per_rank, GLOBAL_BATCH), min((rank + 1) * per_rank, GLOBAL_BATCH)
    rng = np.random.default_rng(5)
    for step in range(STEPS):
        features = {name: rows[lo:hi] for name, rows in global_batch(rng).items()}
        engine.forward(features, training=True)
        if step == STEPS // 2:
            engine.statistics.flush()
    engine.statistics.flush()


if __name__ == "__main__":
    main(sys.argv[1])
