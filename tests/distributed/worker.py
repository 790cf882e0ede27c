"""One MPI rank of the equivalence property: `mpiexec -n W python worker.py recipe.json out.npz`.

Every rank builds the recipe's spec and global batches (`cases.py`), runs
`DistributedEngine` on its slice with `cases.run`, and so records what one
process records: the activations of the global batch (every rank's slice,
gathered in rank order), the full tables and slots after each step (without
pipelining) and at the end, and each fault's error on every rank. Rank 0
writes them to out.npz ('errors': JSON, one list per rank).

Options of the recipe (absent: the defaults): `pooling`, the engine's mode
(or a list, one per rank: the build must then fail, and out.npz holds each
rank's error as 'build_errors'); `count_bytes`, record the bytes each rank
sends to the other ranks in the all-to-alls of its lookups and of its
updates ('bytes/forward', 'bytes/backward': int64 [W], summed over the
steps) through `Counting`.
"""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases

from tpu_embedding_shim.engine.distributed import DistributedEngine, MPICommunicator, communicator


class Counting:
    """A communicator that counts the bytes this rank sends to the other ranks in `alltoallv`, under the
    current `phase`; every call goes on to `comm`."""

    def __init__(self, comm):
        self.comm, self.rank, self.size = comm, comm.rank, comm.size
        self.phase, self.sent = None, {"forward": 0, "backward": 0}

    def alltoallv(self, send, send_counts, recv_counts):
        others = sum(int(n) for rank, n in enumerate(send_counts) if rank != self.rank)
        self.sent[self.phase] += others * np.asarray(send).itemsize
        return self.comm.alltoallv(send, send_counts, recv_counts)

    def allreduce(self, values, op):
        return self.comm.allreduce(values, op)

    def allgather(self, values):
        return self.comm.allgather(values)

    def allgather_object(self, obj):
        return self.comm.allgather_object(obj)

    def bcast_object(self, obj, root=0):
        return self.comm.bcast_object(obj, root)

    def barrier(self):
        return self.comm.barrier()


class Metered:
    """`engine` with its lookups counted under 'forward' and its updates under 'backward'."""

    def __init__(self, engine, counting):
        self.engine, self.counting = engine, counting

    def forward(self, *args, **kwargs):
        self.counting.phase = "forward"
        return self.engine.forward(*args, **kwargs)

    def apply_gradients(self, *args, **kwargs):
        self.counting.phase = "backward"
        return self.engine.apply_gradients(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def main(recipe_path: str, out_path: str) -> None:
    recipe = json.loads(Path(recipe_path).read_text())
    comm = communicator()
    assert isinstance(comm, MPICommunicator), comm  # started by mpiexec with W > 1 ranks
    spec = cases.build_spec(recipe, comm.size)
    pooling = recipe.get("pooling", "exact")
    counting = Counting(comm) if recipe.get("count_bytes") else None
    try:
        engine = DistributedEngine(
            spec,
            comm if counting is None else counting,
            seed=recipe["seed"],
            pooling=pooling[comm.rank] if isinstance(pooling, list) else pooling,
        )
    except Exception as error:
        build_errors = comm.allgather_object(f"{type(error).__name__}: {error}")
        if comm.rank == 0:
            np.savez(out_path, build_errors=np.array(json.dumps(build_errors)))
        return

    def gather(arrays):
        parts = comm.allgather_object(arrays)
        return {name: np.concatenate([part[name] for part in parts]) for name in arrays}

    run_on = engine if counting is None else Metered(engine, counting)
    record, errors = cases.run(run_on, recipe, spec, comm.rank, gather)
    all_errors = comm.allgather_object(errors)
    if counting is not None:
        for phase, sent in counting.sent.items():
            record[f"bytes/{phase}"] = np.array(comm.allgather_object(sent), np.int64)
    if comm.rank == 0:
        np.savez(out_path, errors=np.array(json.dumps(all_errors)), **record)


if __name__ == "__main__":
    main(*sys.argv[1:3])
