"""`mpiexec -n W python gather_program.py OUT_DIR`: tables gathered on rank 0 block by block.

For `div` and `mod`, tables of 0 to 23 rows (more ranks than rows included) and blocks of 1 to 9 rows:
rank 0 joins the blocks of `blocks_on_root` and of `DistributedEngine.table_blocks` and compares them
with the full table; the other ranks must see only None. Each rank writes OUT_DIR/rank<r>.json.
"""

import json
import sys
from pathlib import Path

import numpy as np

from tpu_embedding_shim.engine.distributed import DistributedEngine, Ownership, communicator
from tpu_embedding_shim.engine.distributed.gather import blocks_on_root
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, RowIdInitializer, TableSpec


def main(out_dir: str) -> None:
    comm = communicator()
    failures = []
    for strategy in ("div", "mod"):
        for vocabulary in (1, 2, 5, 23):
            full = np.arange(vocabulary * 3, dtype=np.float32).reshape(vocabulary, 3)
            owner = Ownership(vocabulary, comm.size, strategy, comm.size)
            local = owner.take(full, comm.rank)
            for block_rows in (1, 4, 9):
                blocks = list(blocks_on_root(comm, owner, local, block_rows=block_rows))
                if comm.rank == 0:
                    if not np.array_equal(np.concatenate(blocks), full):
                        failures.append((strategy, vocabulary, block_rows))
                elif any(block is not None for block in blocks):
                    failures.append((strategy, vocabulary, block_rows, "not None"))
        spec = EmbeddingSpec(
            tables=(TableSpec(name="t", vocabulary_size=23, dim=2, initializer=RowIdInitializer()),),
            features=(FeatureSpec(name="f", table="t", num_buckets=23),),
            optimizer=AdagradSpec(learning_rate=0.1, initial_accumulator=0.5),
            num_shards=comm.size,
            partition_strategy=strategy,
        )
        engine = DistributedEngine(spec, comm, seed=0)
        whole, slot = engine.table("t"), engine.slots("t")["accumulators"]
        for key, want in (("embedding", whole), ("accumulators", slot)):
            blocks = list(engine.table_blocks("t", key))
            if comm.rank == 0 and not np.array_equal(np.concatenate(blocks), want):
                failures.append((strategy, key))
    Path(out_dir, f"rank{comm.rank}.json").write_text(json.dumps({"rank": comm.rank, "failures": failures}))


if __name__ == "__main__":
    main(*sys.argv[1:])
