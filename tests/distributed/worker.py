"""One MPI rank of the equivalence property: `mpiexec -n W python worker.py recipe.json out.npz`.

Every rank builds the recipe's spec and global batches (`cases.py`), runs
`DistributedEngine` on its slice with `cases.run`, and so records what one
process records: the activations of the global batch (every rank's slice,
gathered in rank order), the full tables and slots after each step (without
pipelining) and at the end, and each fault's error on every rank. Rank 0
writes them to out.npz ('errors': JSON, one list per rank).
"""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases

from tpu_embedding_shim.engine.distributed import DistributedEngine, MPICommunicator, communicator


def main(recipe_path: str, out_path: str) -> None:
    recipe = json.loads(Path(recipe_path).read_text())
    comm = communicator()
    assert isinstance(comm, MPICommunicator), comm  # started by mpiexec with W > 1 ranks
    spec = cases.build_spec(recipe, comm.size)
    engine = DistributedEngine(spec, comm, seed=recipe["seed"])

    def gather(arrays):
        parts = comm.allgather_object(arrays)
        return {name: np.concatenate([part[name] for part in parts]) for name in arrays}

    record, errors = cases.run(engine, recipe, spec, comm.rank, gather)
    all_errors = comm.allgather_object(errors)
    if comm.rank == 0:
        np.savez(out_path, errors=np.array(json.dumps(all_errors)), **record)


if __name__ == "__main__":
    main(*sys.argv[1:3])
