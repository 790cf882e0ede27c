"""Every multi-replica check of replicas.py and TPUStrategy in one job: `mpiexec -n W python replicas_program.py DIR`.

Each rank writes DIR/rank<r>.json: what it saw, check by check (a value, or
"TypeName: message" when the call raised). The chief's `on_chief` action
appends to DIR/chief.txt. `test_replicas.py` reads both; it imports
`summands` and `global_batches` from here to build the expected values.
"""

import json
import sys
from pathlib import Path

import numpy as np

from tpu_embedding_shim.api import distribute, replicas
from tpu_embedding_shim.api.tensors import RaggedTensor, SparseTensor
from tpu_embedding_shim.engine import PeerFailedError


def summands(rank):
    """Rank `rank`'s nest for cross_replica_sum. Element 0 of "w" is 1e8, 1, -1e8 on ranks 0, 1, 2: in float32
    the rank-order sum is 0, another order 1, so equal bits mean the same order."""
    rng = np.random.default_rng(rank)
    w = rng.standard_normal(4).astype(np.float32)
    w[0] = (1e8, 1.0, -1e8)[rank % 3]
    return {
        "w": w,
        "b": rng.standard_normal((2, 3)),
        "i": np.array([rank, 2 * rank + 1], np.int32),
        "h": (np.full(3, 0.1 * (rank + 1), np.float16),),
        "n": 0.1 * (rank + 1),
        "k": rank + 1,
    }


def global_batches():
    """Two global batches, 7 rows then 2 (fewer rows than replicas under -n 3), of every leaf type."""
    for size in (7, 2):
        ids = [list(range(row % 3)) for row in range(size)]  # rows of 0, 1, 2 ids
        flat = [i for row in ids for i in row]
        indices = [[row, position] for row, values in enumerate(ids) for position in range(len(values))]
        features = {
            "ids": [[10 * row + i for i in values] for row, values in enumerate(ids)],
            "sparse": SparseTensor(indices, flat, [size, 2]),
            "ragged": RaggedTensor.from_row_lengths(flat, [len(row) for row in ids]),
            "dense": np.arange(2 * size).reshape(size, 2),
            "missing": None,
        }
        yield features, np.arange(size, dtype=np.float32)


def encode(value):
    """A JSON form of a leaf or a nest, exact for floats (hex bits); "@" names what a leaf or tuple was."""
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return {"@": "tuple", "items": [encode(item) for item in value]}
    if isinstance(value, SparseTensor):
        return {"@": "sparse", "parts": [value.indices.tolist(), value.values.tolist(), value.dense_shape.tolist()]}
    if isinstance(value, RaggedTensor):
        return {"@": "ragged", "rows": value.to_list()}
    if isinstance(value, (bool, int, float, list, str)) or value is None:
        return {"@": type(value).__name__, "value": value.hex() if isinstance(value, float) else value}
    array = np.asarray(value)
    return {"@": "array", "dtype": array.dtype.str, "shape": list(array.shape), "bits": array.tobytes().hex()}


def attempt(action):
    """`encode(action())`, or the error it raised as "TypeName: message" (with the failed rank if a peer's)."""
    try:
        return encode(action())
    except PeerFailedError as error:
        return {"error": f"{type(error).__name__}: {error}", "rank": error.rank}
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


def collectives(rank, directory):
    """replicas.py: the sums, gathers and the chief's writes, with ranks that disagree."""
    seen = {}
    seen["sum"] = attempt(lambda: replicas.cross_replica_sum(summands(rank)))
    seen["mean"] = attempt(lambda: replicas.cross_replica_mean(summands(rank)))
    seen["sum_other_shape"] = attempt(lambda: replicas.cross_replica_sum(np.zeros(2 + rank, np.float32)))
    seen["sum_other_keys"] = attempt(lambda: replicas.cross_replica_sum({"a" if rank == 0 else "b": np.ones(2)}))
    seen["sum_other_leaves"] = attempt(lambda: replicas.cross_replica_sum((np.ones(2),) * (1 + min(rank, 1))))
    seen["sum_other_dtype"] = attempt(
        lambda: replicas.cross_replica_sum(np.ones(2, np.float32 if rank else np.float64))
    )
    seen["sum_object_on_1"] = attempt(
        lambda: replicas.cross_replica_sum(np.array(["x", "y"], object) if rank == 1 else np.ones(2))
    )
    seen["sum_still_in_step"] = attempt(lambda: replicas.cross_replica_sum(np.float32(rank + 1)))
    seen["gather_axis0"] = attempt(
        lambda: replicas.all_gather({"x": np.full((rank + 1, 2), rank, np.float32), "y": (np.arange(rank),)})
    )
    seen["gather_axis1"] = attempt(lambda: replicas.all_gather(np.full((2, rank + 1), rank), axis=1))
    seen["gather_other_width"] = attempt(lambda: replicas.all_gather(np.zeros((1, 1 + rank))))
    seen["gather_other_keys"] = attempt(lambda: replicas.all_gather({"a" if rank == 0 else "b": np.ones(1)}))
    seen["gather_other_dtype"] = attempt(lambda: replicas.all_gather(np.ones(1, np.int64 if rank else np.float64)))
    ran = []

    def write():
        ran.append(rank)
        with open(Path(directory, "chief.txt"), "a") as file:
            file.write(f"written by replica {replicas.replica_id()}\n")
        return str(Path(directory, "chief.txt"))

    def fail():
        ran.append(rank)
        raise OSError("disk full")

    seen["on_chief"] = attempt(lambda: replicas.on_chief(write, "write"))
    seen["on_chief_failing"] = attempt(lambda: replicas.on_chief(fail, "write"))
    seen["on_chief_ran_here"] = ran
    seen["slice"] = attempt(lambda: replicas.replica_slice(np.arange(5)))  # this replica's, from the world
    return seen


