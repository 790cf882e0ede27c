"""The owner-pooled mode (`DistributedEngine(pooling="owner")`): one process's numbers to float tolerance,
less traffic, and the mode checked and agreed like every build option.

The tolerance, and why. An owner-pooled activation adds the same float32
products `c_k * T[i_k]` as one process (the same coefficients, the same
rows), grouped by owner: another parenthesization of the same n terms. Any
order of a float32 sum of n terms is within `gamma(n - 1) * sum |x_k|` of
the exact sum (`gamma(m) = m u / (1 - m u)`, u = 2**-24), so two orders
differ by at most twice that. Each example is checked against that bound,
with `|x_k| <= |c_k| * M` and M the largest |value| of the table at any
step. An example with one entry (or all its entries on one owner) gets
the bits. The backward moves and multiplies the same numbers as one
process, so tables and slots are the same bits, as are sequence
activations (they take the exact path).
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.engine.distributed import DistributedEngine, SingleProcess
from tpu_embedding_shim.engine.lookup import pooled_coefficients
from tpu_embedding_shim.engine.ragged import to_ragged
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec

from . import cases
from .launch import requires_mpi, run_worker
from .strategies import recipes
from .test_equivalence import assert_same_bits

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
U = 2.0**-24  # float32's unit roundoff


def largest_values(recipe, spec, world_size):
    """Table -> the largest |value| it holds at any step. The tables are the same with and without
    pipelining (which only delays writes), so a run without it, which records them after every step,
    gives every table a lookup can see."""
    plain = {**recipe, "pipelining": False, "faults": [], "pooling": "exact"}
    plain_spec = cases.build_spec(plain, world_size)
    engine = Engine(plain_spec, seed=recipe["seed"], kernels="numpy")
    start = cases.flatten_state("initial", engine.state())
    record, _ = cases.run(engine, plain, plain_spec)
    arrays = {**start, **record}
    return {
        t.name: max(float(np.abs(v).max(initial=0)) for k, v in arrays.items() if k.endswith(f"/{t.name}/embedding"))
        for t in spec.tables
    }


def tolerances(recipe, spec, world_size):
    """'step{i}/{feature}' -> float64 [B, 1]: the largest difference an activation of that lookup may show."""
    largest = largest_values(recipe, spec, world_size)
    out = {}
    for i, (features, _) in enumerate(cases.global_steps(recipe, spec)):
        for feature in spec.features:
            if feature.is_sequence:
                continue
            weights = features[feature.weight_key] if feature.weight_key else None
            batch = to_ragged(features[feature.name], weights, feature=feature)
            combiner = spec.table(feature.table).combiner
            example, _, coef, _ = pooled_coefficients(batch, combiner, safe=feature.safe_lookup)
            terms = np.bincount(example, minlength=batch.batch_size).astype(np.float64)
            size = np.bincount(example, np.abs(coef.astype(np.float32)), minlength=batch.batch_size)
            m = np.maximum(terms - 1, 0) * U
            gamma = m / (1 - m)
            out[f"step{i}/{feature.name}"] = (2 * gamma * size * largest[feature.table] * (1 + 2 * U))[:, None]
    return out


def check_owner_case(recipe, world_size):
    """Runs `recipe` on one process (exact) and on `world_size` ranks in the owner mode: pooled
    activations within the bound, everything else the same bits, each failing call failing everywhere
    as in the exact mode."""
    spec = cases.build_spec(recipe, world_size)
    want, want_errors = cases.run(Engine(spec, seed=recipe["seed"], kernels="numpy"), recipe, spec)
    got = run_worker(recipe, world_size)
    errors = json.loads(str(got.pop("errors")))
    assert sorted(got) == sorted(want)
    bounds = tolerances(recipe, spec, world_size)
    pooled = {f.name for f in spec.features if not f.is_sequence}
    for key, value in want.items():
        step, kind, name = (key.split("/") + ["", ""])[:3]
        if kind in ("activation", "inference") and name in pooled:
            difference = np.abs(got[key].astype(np.float64) - value.astype(np.float64))
            bound = bounds[f"{step}/{name}"]
            assert (difference <= bound).all(), (key, difference.max(), bound.max())
        else:
            assert_same_bits(got[key], value, key)
    for k, (fault, one_process) in enumerate(zip(recipe["faults"], want_errors)):
        for rank, rank_errors in enumerate(errors):
            if rank == fault["rank"] or fault["kind"] == "stale_result":
                assert rank_errors[k].split(":")[0] == one_process.split(":")[0], (fault, rank_errors[k])
            else:
                assert rank_errors[k].startswith(f"PeerFailedError: Rank {fault['rank']} failed"), rank_errors[k]


@requires_mpi
@given(recipe=recipes(2, pooling="owner"))
@settings(max_examples=20, **SETTINGS)
def test_two_ranks_owner_pooled_equal_one_process_to_float_tolerance(recipe):
    check_owner_case(recipe, 2)


@requires_mpi
@given(recipe=recipes(3, pooling="owner"))
@settings(max_examples=12, **SETTINGS)
def test_three_ranks_owner_pooled_equal_one_process_to_float_tolerance(recipe):
    check_owner_case(recipe, 3)


@given(recipe=recipes(1, pooling="owner"))
@settings(max_examples=30, **SETTINGS)
def test_one_rank_owner_pooled_gives_the_bits(recipe):
    """With one owner per example, a partial sum is the whole running sum: the bits of one process."""
    spec = cases.build_spec(recipe, 1)
    want, want_errors = cases.run(Engine(spec, seed=recipe["seed"], kernels="numpy"), recipe, spec)
    engine = DistributedEngine(spec, SingleProcess(), seed=recipe["seed"], pooling="owner")
    got, errors = cases.run(engine, recipe, spec, rank=0)
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert_same_bits(got[key], value, key)
    assert errors == want_errors


# Bytes moved -------------------------------------------------------------------------------------------

LONG_BAGS = {
    "tables": [{"name": "items", "vocab": 500, "dim": 32, "combiner": "mean", "optimizer": None}],
    "features": [{"name": "clicked", "table": "items", "weighted": False, "sequence_length": 0, "safe": True}],
    "optimizer": {"kind": "adagrad", "learning_rate": 0.1, "initial_accumulator": 0.1},
    "strategy": "mod",
    "shards_per_rank": 1,
    "pipelining": False,
    "multiplier": False,
    "seed": 3,
    "data_seed": 5,
    "steps": 2,
    "batch_sizes": [6, 5],
    "max_ids": 40,
    "no_gradient": [],
    "faults": [],
    "count_bytes": True,
}


def expected_bytes(recipe, world_size):
    """(exact, owner): per mode, {'forward': int [W], 'backward': int [W]}, the bytes each rank sends the
    others in the all-to-alls of the steps (one table, one pooled feature, every entry kept):

    exact forward: its counts, 8 per distinct row it asks another rank for, 4 D per distinct row
      another rank asks it for; exact backward: its counts, 8 + 8 + 4 per entry on another rank
      (row, example, coefficient), 4 D per (example, other rank) (no counts for those: each owner expects
      one per run of its entries);
    owner forward: its counts, 8 + 8 + 4 per entry on another rank (row, example, coefficient), 4 D per
      (example of another rank, itself) pair; owner backward: 4 D per (example, other rank), no counts
      (the ranks agree on which gradients they send in `apply_gradients`'s allreduce).
    Also 'per entry': what an exact backward that sends one gradient row per entry (8 + 4 D) would send.
    """
    spec = cases.build_spec(recipe, world_size)
    dim, counts = spec.tables[0].dim, (world_size - 1) * 8  # one [W, 1] int64 count matrix
    bounds = cases.offsets(recipe)
    exact = {"forward": np.zeros(world_size, int), "backward": np.zeros(world_size, int)}
    owner = {"forward": np.zeros(world_size, int), "backward": np.zeros(world_size, int)}
    exact["per entry"] = np.zeros(world_size, int)
    for features, _ in cases.global_steps(recipe, spec):
        bags = features["clicked"]
        for rank in range(world_size):
            mine = bags[bounds[rank] : bounds[rank + 1]]
            ids = [i for bag in mine for i in bag]
            remote = [i for i in ids if i % world_size != rank]  # mod: id i lives on rank i % W
            exact["forward"][rank] += counts + 8 * len(set(remote))
            exact["per entry"][rank] += counts + (8 + 4 * dim) * len(remote)
            owner["forward"][rank] += counts + 20 * len(remote)
            pairs = {(b, i % world_size) for b, bag in enumerate(mine) for i in bag if i % world_size != rank}
            owner["backward"][rank] += 4 * dim * len(pairs)
            exact["backward"][rank] += counts + 20 * len(remote) + 4 * dim * len(pairs)
            for source in range(world_size):  # the rows or partial sums this rank answers
                if source != rank:
                    asked = bags[bounds[source] : bounds[source + 1]]
                    exact["forward"][rank] += 4 * dim * len({i for bag in asked for i in bag if i % world_size == rank})
                    owner["forward"][rank] += 4 * dim * sum(any(i % world_size == rank for i in bag) for bag in asked)
    return exact, owner


@requires_mpi
def test_owner_pooling_moves_fewer_bytes_on_long_bags():
    """Bags of up to 40 ids, D = 32, 2 ranks: every all-to-all byte as the formulas say, the owner
    mode moving less than half the exact mode's bytes forward, and both backwards (one gradient row per
    example and owner) less than a third of one gradient row per entry."""
    exact_job = run_worker(LONG_BAGS, 2)
    owner_job = run_worker({**LONG_BAGS, "pooling": "owner"}, 2)
    exact, owner = expected_bytes(LONG_BAGS, 2)
    for phase in ("forward", "backward"):
        assert exact_job[f"bytes/{phase}"].tolist() == exact[phase].tolist(), phase
        assert owner_job[f"bytes/{phase}"].tolist() == owner[phase].tolist(), phase
    assert owner["forward"].sum() * 2 < exact["forward"].sum()
    assert owner["backward"].sum() < exact["backward"].sum()
    assert exact["backward"].sum() * 3 < exact["per entry"].sum()
    assert_same_bits(owner_job["final/items/embedding"], exact_job["final/items/embedding"], "table")


@requires_mpi
def test_a_step_of_one_id_an_example_takes_the_exact_path():
    """Bags of at most one id on every rank: the owners pool nothing, the step moves the exact mode's bytes
    (each distinct row once forward, one gradient row per entry backward, no 20 bytes an entry) and
    gives its bits, activations included. With a rank whose bag has two ids, the owners pool again."""
    one_id = {**LONG_BAGS, "max_ids": 1, "steps": 3}
    exact_job = run_worker(one_id, 2)
    owner_job = run_worker({**one_id, "pooling": "owner"}, 2)
    for phase in ("forward", "backward"):
        assert owner_job[f"bytes/{phase}"].tolist() == exact_job[f"bytes/{phase}"].tolist(), phase
    assert str(owner_job["errors"]) == str(exact_job["errors"])
    arrays = [key for key in exact_job if not key.startswith("bytes/") and key != "errors"]
    assert any(key.startswith("step") for key in arrays), arrays
    assert sorted(owner_job) == sorted(exact_job)
    for key in arrays:
        assert_same_bits(owner_job[key], exact_job[key], key)
    two_ids = {**one_id, "max_ids": 2, "steps": 1}
    bags = next(iter(cases.global_steps(two_ids, cases.build_spec(two_ids, 2))))[0]["clicked"]
    assert max(len(bag) for bag in bags) == 2, bags  # some bag has two ids: the owners pool this step
    exact_bytes = run_worker(two_ids, 2)["bytes/forward"]
    assert run_worker({**two_ids, "pooling": "owner"}, 2)["bytes/forward"].tolist() == (
        expected_bytes(two_ids, 2)[1]["forward"].tolist()
    )
    assert exact_bytes.tolist() == expected_bytes(two_ids, 2)[0]["forward"].tolist()


# The mode as a build option ----------------------------------------------------------------------------


def small_spec():
    return EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=6, dim=2, combiner="mean"),),
        features=(FeatureSpec(name="f", table="t", num_buckets=6),),
        optimizer=SGDSpec(learning_rate=0.5),
    )


@pytest.mark.parametrize("pooling", ["sum", "", None, "OWNER", 1])
def test_a_bad_pooling_value_is_refused(pooling):
    with pytest.raises(ValueError, match=r"Argument `pooling` must be one of \['exact', 'owner'\]. Received: "):
        DistributedEngine(small_spec(), SingleProcess(), seed=0, pooling=pooling)


def test_describe_names_the_mode():
    lines = DistributedEngine(small_spec(), SingleProcess(), seed=0, pooling="owner").describe()
    assert any(line.startswith("  pooling: owner") for line in lines)
    assert "  pooling: exact (owners send rows; the bits of one process)." in DistributedEngine(small_spec()).describe()


def test_a_lookup_of_another_engine_is_refused():
    """The owners keep a lookup's coefficients: a result from another engine can't be applied."""
    engine = DistributedEngine(small_spec(), SingleProcess(), seed=0, pooling="owner")
    other = DistributedEngine(small_spec(), SingleProcess(), seed=0, pooling="owner")
    engine.forward({"f": [[3]]})  # the lookups of each engine are numbered 0, 1, ...
    other.forward({"f": [[1, 2]]})
    result = other.forward({"f": [[4]]})  # other's lookup 1: `engine` kept no lookup 1
    with pytest.raises(RuntimeError, match="must be a training lookup of this engine at this step"):
        engine.apply_gradients(result, {"f": np.ones((1, 2))})
    assert engine.global_step == 0


@requires_mpi
@pytest.mark.parametrize(
    "modes, want",
    [
        (
            ["exact", "owner"],
            ["ValueError: Every rank must build the same DistributedEngine: ranks [1] have other pooling than rank 0"]
            * 2,
        ),
        (
            ["exact", "bogus"],
            [
                "PeerFailedError: Rank 1 failed",
                "ValueError: Argument `pooling` must be one of ['exact', 'owner']. Received: 'bogus'.",
            ],
        ),
    ],
)
def test_ranks_with_different_modes_are_refused(modes, want):
    job = run_worker({**LONG_BAGS, "pooling": modes, "count_bytes": False}, 2)
    errors = json.loads(str(job["build_errors"]))
    assert [error[: len(start)] for error, start in zip(errors, want)] == want, errors
