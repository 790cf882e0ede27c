"""replicas.py in one process (no MPI): the split of a global batch over N replicas, and the collectives of a
world of one replica. The same calls across processes are in tests/distributed/test_replicas.py."""

import collections
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.api import replicas
from tpu_embedding_shim.api.replicas import (
    all_gather,
    cross_replica_mean,
    cross_replica_sum,
    on_chief,
    replica_rows,
    replica_slice,
    use_world,
)
from tpu_embedding_shim.api.tensors import RaggedTensor, SparseTensor
from tpu_embedding_shim.engine import SingleProcess

Pair = collections.namedtuple("Pair", ["weights", "bias"])


# replica_rows ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch_size, replicas_, rows",
    [
        (8, 2, [(0, 4), (4, 8)]),  # divisible: TensorFlow's split too
        (5, 2, [(0, 3), (3, 5)]),  # TensorFlow's experimental_distribute_dataset: 3 then 2
        (7, 3, [(0, 3), (3, 6), (6, 7)]),  # TensorFlow: 3, 3, 1 (measured with MirroredStrategy)
        (4, 3, [(0, 2), (2, 4), (4, 4)]),  # TensorFlow: 2, 2, 0
        (2, 3, [(0, 1), (1, 2), (2, 2)]),  # fewer rows than replicas: the last has none
        (0, 2, [(0, 0), (0, 0)]),
        (4, 1, [(0, 4)]),
    ],
)
def test_replica_rows(batch_size, replicas_, rows):
    assert [replica_rows(batch_size, replica, replicas_) for replica in range(replicas_)] == rows


@given(batch_size=st.integers(0, 500), count=st.integers(1, 40))
def test_every_replicas_rows_tile_the_batch_in_order(batch_size, count):
    rows = [replica_rows(batch_size, replica, count) for replica in range(count)]
    assert rows[0][0] == 0 and rows[-1][1] == batch_size
    assert all(stop == start for (_, stop), (start, _) in itertools.pairwise(rows))  # contiguous, in replica order
    sizes = [stop - start for start, stop in rows]
    per_replica = -(-batch_size // count)  # ceil: full runs first, then what is left, then none
    full, left = divmod(batch_size, per_replica) if per_replica else (0, 0)
    assert sizes == ([per_replica] * full + ([left] if left else []) + [0] * count)[:count]


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ((5, 2, 2), ValueError, r"Argument `replica` must be an int in \[0, 2\). Received: 2."),
        ((5, -1, 2), ValueError, r"Argument `replica` must be an int in \[0, 2\). Received: -1."),
        ((5, True, 2), ValueError, r"Argument `replica` must be an int in \[0, 2\). Received: True."),
        ((5, 0, 0), ValueError, "Argument `replicas` must be an int >= 1. Received: 0."),
        ((5, 0, 1.0), ValueError, "Argument `replicas` must be an int >= 1. Received: 1.0."),
        ((-1, 0, 2), ValueError, "Argument `batch_size` must be an int >= 0. Received: -1."),
        (("4", 0, 2), TypeError, "Argument `batch_size` must be an int >= 0. Received: '4'."),
    ],
)
def test_replica_rows_refuses_bad_arguments(arguments, error, message):
    with pytest.raises(error, match=message):
        replica_rows(*arguments)


# replica_slice -----------------------------------------------------------------------------------


def sparse_of(rows, width=3):
    """A SparseTensor whose row r holds the ids of rows[r], one per column."""
    indices = [[row, column] for row, ids in enumerate(rows) for column in range(len(ids))]
    return SparseTensor(indices, [i for ids in rows for i in ids], [len(rows), width])


def sparse_rows(tensor):
    """A SparseTensor's ids, row by row (in column order)."""
    order = np.lexsort((tensor.indices[:, 1], tensor.indices[:, 0]))
    rows_of = tensor.indices[order, 0]
    return [tensor.values[order][rows_of == row].tolist() for row in range(tensor.shape[0])]


