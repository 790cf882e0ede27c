"""A world of one process (no MPI): `DistributedEngine` gives exactly `Engine`'s numbers and errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.engine.distributed import DistributedEngine, SingleProcess
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec

from . import cases
from .strategies import recipes
from .test_equivalence import assert_same_bits


@given(recipe=recipes(1))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_one_rank_gives_the_engines_bits_and_errors(recipe):
    check_one_rank(recipe, "auto")


@given(recipe=recipes(1))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_one_rank_on_the_numpy_kernels_gives_the_same_bits(recipe):
    check_one_rank(recipe, "numpy")


def check_one_rank(recipe, kernels):
    spec = cases.build_spec(recipe, 1)
    want, want_errors = cases.run(Engine(spec, seed=recipe["seed"], kernels="numpy"), recipe, spec)
    engine = DistributedEngine(spec, SingleProcess(), seed=recipe["seed"], kernels=kernels)
    got, errors = cases.run(engine, recipe, spec, rank=0)
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert_same_bits(got[key], value, key)
    assert errors == want_errors


def spec(**options):
    return EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=6, dim=2, combiner="sum"),),
        features=(FeatureSpec(name="f", table="t", num_buckets=6),),
        optimizer=SGDSpec(learning_rate=0.5),
        **options,
    )


def test_table_slots_state_and_load_state():
    engine = DistributedEngine(spec(num_shards=2, partition_strategy="mod"), seed=3)
    reference = Engine(spec(), seed=3, kernels="numpy")
    assert_same_bits(engine.table("t"), reference.table("t"), "t")
    assert engine.slots("t") == {}
    state = {"t": {"embedding": np.arange(12, dtype=np.float32).reshape(6, 2)}}
    engine.load_state(state, step=4)
    assert engine.global_step == 4
    assert engine.table("t").tolist() == state["t"]["embedding"].tolist()
    with pytest.raises(KeyError, match=r"Argument `name` must be one of the tables \['t'\]. Received: 'u'"):
        engine.table("u")
    with pytest.raises(ValueError, match=r"Table 't', 'embedding': shape \(5, 2\), expected \(6, 2\)"):
        engine.load_state({"t": {"embedding": np.zeros((5, 2), np.float32)}})
    with pytest.raises(ValueError, match="Argument `step` must be an int >= 0. Received: -1"):
        engine.load_state(state, step=-1)
    assert engine.global_step == 4 and engine.table("t").tolist() == state["t"]["embedding"].tolist()


def test_row_ids_local_state_and_load_rows():
    """One rank owns every id; `load_rows` takes its rows in `row_ids` order, checked before anything changes."""
    engine = DistributedEngine(spec(num_shards=2, partition_strategy="mod"), seed=3)
    assert engine.row_ids("t").tolist() == list(range(6))
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    engine.load_rows({"t": {"embedding": rows}}, step=5)
    assert engine.global_step == 5 and engine.table("t").tolist() == rows.tolist()
    assert engine.local_state()["t"]["embedding"] is rows  # a float32 C-contiguous array is taken, not copied
    with pytest.raises(ValueError, match=r"Table 't', 'embedding': shape \(5, 2\), expected \(6, 2\)"):
        engine.load_rows({"t": {"embedding": np.zeros((5, 2), np.float32)}}, step=1)
    with pytest.raises(ValueError, match=r"the state holds \['embedding', 'extra'\]"):
        engine.load_rows({"t": {"embedding": rows, "extra": rows}})
    with pytest.raises(ValueError, match="Argument `step` must be an int >= 0. Received: -1"):
        engine.load_rows({"t": {"embedding": np.zeros((6, 2))}}, step=-1)
    with pytest.raises(KeyError, match=r"Argument `name` must be one of the tables \['t'\]. Received: 'u'"):
        engine.row_ids("u")
    assert engine.global_step == 5 and engine.table("t").tolist() == rows.tolist()


def test_communicator_defaults_to_this_process():
    """Without an MPI launcher, `comm=None` is the one-process world; the seed is drawn when None."""
    engine = DistributedEngine(spec())
    assert isinstance(engine.comm, SingleProcess) and engine.world_size == 1
    assert engine.table("t").shape == (6, 2)


def test_bad_arguments():
    with pytest.raises(TypeError, match="DistributedEngine needs an EmbeddingSpec. Received: 'spec'"):
        DistributedEngine("spec", SingleProcess())
    with pytest.raises(TypeError, match="Argument `comm` must be a Communicator. Received: int"):
        DistributedEngine(spec(), 3)
    with pytest.raises(ValueError, match="Argument `seed` must be an int >= 0 or None. Received: -2"):
        DistributedEngine(spec(), SingleProcess(), seed=-2)
    engine = DistributedEngine(spec(), SingleProcess(), seed=0)
    with pytest.raises(TypeError, match="Argument `features` must be a dict"):
        engine.forward([[1]])
    result = engine.forward({"f": [[1]]}, training=False)
    with pytest.raises(RuntimeError, match="after an inference lookup"):
        engine.apply_gradients(result, {"f": np.ones((1, 2))})
    with pytest.raises(TypeError, match="must be the LookupResult returned by this engine's forward"):
        engine.apply_gradients(Engine(spec(), kernels="numpy").forward({"f": [[1]]}), {"f": np.ones((1, 2))})


def test_describe_says_what_each_rank_holds():
    lines = DistributedEngine(spec(pipeline_execution_with_tensor_core=True), SingleProcess(), seed=0).describe()
    assert lines[0].startswith("Distributed CPU embedding engine, rank 0 of 1 (SingleProcess()): 1 table(s)")
    assert "rows per rank [6] (this rank: 6)" in lines[1]
    assert any("pipeline_execution_with_tensor_core" in line for line in lines)
    numpy_lines = DistributedEngine(spec(), SingleProcess(), seed=0, kernels="numpy").describe()
    assert numpy_lines[-1].startswith("  kernels: numpy reference (")  # why: kernels=numpy, or numba missing
    assert numpy_lines[-1].endswith("(owners and requesters alike).")


def test_kernels_must_be_a_known_choice():
    with pytest.raises(ValueError, match=r"Argument `kernels` must be one of 'auto', 'numpy', 'fast'. Received: 'gpu'"):
        DistributedEngine(spec(), SingleProcess(), seed=0, kernels="gpu")


@pytest.mark.parametrize(
    "values, message",
    [
        (np.full((6, 2), None, dtype=object), r"Table 't', 'embedding': dtype object \(ndarray\); expected real"),
        (np.ones((6, 2), np.complex64), r"Table 't', 'embedding': dtype complex64 \(ndarray\); expected real numbers"),
        (np.full((6, 2), 1e300), r"Table 't', 'embedding': 1e\+300 at entry 0 is beyond float32's range"),
        (np.full((6, 2), "1"), r"Table 't', 'embedding': dtype <U1 \(ndarray\); expected real numbers"),
    ],
)
def test_load_state_refuses_what_float32_cannot_hold_as_engine_does(values, message):
    engine = DistributedEngine(spec(), seed=3)
    before = engine.table("t")
    reference = Engine(spec(), seed=3, kernels="numpy")
    for target in (engine, reference):
        with pytest.raises(ValueError, match=message):
            target.load_state({"t": {"embedding": values}}, step=9)
    assert engine.global_step == 0 and engine.table("t").tolist() == before.tolist()
    assert reference.global_step == 0 and reference.table("t").tolist() == before.tolist()


def test_an_engine_built_for_a_restore_draws_nothing_and_takes_the_rows():
    """`initialize=False`: rows allocated, not drawn; `load_rows` then makes them the restored ones."""
    engine = DistributedEngine(spec(), SingleProcess(), seed=3, initialize=False)
    rows = {"t": {"embedding": np.arange(12, dtype=np.float32).reshape(6, 2)}}
    engine.load_rows(rows, step=2)
    assert engine.global_step == 2 and engine.table("t").tolist() == rows["t"]["embedding"].tolist()
