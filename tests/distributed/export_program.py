"""`mpiexec -n W python export_program.py EXPORT_DIR CASE OUT_DIR`: an export written as rows arrive.

Every replica builds a `DistributedEngine` of two tables (`mod` and `div` ids are the engine's own
layout, the export's is id order), then replica 0 writes the export while the others send their rows
(`on_chief(..., meanwhile=drain_streams)`). CASE `good`; `fail_mid_table`: replica 0's file write fails
after the first block of the first table. Each replica writes OUT_DIR/rank<r>.json: its error, if any.
"""

import json
import sys
from pathlib import Path

from tpu_embedding_shim.api import replicas
from tpu_embedding_shim.checkpoints.state import DenseState
from tpu_embedding_shim.engine.distributed import DistributedEngine, gather
from tpu_embedding_shim.runner import export
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec


def main(export_dir: str, case: str, out_dir: str) -> None:
    comm = replicas.world()
    gather.BLOCK_ROWS = 1000  # several blocks per table
    spec = EmbeddingSpec(
        tables=(
            TableSpec(name="a", vocabulary_size=4321, dim=3),
            TableSpec(name="b", vocabulary_size=17, dim=5),
        ),
        features=(FeatureSpec(name="f", table="a", num_buckets=4321), FeatureSpec(name="g", table="b", num_buckets=17)),
        optimizer=AdagradSpec(learning_rate=0.1),
        num_shards=comm.size,
        partition_strategy="mod",
    )
    engine = DistributedEngine(spec, comm, seed=3)
    full = {name: engine.table(name) for name in ("a", "b")}
    if case == "fail_mid_table" and comm.rank == 0:

        def fail_after_one_block(path, table):
            next(table.blocks())
            raise OSError(28, "No space left on device")

        export._save_streamed = fail_after_one_block
    served = export.served_tables(engine, streamed=True)
    record = {"rank": comm.rank}
    try:
        replicas.on_chief(
            lambda: export.write_export(export_dir, served, dense_state=DenseState(), global_step=0),
            "export",
            meanwhile=lambda: export.drain_streams(served),
        )
    except Exception as error:
        record["error"] = f"{type(error).__name__}: {error}"
    else:
        loaded = export.load_exported(export_dir)
        record["same"] = all((loaded.tables[name] == full[name]).all() for name in full)
    Path(out_dir, f"rank{comm.rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:])
