"""`python -m benchmarks distributed`: the step-time model's arithmetic, the counting communicator, and a smoke run
under mpiexec where mpi4py is installed. No timing is asserted."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import distributed
from benchmarks.distributed_model import (
    Network,
    Traffic,
    latency_at,
    loops_at,
    remote_fraction,
    remote_owners,
    step_time,
    traffic_at,
)
from benchmarks.distributed_worker import CountingCommunicator, SegmentCounter, rank_slice, segment_call_seconds
from benchmarks.run import _root
from benchmarks.variants import VARIANTS, quick
from benchmarks.workload import engine_spec, make_batches
from tpu_embedding_shim.engine import SingleProcess

TRAFFIC = Traffic(ranks=2, header=16.0, ids=80_000.0, values=1_300_000.0, alltoallv=6, small=3, bag=(20, 20))
NET = Network("10 Gb/s", bandwidth=1.25e9, latency=20e-6)
hosts = st.integers(2, 4096)


def test_remote_fraction_is_the_share_of_entries_another_rank_owns():
    assert [remote_fraction(n) for n in (1, 2, 4)] == [0.0, 0.5, 0.75]


@pytest.mark.parametrize("n, bag", [(2, (20, 20)), (8, (20, 20)), (64, (1, 40)), (3, (1, 1))])
def test_remote_owners_matches_a_simulation(n, bag):
    rng = np.random.default_rng(0)
    lengths = rng.integers(bag[0], bag[1] + 1, 20_000)
    counted = [len(set(rng.integers(0, n, length).tolist()) - {0}) for length in lengths]  # this rank is 0
    assert remote_owners(n, bag) == pytest.approx(np.mean(counted), rel=0.03)


@given(hosts)
def test_one_id_per_example_pools_nothing_on_the_owner(n):
    assert remote_owners(n, (1, 1)) == pytest.approx(remote_fraction(n))
    owner = Traffic(**{**TRAFFIC.__dict__, "bag": (1, 1), "values": 0.0, "pair_values": TRAFFIC.values})
    exact = Traffic(**{**TRAFFIC.__dict__, "bag": (1, 1)})
    assert traffic_at(owner, n) == pytest.approx(traffic_at(exact, n))


def test_the_traffic_at_the_measured_n_is_the_measured_traffic():
    assert traffic_at(TRAFFIC, 2) == 16 + 80_000 + 1_300_000
    assert traffic_at(TRAFFIC, 1) == 0.0
    # Exact pooling: everything but the headers scales with (N - 1) / N, so it at most doubles from N = 2.
    assert traffic_at(TRAFFIC, 4) == pytest.approx(16 * 3 + (80_000 + 1_300_000) * 1.5)
    owner = Traffic(**{**TRAFFIC.__dict__, "values": 300_000.0, "pair_values": 1_000_000.0})
    # Rows per example and remote owner (gradients, partial sums) grow towards one per id.
    ratio = remote_owners(256, (20, 20)) / remote_owners(2, (20, 20))
    assert traffic_at(owner, 256) == pytest.approx(16 * 255 + 380_000 * 255 / 128 + 1_000_000 * ratio)


@given(hosts)
def test_latency_is_pairwise_all_to_alls_and_recursive_doubling_reductions(n):
    net = Network("x", bandwidth=1e9, latency=10e-6, reduce_latency=3e-6)
    assert latency_at(TRAFFIC, n, net) == pytest.approx(6 * (n - 1) * 10e-6 + 3 * math.ceil(math.log2(n)) * 3e-6)
    assert latency_at(TRAFFIC, 1, net) == 0.0


@given(hosts, st.floats(1e-4, 1.0))
def test_a_step_is_compute_plus_latency_plus_bytes_over_bandwidth(n, compute):
    fast = Network("100 Gb/s", bandwidth=12.5e9, latency=20e-6)
    assert step_time(compute, TRAFFIC, n, NET) == pytest.approx(
        compute + latency_at(TRAFFIC, n, NET) + traffic_at(TRAFFIC, n) / 1.25e9
    )
    assert compute < step_time(compute, TRAFFIC, n, fast) < step_time(compute, TRAFFIC, n, NET)
    assert step_time(compute, TRAFFIC, n, NET) < step_time(compute, TRAFFIC, n + 1, NET)


@given(hosts)
def test_the_per_segment_loops_grow_with_the_number_of_ranks(n):
    looping = Traffic(**{**TRAFFIC.__dict__, "segment_calls": 40.0})
    assert loops_at(looping, 2, 1e-6) == 0.0  # measured at N = 2: already in the compute
    assert loops_at(looping, n, 1e-6) == pytest.approx(40 * (n / 2 - 1) * 1e-6)
    assert step_time(0.01, looping, n, NET, 1e-6) == pytest.approx(
        step_time(0.01, TRAFFIC, n, NET) + loops_at(looping, n, 1e-6)
    )


def test_the_engine_makes_no_per_segment_calls_and_the_counter_restores_the_helpers():
    from tpu_embedding_shim.engine import DistributedEngine
    from tpu_embedding_shim.engine.distributed import exchange

    before = exchange.Segments.block
    w = dataclasses.replace(VARIANTS["criteo26"], vocab=(50, 60, 70), batch=8, dim=4)
    engine = DistributedEngine(engine_spec(w), SingleProcess(), seed=0)
    features, weights, grads = rank_slice(make_batches(w, 1)[0], 0, 1)
    with SegmentCounter() as counter:
        engine.apply_gradients(engine.forward(features, weights or None), grads)
    assert counter.calls == 0  # the exchange indexes a feature's segments over every rank at once
    with SegmentCounter() as counter:
        exchange.Segments(np.ones((1, 3), np.int64), np.ones(3, np.int64)).span(0, 1)
    assert counter.calls == 1  # it counts the helpers when they are called
    assert exchange.Segments.block is before
    assert segment_call_seconds(repeats=1) > 0


class _TwoRanks:
    """Rank 0 of a pretend world of two: returns what a peer with the same counts would send."""

    rank, size = 0, 2

    def alltoallv(self, send, send_counts, recv_counts):
        return np.zeros(int(np.sum(recv_counts)), np.asarray(send).dtype)

    def allreduce(self, values, op):
        return np.asarray(values, np.int64)

    def allgather(self, values):
        return np.stack([values, values])

    def allgather_object(self, obj):
        return [obj, obj]

    def bcast_object(self, obj, root=0):
        return obj

    def barrier(self):
        pass


def test_the_counter_counts_what_goes_to_other_ranks_by_what_it_carries():
    comm = CountingCommunicator(_TwoRanks(), header=3)
    comm.alltoallv(np.zeros(6, np.int64), [3, 3], [3, 3])  # a count exchange: 3 per rank
    comm.alltoallv(np.zeros(7, np.int64), [2, 5], [4, 1])  # row indices: 5 out, 1 in
    comm.alltoallv(np.zeros(10, np.float32), [6, 4], [2, 8])  # rows: 4 out, 8 in
    comm.allreduce(np.zeros(3, np.int64), "min")
    assert comm.sent == {"alltoallv header": 24, "alltoallv int": 40, "alltoallv float": 16, "allreduce": 24}
    assert comm.received == {"alltoallv header": 24, "alltoallv int": 8, "alltoallv float": 32, "allreduce": 24}
    assert comm.calls == {"alltoallv header": 1, "alltoallv int": 1, "alltoallv float": 1, "allreduce": 1}
    comm.reset()
    assert comm.sent == {} and comm.seconds == 0.0


def test_one_process_moves_nothing_and_the_engine_takes_the_counter():
    from tpu_embedding_shim.engine import DistributedEngine

    w = dataclasses.replace(VARIANTS["main-uniform"], vocab=(300,), batch=8, dim=4)
    comm = CountingCommunicator(SingleProcess(), header=1)
    engine = DistributedEngine(engine_spec(w), comm, seed=0)
    comm.reset()
    features, weights, grads = rank_slice(make_batches(w, 1)[0], 0, 1)
    engine.apply_gradients(engine.forward(features, weights or None), grads)
    assert {"alltoallv header", "alltoallv int", "alltoallv float", "allreduce"} <= set(comm.calls)
    assert sum(comm.sent.values()) == sum(comm.received.values()) == 0


def test_rank_slices_split_the_global_batch_in_order():
    step = make_batches(quick(VARIANTS["bags-1-40"]), 1)[0]
    parts = [rank_slice(step, r, 3) for r in range(3)]
    values = np.concatenate([p[0]["f0"].values for p in parts])
    assert np.array_equal(values, step[0].values)
    assert sum(p[2]["f0"].shape[0] for p in parts) == step[0].grad.shape[0]


def test_without_mpi4py_it_says_how_to_install_and_exits_2(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mpi4py" else real(name, *a))
    assert distributed.main(["--quick"]) == 2
    assert "pip install mpi4py==4.1.2 mpich==5.0.2 threadpoolctl" in capsys.readouterr().err


@pytest.mark.skipif(distributed.missing() is not None, reason=str(distributed.missing()))
def test_the_quick_run_reports_both_world_sizes_and_the_model():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "distributed", "--quick", "--rounds", "1"],
        capture_output=True,
        text=True,
        cwd=_root(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    for line in ("| main, exact | 1 |", "| main, exact | 2 |", "| criteo26, exact | 2 |", "| main, exact | 256 |"):
        assert line in proc.stdout
    assert "predicted from the N = 1 compute" in proc.stdout