def test_replica_slice_of_a_nest_of_every_leaf_type():
    rows = [[1], [2, 3], [], [4, 5, 6], [7]]
    features = {
        "ids": rows,
        "sparse": sparse_of(rows),
        "ragged": RaggedTensor.from_row_lengths([i for ids in rows for i in ids], [len(ids) for ids in rows]),
        "dense": np.arange(10).reshape(5, 2),
        "weights": None,
    }
    labels = np.arange(5.0)
    first = replica_slice((features, labels), replica=0, replicas=2)
    second = replica_slice((features, labels), replica=1, replicas=2)
    for part, ids, dense, label in [
        (first, rows[:3], [[0, 1], [2, 3], [4, 5]], [0, 1, 2]),
        (second, rows[3:], [[6, 7], [8, 9]], [3, 4]),
    ]:
        got, got_labels = part
        assert isinstance(part, tuple) and list(got) == list(features)  # the structure and key order are kept
        assert got["ids"] == ids
        assert sparse_rows(got["sparse"]) == ids and got["sparse"].shape == (len(ids), 3)
        assert got["ragged"].to_list() == ids
        assert got["dense"].tolist() == dense and got["weights"] is None
        assert got_labels.tolist() == label
    assert features["ids"] == rows and labels.tolist() == [0, 1, 2, 3, 4]  # the global batch is unchanged


def test_replica_slice_of_a_nest_of_nones_and_of_a_namedtuple():
    assert replica_slice({"a": None, "b": (None,)}, replica=1, replicas=3) == {"a": None, "b": (None,)}
    part = replica_slice(Pair(np.arange(4), [[1], [2], [3], [4]]), replica=1, replicas=2)
    assert isinstance(part, Pair) and part.weights.tolist() == [2, 3] and part.bias == [[3], [4]]


def test_one_replica_gets_the_global_batch_itself():
    batch = {"ids": [[1, 2]], "dense": np.ones((1, 2))}
    assert replica_slice(batch, replica=0, replicas=1) is batch
    assert replica_slice(batch) is batch  # this process: replica 0 of 1


@pytest.mark.parametrize(
    "batch, message",
    [
        (
            {"a": np.zeros(3), "b": [[1], [2]]},
            r"A global batch split over 2 replicas needs the same number of rows in every tensor. "
            r"Received tensors with \[2, 3\] rows.",
        ),
        (
            (np.zeros((3, 2)), sparse_of([[1], [2], [3], [4]])),
            r"Received tensors with \[3, 4\] rows.",
        ),
        ({"a": np.zeros(3), "step": 5}, r"A global batch can't be split over replicas: it holds a scalar \(5\)."),
        ({"a": np.array(2.0)}, r"it holds a scalar \(array\(2\.\)\)\."),  # a 0-d array
    ],
)
def test_replica_slice_refuses_a_batch_it_cannot_split(batch, message):
    with pytest.raises(ValueError, match=message):
        replica_slice(batch, replica=0, replicas=2)


def test_replica_slice_refuses_a_replica_outside_the_replicas():
    with pytest.raises(ValueError, match=r"Argument `replica` must be an int in \[0, 1\). Received: 1."):
        replica_slice([[1]], replica=1)  # this process: 1 replica
    with pytest.raises(ValueError, match="Argument `replicas` must be an int >= 1. Received: 0."):
        replica_slice([[1]], replica=0, replicas=0)


rows_strategy = st.lists(st.lists(st.integers(0, 99), max_size=3), max_size=12)


@settings(max_examples=80, deadline=None)
@given(rows=rows_strategy, count=st.integers(1, 5))
def test_joining_every_replicas_slice_gives_the_global_batch_back(rows, count):
    """For each leaf type: a list of rows, a SparseTensor, a RaggedTensor, a dense array, a tuple's labels."""
    lengths = [len(ids) for ids in rows]
    batch = (
        {
            "ids": rows,
            "sparse": sparse_of(rows),
            "ragged": RaggedTensor.from_row_lengths(np.array([i for ids in rows for i in ids], np.int64), lengths),
            "dense": np.arange(3 * len(rows)).reshape(len(rows), 3),
            "none": None,
        },
        np.array(lengths, np.float32),
    )
    parts = [replica_slice(batch, replica=replica, replicas=count) for replica in range(count)]
    features = [features for features, _ in parts]
    assert [row for part in features for row in part["ids"]] == rows
    assert [row for part in features for row in sparse_rows(part["sparse"])] == rows
    assert [row for part in features for row in part["ragged"].to_list()] == rows
    assert all(part["sparse"].shape[1] == 3 and part["none"] is None for part in features)
    dense = np.concatenate([part["dense"] for part in features])
    labels = np.concatenate([part for _, part in parts])
    assert dense.tolist() == batch[0]["dense"].tolist() and labels.tolist() == lengths
    spans = [replica_rows(len(rows), replica, count) for replica in range(count)]
    assert [len(part["dense"]) for part in features] == [stop - start for start, stop in spans]