def strategies(rank):
    """TPUStrategy across the processes; the default strategy stays one replica."""
    seen = {}
    strategy = distribute.TPUStrategy(distribute.TPUClusterResolver(tpu=""))
    seen["num_replicas_in_sync"] = strategy.num_replicas_in_sync
    seen["num_hosts"] = strategy.extended.num_hosts
    seen["repr"] = repr(strategy)
    options = distribute.InputOptions(experimental_fetch_to_device=False)
    seen["elements"] = [
        encode(element) for element in strategy.experimental_distribute_dataset(global_batches(), options)
    ]
    contexts = []

    def dataset_fn(context):
        try:
            context.get_per_replica_batch_size(6 * context.num_replicas_in_sync + 1)
        except ValueError as error:
            contexts.append(str(error))
        batch_size = context.get_per_replica_batch_size(6 * context.num_replicas_in_sync)
        contexts.append(
            [context.num_input_pipelines, context.input_pipeline_id, context.num_replicas_in_sync, batch_size]
        )
        return [np.full(batch_size, context.input_pipeline_id)]

    seen["from_function"] = [encode(element) for element in strategy.distribute_datasets_from_function(dataset_fn)]
    seen["input_context"] = contexts
    per_replica = np.full((rank + 1, 2), rank + 1, np.float32)
    for op in ("SUM", "MEAN"):
        seen[f"reduce_{op}_None"] = attempt(lambda op=op: strategy.reduce(op, np.float32(rank + 1), axis=None))
        seen[f"reduce_{op}_0"] = attempt(lambda op=op: strategy.reduce(op, per_replica, axis=0))
    seen["reduce_enum"] = attempt(lambda: strategy.reduce(distribute.ReduceOp.SUM, {"v": rank + 1}, axis=None))
    seen["gather"] = attempt(lambda: strategy.gather(per_replica, axis=0))

    def step(x):
        context = distribute.get_replica_context()
        return {
            "x": x,
            "replica_id_in_sync_group": context.replica_id_in_sync_group,
            "num_replicas_in_sync": context.num_replicas_in_sync,
            "cross_replica": distribute.in_cross_replica_context(),
            "all_reduce_sum": context.all_reduce("SUM", np.float32(rank)),
            "all_reduce_mean": context.all_reduce(distribute.ReduceOp.MEAN, np.float32(rank)),
            "all_gather": context.all_gather(np.array([rank]), axis=0),
        }

    with strategy.scope():
        seen["run"] = attempt(lambda: strategy.run(step, args=(rank,)))
        seen["replica_context_in_scope"] = repr(distribute.get_replica_context())
        seen["local_results"] = attempt(lambda: strategy.experimental_local_results(rank))
    seen["values_from_function"] = strategy.experimental_distribute_values_from_function(
        lambda context: [context.replica_id_in_sync_group, context.num_replicas_in_sync]
    )
    default = distribute.get_strategy()
    context = distribute.get_replica_context()
    seen["default"] = {
        "name": type(default).__name__,
        "num_replicas_in_sync": default.num_replicas_in_sync,
        "rows": [len(labels) for _, labels in default.experimental_distribute_dataset(global_batches())],
        "reduce": attempt(lambda: default.reduce("SUM", np.float32(rank + 1), axis=None)),
        "replica_context": [context.replica_id_in_sync_group, context.num_replicas_in_sync],
    }
    return seen


def main(directory):
    rank = replicas.replica_id()
    out = {
        "rank": rank,
        "num_replicas": replicas.num_replicas(),
        "is_chief": replicas.is_chief(),
        "world": type(replicas.world()).__name__,
        "collectives": collectives(rank, directory),
        "strategies": strategies(rank),
    }
    Path(directory, f"rank{rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
