"""`mpiexec -n W python bundle_program.py PREFIX CASE OUT_DIR`: every rank writes its rows of a checkpoint.

CASE `good`: a [10, 3] table, each rank its `div` rows as a slice, rank 0
also the global step. CASE `bad_rank_1`: rank 1 passes a tensor that can't
be stored. Each rank writes OUT_DIR/rank<r>.json: its error, if any.
"""

import json
import sys
from pathlib import Path

import numpy as np

from tpu_embedding_shim.engine.distributed import Ownership, communicator, write_collectively
from tpu_embedding_shim.engine.tf_bundle import SlicedTensor

TABLE = np.arange(30, dtype=np.float32).reshape(10, 3)


def main(prefix, case, out_dir):
    comm = communicator()
    owner = Ownership(10, comm.size, "div", comm.size)
    ids = owner.owned_ids(comm.rank)
    tensors = {}
    if len(ids):
        tensors["table"] = SlicedTensor((10, 3), [(((int(ids[0]), len(ids)), (0, -1)), TABLE[ids])])
    if comm.rank == 0:
        tensors["global_step"] = np.int64(5)
    if case == "bad_rank_1" and comm.rank == 1:
        tensors["bad"] = np.array([object()], dtype=object)
    record = {"rank": comm.rank}
    try:
        write_collectively(comm, prefix, tensors)
    except Exception as error:
        record["error"] = f"{type(error).__name__}: {error}"
    Path(out_dir, f"rank{comm.rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:])