# The collectives of one replica ------------------------------------------------------------------


def test_one_replica_is_this_process():
    assert replicas.num_replicas() == 1 and replicas.replica_id() == 0 and replicas.is_chief()
    assert isinstance(replicas.world(), SingleProcess)


def nest():
    return {
        "w": np.arange(4, dtype=np.float32).reshape(2, 2),
        "layers": [np.ones(2, np.float16), np.array([1, 2], np.int32)],  # a list of arrays is structure
        "pair": Pair(np.float64(0.5) * np.ones(3), 2.5),
        "step": 3,
        "scale": np.float64(2.0),
    }


def test_cross_replica_sum_of_one_replica_is_a_copy_of_the_nest():
    value = nest()
    got = cross_replica_sum(value)
    assert list(got) == list(value) and isinstance(got["layers"], list) and isinstance(got["pair"], Pair)
    assert got["w"].dtype == np.float32 and got["layers"][0].dtype == np.float16
    assert got["layers"][1].dtype == np.int32 and got["pair"].weights.dtype == np.float64
    assert type(got["step"]) is int and got["step"] == 3 and type(got["pair"].bias) is float
    for leaf, before in [
        (got["w"], value["w"]),
        (got["layers"][0], value["layers"][0]),
        (got["pair"].weights, value["pair"].weights),
    ]:
        assert np.array_equal(leaf, before) and not np.shares_memory(leaf, before)
    got["w"][0, 0] = 99
    assert value["w"][0, 0] == 0


def test_cross_replica_sum_refuses_what_is_not_numbers():
    with pytest.raises(TypeError, match="cross_replica_sum takes a nest of numeric arrays and numbers."):
        cross_replica_sum({"names": np.array(["a", object()], dtype=object)})


def test_cross_replica_mean_of_one_replica_keeps_float_dtypes():
    got = cross_replica_mean(nest())
    assert got["w"].dtype == np.float32 and got["layers"][0].dtype == np.float16
    assert got["layers"][1].dtype == np.float64 and got["layers"][1].tolist() == [1.0, 2.0]  # ints: float64
    assert type(got["step"]) is float and got["step"] == 3.0  # a Python number stays one
    assert type(got["pair"].bias) is float and isinstance(got["pair"], Pair)


def test_all_gather_of_one_replica_is_a_copy():
    value = {"rows": np.arange(6).reshape(3, 2), "pair": Pair(np.ones(1), np.zeros((2, 1)))}
    for axis in (0, 1):
        got = all_gather(value, axis=axis)
        assert isinstance(got["pair"], Pair) and got["rows"].tolist() == value["rows"].tolist()
        assert not np.shares_memory(got["rows"], value["rows"])


def test_on_chief_runs_the_action_once_here():
    calls = []
    assert on_chief(lambda: calls.append("write") or "model.ckpt-1", "write") == "model.ckpt-1"
    assert calls == ["write"]

    def fail():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):  # the action's own error
        on_chief(fail, "write")


def test_use_world_swaps_the_communicator_for_the_block():
    before = replicas.world()
    other = SingleProcess()
    with use_world(other) as inside:
        assert inside is other and replicas.world() is other
    assert replicas.world() is before
    with pytest.raises(RuntimeError, match="inside"), use_world(other):
        raise RuntimeError("inside")
    assert replicas.world() is before  # restored after an error too


def test_use_world_refuses_what_is_not_a_communicator():
    before = replicas.world()
    with pytest.raises(TypeError, match="Argument `comm` must be a Communicator. Received: str."), use_world("mpi"):
        pass
    assert replicas.world() is before
