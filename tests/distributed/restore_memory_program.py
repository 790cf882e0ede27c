"""Run under `mpiexec -n W`: each replica restores its rows of a large table from a TPUEstimator checkpoint
(checkpoints.restore's resume plan, agreed on as the runner does, then `DistributedEngine.load_rows`) and
records, in `<out>.<rank>.json`, the peak of what it allocated meanwhile (tracemalloc tracks numpy's arrays),
its share's bytes, and the error of a failed restore (whether its rows stayed as they were).

    restore_memory_program.py <prefix> <vocabulary_size> <dim> <strategy> <out>
"""

import json
import sys
import tracemalloc

import numpy as np

from tpu_embedding_shim.checkpoints.program_checkpoint import open_program_checkpoint
from tpu_embedding_shim.checkpoints.restore import Program, resume_plan
from tpu_embedding_shim.checkpoints.tf_names import ProgramNames
from tpu_embedding_shim.engine import DistributedEngine, agree, communicator
from tpu_embedding_shim.engine.tf_bundle import crc32c
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
    before = {key: value.copy() for key, value in engine.local_state()["t"].items()}
    crc32c(b"warm")  # loads the CRC kernel (numba, where installed) before tracing: its import is not the restore's
    tracemalloc.start()
    plan, error = None, None
    try:
        plan = resume_plan(open_program_checkpoint(prefix), program)
    except Exception as caught:
        error = caught
    try:
        agree(comm, error, "restore")  # as the runner does: a replica's error raises on every replica
        engine.load_rows(plan.tables, step=plan.step)
    except Exception as caught:
        unchanged = all(np.array_equal(value, before[key]) for key, value in engine.local_state()["t"].items())
        record = {"error": f"{type(caught).__name__}: {caught}", "unchanged": unchanged, "step": engine.global_step}
        with open(f"{out}.{comm.rank}.json", "w") as handle:
            json.dump(record, handle)
        return
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
