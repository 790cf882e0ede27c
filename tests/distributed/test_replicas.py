"""replicas.py and the TPUStrategy stand-in under `mpiexec -n 2` and `-n 3`: one job per world size runs every
check (replicas_program.py); each test reads what the ranks saw.

The strategy's numbers are TensorFlow's: `tf.distribute.MirroredStrategy` over 2 and 3 logical CPUs, given the
same per-replica values, reduces and gathers to the same values (checked with the oracle; a TPUStrategy needs a
TPU). Where the split of a global batch differs from TensorFlow's, docs/distributed.md says so.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tpu_embedding_shim.api.replicas import replica_rows
from tpu_embedding_shim.api.tensors import RaggedTensor, SparseTensor

from .launch import HERE, mpirun, requires_mpi
from .replicas_program import global_batches, summands

pytestmark = requires_mpi

DISAGREE = "ValueError: Every rank must make the same collective call at the same time, with the same arguments"


@pytest.fixture(scope="module", params=[2, 3], ids=lambda size: f"{size}ranks")
def job(request, tmp_path_factory):
    """(world size, each rank's record by rank, the chief's file's text) of one run of replicas_program.py."""
    size = request.param
    directory = tmp_path_factory.mktemp(f"replicas{size}")
    run = mpirun(size, HERE / "replicas_program.py", directory, timeout=60, env={"MPIEXEC_TIMEOUT": "60"})
    assert run.returncode == 0, run.stderr
    records = {record["rank"]: record for record in map(json.loads, map(Path.read_text, directory.glob("rank*.json")))}
    assert sorted(records) == list(range(size))
    return size, records, Path(directory, "chief.txt").read_text()


def decode(value):
    """The inverse of replicas_program.encode."""
    if "error" in value:
        raise AssertionError(f"the call raised: {value['error']}")
    kind = value.get("@")
    if kind == "array":
        return np.frombuffer(bytes.fromhex(value["bits"]), np.dtype(value["dtype"])).reshape(value["shape"])
    if kind == "tuple":
        return tuple(decode(item) for item in value["items"])
    if kind == "sparse":
        return SparseTensor(*value["parts"])
    if kind == "ragged":
        rows = value["rows"]
        return RaggedTensor.from_row_lengths([i for row in rows for i in row], [len(row) for row in rows])
    if kind == "float":
        return float.fromhex(value["value"])
    if kind is not None:
        return value["value"]
    return {key: decode(item) for key, item in value.items()}


def assert_same_bits(got, want):
    """Equal nests: arrays with the same dtype, shape and bits; Python numbers of the same type and value."""
    if isinstance(want, dict):
        assert sorted(got) == sorted(want)
        for key in want:
            assert_same_bits(got[key], want[key])
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for item, expected in zip(got, want):
            assert_same_bits(item, expected)
    elif isinstance(want, (int, float)):
        assert type(got) is type(want) and got == want
    else:
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def running_sum(values):
    """values[0] + values[1] + ... in that order, leaf by leaf (dtypes kept)."""
    total = values[0]
    for value in values[1:]:
        if isinstance(total, dict):
            total = {key: running_sum([total[key], value[key]]) for key in total}
        elif isinstance(total, tuple):
            total = tuple(running_sum([a, b]) for a, b in zip(total, value))
        else:
            total = total + value
    return total


def seen(records, group, key):
    return {rank: record[group][key] for rank, record in records.items()}


def test_every_process_is_one_replica(job):
    size, records, _ = job
    for rank, record in records.items():
        assert record["world"] == "MPICommunicator" and record["num_replicas"] == size
        assert record["is_chief"] == (rank == 0)


def test_cross_replica_sum_is_the_rank_order_running_sum_with_the_same_bits_on_every_rank(job):
    size, records, _ = job
    want = running_sum([summands(rank) for rank in range(size)])
    for got in seen(records, "collectives", "sum").values():
        assert_same_bits(decode(got), want)
    if size == 3:  # the test data tells the orders apart: another order gives other bits
        first = [summands(rank)["w"][:1] for rank in (0, 2, 1)]
        assert running_sum(first).tobytes() != want["w"][:1].tobytes()


def test_cross_replica_mean_divides_the_sum_keeping_float_dtypes(job):
    size, records, _ = job
    total = running_sum([summands(rank) for rank in range(size)])
    for got in map(decode, seen(records, "collectives", "mean").values()):
        assert_same_bits(got["w"], (total["w"] / size).astype(np.float32))
        assert_same_bits(got["h"][0], (total["h"][0] / size).astype(np.float16))
        assert_same_bits(got["i"], total["i"] / size)  # int32 -> float64
        assert got["k"] == total["k"] / size and isinstance(got["k"], float)
        assert got["n"] == total["n"] / size


@pytest.mark.parametrize("check", ["sum_other_shape", "sum_other_keys", "sum_other_leaves", "sum_other_dtype"])
def test_replicas_with_other_structures_or_shapes_fail_on_every_rank(job, check):
    size, records, _ = job
    for got in seen(records, "collectives", check).values():
        assert got["error"].startswith(DISAGREE)
    # nothing hung and the ranks stayed in step: the next sum works
    for got in seen(records, "collectives", "sum_still_in_step").values():
        assert_same_bits(decode(got), np.float32(size * (size + 1) / 2))


def test_a_bad_leaf_on_one_rank_fails_every_rank(job):
    _, records, _ = job
    for rank, got in seen(records, "collectives", "sum_object_on_1").items():
        if rank == 1:
            assert got == {"error": "TypeError: cross_replica_sum takes a nest of numeric arrays and numbers."}
        else:
            assert got["rank"] == 1 and got["error"].startswith("PeerFailedError: Rank 1 failed this call")


def test_all_gather_joins_sizes_that_differ_along_the_axis_in_replica_order(job):
    size, records, _ = job
    want_x = np.concatenate([np.full((rank + 1, 2), rank, np.float32) for rank in range(size)])
    want_y = np.concatenate([np.arange(rank) for rank in range(size)])
    want_columns = np.concatenate([np.full((2, rank + 1), rank) for rank in range(size)], axis=1)
    for rank in range(size):
        assert_same_bits(decode(records[rank]["collectives"]["gather_axis0"]), {"x": want_x, "y": (want_y,)})
        assert_same_bits(decode(records[rank]["collectives"]["gather_axis1"]), want_columns)


def test_all_gather_with_other_widths_keys_or_dtypes_fails_on_every_rank(job):
    size, records, _ = job
    others = list(range(1, size))
    for got in seen(records, "collectives", "gather_other_width").values():
        assert got["error"].startswith("ValueError: all the input array dimensions except for the concatenation axis")
    for check in ("gather_other_keys", "gather_other_dtype"):
        for got in seen(records, "collectives", check).values():
            assert got["error"].startswith(
                f"ValueError: all_gather needs the same structure and dtypes on every replica. Replicas {others} "
                "differ from replica 0"
            )


def test_on_chief_runs_once_and_its_failure_fails_every_rank(job):
    _, records, chief_file = job
    assert chief_file == "written by replica 0\n"
    for rank, record in records.items():
        got = record["collectives"]
        assert got["on_chief_ran_here"] == ([0, 0] if rank == 0 else [])
        assert Path(decode(got["on_chief"])).read_text() == chief_file  # the chief's result, on every rank
        if rank == 0:
            assert got["on_chief_failing"] == {"error": "OSError: disk full"}
        else:
            assert got["on_chief_failing"]["rank"] == 0
            assert got["on_chief_failing"]["error"] == (
                "PeerFailedError: Rank 0 failed this call on its input (OSError: disk full); "
                "nothing was changed on any rank."
            )


def test_replica_slice_takes_this_replicas_rows_by_default(job):
    size, records, _ = job
    for rank, got in seen(records, "collectives", "slice").items():
        assert decode(got).tolist() == list(range(*replica_rows(5, rank, size)))


def test_tpu_strategy_has_one_replica_per_process(job):
    size, records, _ = job
    for got in (record["strategies"] for record in records.values()):
        assert got["num_replicas_in_sync"] == size and got["num_hosts"] == size
        assert got["repr"] == f"<TPUStrategy: in-process CPU emulation, {size} replicas (one per process), no TPU>"


def rows_of(batch):
    """A global or per-replica batch of global_batches() as plain rows, leaf by leaf."""
    features, labels = batch
    sparse = features["sparse"]
    return {
        "ids": features["ids"],
        "sparse": [sparse.values[sparse.indices[:, 0] == row].tolist() for row in range(sparse.shape[0])],
        "sparse_width": sparse.shape[1],
        "ragged": features["ragged"].to_list(),
        "dense": features["dense"].tolist(),
        "missing": features["missing"],
        "labels": labels.tolist(),
    }


def test_experimental_distribute_dataset_gives_each_rank_its_rows_of_every_global_batch(job):
    size, records, _ = job
    batches = list(global_batches())
    per_rank = {rank: seen["elements"] for rank, seen in seen_strategies(records).items()}
    for step, batch in enumerate(batches):
        want = rows_of(batch)
        parts = [rows_of(decode(per_rank[rank][step])) for rank in range(size)]
        for rank, part in enumerate(parts):
            start, stop = replica_rows(len(want["labels"]), rank, size)
            assert part["labels"] == want["labels"][start:stop]
            assert part["sparse_width"] == want["sparse_width"] and part["missing"] is None
        for leaf in ("ids", "sparse", "ragged", "dense", "labels"):
            assert [row for part in parts for row in part[leaf]] == want[leaf], leaf
    assert all(len(elements) == len(batches) for elements in per_rank.values())


def seen_strategies(records):
    return {rank: record["strategies"] for rank, record in records.items()}


def test_distribute_datasets_from_function_gives_one_input_pipeline_per_replica(job):
    size, records, _ = job
    for rank, got in seen_strategies(records).items():
        message = f"The `global_batch_size` {6 * size + 1} is not divisible by `num_replicas_in_sync` {size}"
        assert got["input_context"] == [message, [size, rank, size, 6]]
        [element] = got["from_function"]
        assert decode(element).tolist() == [rank] * 6  # a per-replica batch: not sliced again


def test_reduce_and_gather_across_the_replicas_as_tensorflow(job):
    """Replica r holds the scalar r+1 and the rows np.full((r+1, 2), r+1)."""
    size, records, _ = job
    ranks = np.arange(1, size + 1)
    column = float(np.sum(ranks**2))  # axis=0 sums every replica's rows
    rows = np.concatenate([np.full((r, 2), r, np.float32) for r in ranks])
    for got in seen_strategies(records).values():
        assert_same_bits(decode(got["reduce_SUM_None"]), np.float32(ranks.sum()))
        assert_same_bits(decode(got["reduce_MEAN_None"]), np.float32(ranks.mean()))
        assert_same_bits(decode(got["reduce_SUM_0"]), np.full(2, column, np.float32))
        assert_same_bits(decode(got["reduce_MEAN_0"]), np.full(2, column / ranks.sum(), np.float32))  # over all rows
        assert decode(got["reduce_enum"]) == {"v": int(ranks.sum())}
        assert_same_bits(decode(got["gather"]), rows)


def test_replica_context_inside_run(job):
    size, records, _ = job
    for rank, got in seen_strategies(records).items():
        ran = decode(got["run"])
        assert ran["x"] == rank and ran["replica_id_in_sync_group"] == rank and ran["num_replicas_in_sync"] == size
        assert ran["cross_replica"] is False
        assert_same_bits(ran["all_reduce_sum"], np.float32(size * (size - 1) / 2))
        assert_same_bits(ran["all_reduce_mean"], np.float32((size - 1) / 2))
        assert ran["all_gather"].tolist() == list(range(size))
        assert got["replica_context_in_scope"] == "None"  # in the scope, outside run: cross-replica context
        assert decode(got["local_results"]) == (rank,)
        assert got["values_from_function"] == [rank, size]


def test_the_default_strategy_stays_one_replica(job):
    _, records, _ = job
    for rank, got in seen_strategies(records).items():
        default = got["default"]
        assert default["name"] == "_DefaultStrategy" and default["num_replicas_in_sync"] == 1
        assert default["rows"] == [len(labels) for _, labels in global_batches()]  # the whole global batches
        assert_same_bits(decode(default["reduce"]), np.float32(rank + 1))  # this process's value alone
        assert default["replica_context"] == [0, 1]
