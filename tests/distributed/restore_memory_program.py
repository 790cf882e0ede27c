"""Run under `mpiexec -n W`: each replica restores its rows of a large table from a TPUEstimator checkpoint
(checkpoints.restore's resume plan, then `DistributedEngine.load_rows`) and records, in `<out>.<rank>.json`,
the peak of what it allocated meanwhile (tracemalloc tracks numpy's arrays) and its share's bytes.

    restore_memory_program.py <prefix> <vocabulary_size> <dim> <strategy> <out>
"""

import json
import sys
import tracemalloc

import numpy as np

from tpu_embedding_shim.checkpoints.program_checkpoint import open_program_checkpoint
from tpu_embedding_shim.checkpoints.restore import Program, resume_plan
from tpu_embedding_shim.checkpoints.tf_names import ProgramNames
from tpu_embedding_shim.engine import DistributedEngine, communicator
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec


def main(prefix: str, vocabulary_size: str, dim: str, strategy: str, out: str) -> None:
    comm = communicator()
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=int(vocabulary_size), dim=int(dim)),),
        features=(FeatureSpec(name="f", table="t", num_buckets=int(vocabulary_size)),),
        optimizer=AdagradSpec(learning_rate=0.1),
        num_shards=comm.size,
        partition_strategy=strategy,
    )
    engine = DistributedEngine(spec, comm, seed=0)
    program = Program(
        ProgramNames(tables=["t"]),
        {"t": (int(vocabulary_size), int(dim))},
        {"t": spec.optimizer_for("t")},
        {},
        strategy,
        {"t": engine.row_ids("t")},
    )
    share = sum(a.nbytes for a in engine.local_state()["t"].values())
    # The engine's built rows were allocated before tracing starts: only what the restore allocates counts.
    tracemalloc.start()
    source = open_program_checkpoint(prefix)
    plan = resume_plan(source, program)
    engine.load_rows(plan.tables, step=plan.step)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del plan
    state = engine.state()  # the whole restored table, for the test to compare (after the measurement)
    record = {"peak": peak, "share": share, "step": engine.global_step}
    if comm.rank == 0:
        np.savez(out + ".npz", **{k: v for k, v in state["t"].items()})
    with open(f"{out}.{comm.rank}.json", "w") as handle:
        json.dump(record, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
