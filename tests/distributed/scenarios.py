"""MPI ranks for the deterministic tests: `mpiexec -n W python scenarios.py NAME DIRECTORY`.

Each rank writes DIRECTORY/rank<r>.json (its rank and what it saw);
`test_mpi.py` reads them. A rank that dies writes nothing: the test then
checks how the job ended.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from tpu_embedding_shim.engine.distributed import DistributedEngine, MPICommunicator, communicator
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec


def spec(world_size, *, dim=2, learning_rate=0.1, num_shards=None):
    return EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=7, dim=dim, combiner="sum"),),
        features=(FeatureSpec(name="f", table="t", num_buckets=7),),
        optimizer=AdagradSpec(learning_rate=learning_rate),
        num_shards=world_size if num_shards is None else num_shards,
    )


def build(comm, changes):
    """Builds an engine, each rank with its own `changes[rank]` options; returns the error text or 'built'."""
    options = dict(changes.get(comm.rank, {}))
    seed = options.pop("seed", 0)
    try:
        DistributedEngine(spec(comm.size, **options), comm, seed=seed)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "built"


def main(name, directory):
    comm = communicator()
    out = {"rank": comm.rank, "size": comm.size, "communicator": type(comm).__name__}
    if name == "communicator":
        assert isinstance(comm, MPICommunicator)
        out["library"] = comm.library()
        out["alltoallv"] = comm.alltoallv(
            np.arange(comm.size, dtype=np.int64) + 10 * comm.rank, [1] * comm.size, [1] * comm.size
        ).tolist()
        out["allreduce"] = comm.allreduce(np.array([comm.rank, -comm.rank]), "max").tolist()
        gathered = comm.allgather(np.full((2,), comm.rank + 0.5, np.float32))
        out["allgather"] = [gathered.dtype.name, gathered.tolist()]
    elif name == "mismatched_dim":
        out["error"] = build(comm, {1: {"dim": 3}})
    elif name == "mismatched_learning_rate":
        out["error"] = build(comm, {1: {"learning_rate": 0.2}})
    elif name == "mismatched_seed":
        out["error"] = build(comm, {0: {"seed": 1}})
    elif name == "num_shards_not_a_multiple":
        out["error"] = build(comm, {r: {"num_shards": comm.size + 1} for r in range(comm.size)})
    elif name == "bad_spec_on_one_rank":
        try:
            DistributedEngine("not a spec" if comm.rank == 1 else spec(comm.size), comm)
        except Exception as error:
            out["error"] = f"{type(error).__name__}: {error}"
    elif name == "out_of_step":  # rank 0 trains, rank 1 looks up for inference, rank 2 reads a table
        engine = DistributedEngine(spec(comm.size), comm, seed=0)
        try:
            if comm.rank == 2:
                engine.table("t")
            else:
                engine.forward({"f": [[1, 2]]}, training=comm.rank == 0)
        except Exception as error:
            out["error"] = f"{type(error).__name__}: {error}"
        out["global_step"] = engine.global_step
    elif name in ("uncaught_exception", "killed", "exit", "hang"):
        engine = DistributedEngine(spec(comm.size), comm, seed=0)
        if comm.rank == 1:  # dies while the others wait in the step's first collective
            time.sleep(0.5)
            if name == "uncaught_exception":
                raise RuntimeError("rank 1 fails outside the engine")
            if name == "killed":
                os.kill(os.getpid(), 9)
            if name == "hang":
                time.sleep(120)
            os._exit(3)
        started = time.monotonic()
        engine.forward({"f": [[1, 2]]})
        out["returned_after"] = time.monotonic() - started  # never printed: the job is ended
    Path(directory, f"rank{comm.rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:3])
