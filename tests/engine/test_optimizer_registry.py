"""The optimizer registry: one row per spec kind, each consistent with its spec and formula, and an
optimizer added through it runs on both engines with the same bits."""

import inspect

import numpy as np
import pytest

from tpu_embedding_shim.api import optimizer_lowering
from tpu_embedding_shim.api import tpu_embedding_v1 as v1
from tpu_embedding_shim.api import tpu_embedding_v2_utils as v2
from tpu_embedding_shim.engine import fast
from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.engine.optimizers import OPTIMIZERS, apply_update, initial_slots, optimizer_for
from tpu_embedding_shim.spec import (
    OPTIMIZER_SPECS,
    AdagradSpec,
    EmbeddingSpec,
    FeatureSpec,
    RowIdInitializer,
    TableSpec,
)

from .fake_optimizer import LION, LionSpec
from .strategies import assert_same_bits

KINDS = sorted(OPTIMIZER_SPECS)


@pytest.mark.parametrize("kind", KINDS)
def test_every_spec_kind_has_a_row_naming_its_slots(kind):
    spec_class = OPTIMIZER_SPECS[kind]
    row = OPTIMIZERS[spec_class]
    assert row.spec is spec_class
    assert sorted(row.slots) == sorted(spec_class(learning_rate=0.1).slot_initial_values())
    if row.powers is not None:
        assert set(row.powers.slots) <= set(row.slots)


@pytest.mark.parametrize("kind", KINDS)
def test_each_formula_takes_the_row_its_slots_its_powers_and_the_hyperparameters(kind):
    row = OPTIMIZERS[OPTIMIZER_SPECS[kind]]
    powers = row.powers.count if row.powers else 0
    assert len(inspect.signature(row.formula).parameters) == 2 + len(row.slots) + powers + 1
    if row.powers is not None:
        assert len(inspect.signature(row.powers.bases).parameters) == 1 + len(row.powers.slots) + 1


@pytest.mark.parametrize("kind", KINDS)
def test_hyperparameters_are_float32_flags_and_hashable_constants(kind):
    row = OPTIMIZERS[OPTIMIZER_SPECS[kind]]
    hp = row.hyperparameters(OPTIMIZER_SPECS[kind](learning_rate=0.25), 0.25)
    assert isinstance(hp, tuple) and row.constants <= len(hp)
    assert np.float32(0.25) in hp  # the step's learning rate, as float32
    for value in hp:
        assert isinstance(value, (np.float32, bool, int)), (kind, value)
    hash(hp[: row.constants])  # the fused kernel is compiled per value of these


def test_a_subclass_runs_as_its_base_and_anything_else_is_refused():
    class MyAdagrad(AdagradSpec):
        pass

    assert optimizer_for(MyAdagrad(learning_rate=0.1)) is OPTIMIZERS[AdagradSpec]
    with pytest.raises(TypeError, match="`optimizer` must be one of SGDSpec"):
        optimizer_for(object())


def _subclasses(cls):
    return {c for sub in cls.__subclasses__() for c in {sub} | _subclasses(sub)}


def test_every_tensorflow_optimizer_class_lowers_to_a_registered_spec():
    # CustomOptimizer (TensorFlow 2.21) has no CPU update to lower to: it is refused (tests/midlevel)
    classes = _subclasses(v1._OptimizationParameters) | _subclasses(v2._Optimizer) - {v2.CustomOptimizer}
    assert set(v1.OPTIMIZATION_PARAMETER_CLASSES) == _subclasses(v1._OptimizationParameters)
    assert classes == set(optimizer_lowering.LOWERINGS)
    for spec_class, fields in optimizer_lowering.LOWERINGS.values():
        assert spec_class in OPTIMIZERS
        assert set(fields) <= {f for f in spec_class.__dataclass_fields__}


# An optimizer added through the registry (tests/engine/fake_optimizer.py).

SHARED = dict(clip_gradient_min=-0.5, clip_gradient_max=0.6, weight_decay_factor=0.05, clip_weight_max=2.0)


@pytest.fixture
def lion(monkeypatch):
    monkeypatch.setitem(OPTIMIZERS, LionSpec, LION)
    return LionSpec(learning_rate=0.1, beta1=0.5, beta2=0.75, **SHARED)


def test_an_added_optimizer_runs_on_the_numpy_engine(lion):
    rows = np.array([[1.0, -2.0, 3.0]], np.float32)
    grads = np.array([[0.2, 0.4, -1.0]], np.float32)
    slots = {"momenta": np.array([[0.4, -1.0, 0.0]], np.float32)}
    new_rows, new_slots = apply_update(lion, rows, slots, grads, step=0)
    # g clipped to [0.2, 0.4, -0.5]; w decayed by 5%: [0.95, -1.9, 2.85]
    # sign(0.5 m + 0.5 g) = sign([0.3, -0.3, -0.25]) = [1, -1, -1]: w - 0.1 * sign, clipped at 2
    np.testing.assert_allclose(new_rows, [[0.85, -1.8, 2.0]], rtol=1e-6)
    # m <- 0.75 m + 0.25 g
    np.testing.assert_allclose(new_slots["momenta"], [[0.35, -0.65, -0.125]], rtol=1e-6)


def test_an_added_optimizer_runs_fused_with_the_numpy_bits(lion):
    pytest.importorskip("numba", reason="needs numba: the `fast` extra, pip install -e '.[fast]'")
    if not fast.available():
        pytest.skip(f"fast kernels off: {fast.unavailable_reason()}")
    from tpu_embedding_shim.engine.fast import fused

    rng = np.random.default_rng(3)
    table = rng.standard_normal((50, 7)).astype(np.float32)
    slots = {"momenta": rng.standard_normal((50, 7)).astype(np.float32)}
    ids = rng.permutation(50)[:30]
    grads = rng.standard_normal((30, 7)).astype(np.float32)
    grads[:, 0] = 0.0  # sign(0) and sign(-0.0) are +0.0 on both engines
    want_rows, want_slots = apply_update(lion, table[ids], {"momenta": slots["momenta"][ids]}, grads, step=0)
    assert fused.fusable(lion)
    fused.apply(lion, 0.1, table, slots, ids, grads, np.array([0, 12]), np.array([12, 30]))
    assert_same_bits(table[ids], want_rows)
    assert_same_bits(slots["momenta"][ids], want_slots["momenta"])


def test_an_added_optimizer_trains_the_same_on_both_engines(lion):
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=20, dim=4, initializer=RowIdInitializer()),),
        features=(FeatureSpec(name="f", table="t", num_buckets=20),),
        optimizer=lion,
    )
    engines = [Engine(spec, kernels=kernels) for kernels in ["numpy"] + (["fast"] if fast.available() else [])]
    rng = np.random.default_rng(0)
    for _ in range(3):
        features = {"f": [list(rng.permutation(20)[:3]) for _ in range(4)]}
        grads = {"f": rng.standard_normal((4, 4))}
        for engine in engines:
            engine.apply_gradients(engine.forward(features), grads)
    assert engines[0].slots("t")["momenta"].any()
    assert sorted(initial_slots(lion, (1, 1))) == ["momenta"]
    for engine in engines[1:]:
        assert_same_bits(engine.table("t"), engines[0].table("t"))
