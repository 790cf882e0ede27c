"""The property of issue 18: W ranks under mpiexec give the bits of one process running the global batch.

For random specs (several tables, shared tables, pooled / weighted /
sequence features, every optimizer with its options, div / mod, 1-2 shards
per rank, pipelining, a gradient multiplier), random global batches split
unevenly over the ranks, and 1-3 steps: the activations of every rank's
slice, and the tables and slots after each step (at the end only with
pipelining: reading a table flushes the deferred update), equal those of
`Engine(spec, kernels="numpy")` as float32 bit patterns.
"""

import json

import numpy as np
from hypothesis import HealthCheck, given, settings

from tpu_embedding_shim.engine import Engine

from . import cases
from .launch import requires_mpi, run_worker
from .strategies import recipes

pytestmark = requires_mpi

# One mpiexec per example (0.5-1 s on 2 cores, 2-3 s when the machine is busy): a minute or two for the
# property. MPICH busy-polls, so W <= 3 here.


def assert_same_bits(got, want, key):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (key, got.shape, want.shape, got.dtype, want.dtype)
    if want.dtype == np.float32:
        got, want = got.view(np.uint32), want.view(np.uint32)
    np.testing.assert_array_equal(got, want, err_msg=key)


def check_case(recipe, world_size):
    """Runs `recipe` on one process and on `world_size` ranks; every recorded array must be the same bits,
    and each failing call must fail on every rank: the rank with the bad input with one process's error,
    the others with PeerFailedError naming it."""
    spec = cases.build_spec(recipe, world_size)
    want, want_errors = cases.run(Engine(spec, seed=recipe["seed"], kernels="numpy"), recipe, spec)
    got = run_worker(recipe, world_size)
    errors = json.loads(str(got["errors"]))
    assert sorted(set(got) - {"errors"}) == sorted(want)
    for key, value in want.items():
        assert_same_bits(got[key], value, key)
    for k, (fault, one_process) in enumerate(zip(recipe["faults"], want_errors)):
        assert one_process != "no error", fault
        for rank, rank_errors in enumerate(errors):
            if rank == fault["rank"] or fault["kind"] == "stale_result":
                assert rank_errors[k].split(":")[0] == one_process.split(":")[0], (fault, rank_errors[k])
            else:
                assert rank_errors[k].startswith(f"PeerFailedError: Rank {fault['rank']} failed"), rank_errors[k]
    return errors


SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}


@given(recipe=recipes(2))
@settings(max_examples=40, **SETTINGS)
def test_two_ranks_give_the_bits_of_one_process(recipe):
    check_case(recipe, 2)


@given(recipe=recipes(3))
@settings(max_examples=25, **SETTINGS)
def test_three_ranks_give_the_bits_of_one_process(recipe):
    check_case(recipe, 3)
