"""`mpiexec -n W python own_rows_program.py STRATEGY FILES_DIR OUT_DIR`: each rank builds only its rows.

A [600000, 8] table (37 blocks of random draws), `div` or `mod` over W ranks, Adagrad (one slot). Each
rank records the peak of what numpy allocated while building the engine (tracemalloc; the kernels'
modules are loaded first, by a tiny engine: their import is the process's), its rows' and
slot's bytes, and whether its rows are `Engine`'s rows there, bit for bit. FILES_DIR: `-` for tables in
memory, else a directory for `table_files` (a file per rank). Each rank writes OUT_DIR/rank<r>.json.
"""

import json
import sys
import tracemalloc
from pathlib import Path

import numpy as np

from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.engine.distributed import DistributedEngine, communicator
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

VOCABULARY, DIM = 600_000, 8


def spec(world_size: int, strategy: str, vocabulary: int = VOCABULARY) -> EmbeddingSpec:
    return EmbeddingSpec(
        tables=(TableSpec(name="big", vocabulary_size=vocabulary, dim=DIM, combiner="sum"),),
        features=(FeatureSpec(name="f", table="big", num_buckets=vocabulary),),
        optimizer=AdagradSpec(learning_rate=0.1, initial_accumulator=0.25),
        num_shards=world_size,
        partition_strategy=strategy,
    )


def main(strategy: str, files_dir: str, out_dir: str) -> None:
    comm = communicator()
    table_files = None if files_dir == "-" else {"big": str(Path(files_dir, "big.npy"))}
    DistributedEngine(spec(comm.size, strategy, vocabulary=10), comm)  # the kernels loaded before tracing
    tracemalloc.start()
    engine = DistributedEngine(spec(comm.size, strategy), comm, seed=7, table_files=table_files)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    mine = engine.row_slices()["big"]
    rows = engine._owners["big"].owned_ids(comm.rank)
    want = Engine(spec(1, "div"), seed=7, kernels="numpy")
    (((_, _), _), local), *_ = mine["embedding"].parts
    same = bool(np.array_equal(local.view(np.uint32), want.table("big")[rows].view(np.uint32)))
    slot_same = bool(np.array_equal(mine["accumulators"].parts[0][1], want.slots("big")["accumulators"][rows]))
    record = {
        "rank": comm.rank,
        "peak": peak,
        "held": local.nbytes * 2,  # rows + one slot
        "full": VOCABULARY * DIM * 4,
        "same": same,
        "slot_same": slot_same,
    }
    Path(out_dir, f"rank{comm.rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:])
