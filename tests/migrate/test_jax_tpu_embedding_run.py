"""jax-tpu-embedding built from the converted output: the specs construct and validate, and carry TF's numbers.

Its lookups and updates need a SparseCore TPU, so on a CPU the proof is:
the generated model.py (executed) and `build()` make specs that
`prepare_feature_specs_for_training` accepts; every optimizer spec's
`get_hyperparameters(step)` and slot initializers are TF's; the weights
have the shapes and names the slot initializers create, and jax-tpu-embedding's
own stacking lays them out as `init_embedding_variables` would and gives
them back unchanged; and the kernels' update formulas (transcribed below
from `lib/core/primitives/sparse_dense_matmul_grad_with_*.py` of 0.1.0),
fed with those hyper-parameters, follow the engine step by step.

Run in a venv with the migrate-keras extra (`pip install -e '.[test,migrate-keras]'`):
python -m pytest tests/migrate/test_jax_tpu_embedding_run.py
"""

from __future__ import annotations

import numpy as np
import pytest

jte_embedding = pytest.importorskip(
    "jax_tpu_embedding.sparsecore.lib.nn.embedding", reason="jax-tpu-embedding is not installed (its venv runs this)"
)

import jax  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec, table_stacking  # noqa: E402

from tpu_embedding_shim.engine import Engine  # noqa: E402
from tpu_embedding_shim.migrate import to_jax_tpu_embedding  # noqa: E402
from tpu_embedding_shim.migrate.sparsecore import SLOTS  # noqa: E402
from tpu_embedding_shim.spec import (  # noqa: E402
    AdagradMomentumSpec,
    AdagradSpec,
    AdamSpec,
    FtrlSpec,
    SGDSpec,
)

from .models import (  # noqa: E402
    every_optimizer_spec,
    every_option_config,
    movielens_config,
    quantized_midlevel_spec,
    small_spec,
)

DEVICES, SPARSECORES = 1, 4  # a TPU v5p chip has 4 SparseCores; preparing the specs only needs the counts
CLASSES = {
    "sgd": embedding_spec.SGDOptimizerSpec,
    "adagrad": embedding_spec.AdagradOptimizerSpec,
    "adagrad_momentum": embedding_spec.AdagradMomentumOptimizerSpec,
    "adam": embedding_spec.AdamOptimizerSpec,
    "ftrl": embedding_spec.FTRLOptimizerSpec,
}


def _trained(spec, directory, steps=3):
    engine = Engine(spec, seed=5, kernels="numpy")
    rng = np.random.default_rng(1)
    for _ in range(steps):
        features = {f.name: [list(rng.integers(0, f.num_buckets, 2)) for _ in range(4)] for f in spec.features}
        result = engine.forward(features)
        engine.apply_gradients(result, {k: rng.normal(size=np.shape(v)) for k, v in result.activations.items()})
    return engine, engine.save(str(directory))


def _from_code(migration, directory):
    """model.py as written, executed: (its feature specs, its variables read from weights.npz)."""
    migration.write(directory)
    namespace = {"__file__": str(directory / "model.py"), "__name__": "migrated_jax"}
    exec(compile((directory / "model.py").read_text(), "model.py", "exec"), namespace)
    return namespace["feature_specs"](), namespace["embedding_variables"](), namespace


def _from_build(migration, directory):
    return migration.config["feature_specs"], migration.config["variables"], None


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    spec = every_optimizer_spec()
    engine, path = _trained(spec, tmp_path_factory.mktemp("ckpt"))
    return spec, engine, to_jax_tpu_embedding(spec, path, allow_lossy=True, batch_size=16)


@pytest.mark.parametrize("make", [_from_code, _from_build], ids=["generated code", "built"])
def test_the_specs_validate_and_carry_tfs_hyper_parameters(trained, tmp_path, make):
    spec, _, migration = trained
    features, variables, _ = make(migration, tmp_path)
    jte_embedding.prepare_feature_specs_for_training(features, DEVICES, SPARSECORES)
    tables = jte_embedding.get_table_specs(features)
    assert sorted(tables) == sorted(t.name for t in spec.tables)
    for table in spec.tables:
        optimizer = spec.optimizer_for(table.name)
        jte = tables[table.name]
        assert (jte.vocabulary_size, jte.embedding_dim, jte.combiner) == (
            table.vocabulary_size,
            table.dim,
            table.combiner,
        )
        expected = CLASSES.get(optimizer.kind, embedding_spec.SGDOptimizerSpec)  # the report's fallback
        assert type(jte.optimizer) is expected, table.name
        # Adam: jax-tpu-embedding computes 1 - beta_2^t in float32 (relative error ~ 6e-8 / (1 - beta_2)).
        rtol = 1e-4 if optimizer.kind == "adam" else 1e-6
        for step in (0, 3, 1000):
            expected_values = _tf_hyper_parameters(optimizer, step)
            np.testing.assert_allclose(jte.optimizer.get_hyperparameters(step), expected_values, rtol=rtol)
        if type(jte.optimizer) is CLASSES.get(optimizer.kind):  # the slots start at TF's values
            initializers = jte.optimizer.slot_variables_initializers()
            starts = {
                f: init(jax.random.key(0), (1, 1), np.float32)[0, 0]
                for f, init in zip(initializers._fields, initializers)
            }
            tf_slot = dict((jte_name, tf_name) for tf_name, jte_name in SLOTS[optimizer.kind])
            assert starts == {f: np.float32(optimizer.slot_initial_values()[tf_slot[f]]) for f in starts}, table.name
    assert sorted(variables) == sorted(tables)


def _tf_hyper_parameters(optimizer, step):
    """What jax-tpu-embedding's kernel must receive to apply TF's update at `step` (Adam: TF's lr, no correction)."""
    lr = optimizer.learning_rate_at(step)
    kind = optimizer.kind
    if kind == "adagrad_momentum":
        o = optimizer
        return (lr, o.momentum, o.beta2, o.epsilon, o.exponent, float(o.use_nesterov))
    if kind == "adam":
        t = step + 1
        return (lr, optimizer.beta1, optimizer.beta2, optimizer.epsilon * np.sqrt(1 - optimizer.beta2**t))
    if kind == "ftrl":
        o = optimizer
        return (lr, o.learning_rate_power, o.l1_regularization_strength, o.l2_regularization_strength, o.beta)
    return (lr,)


def test_the_weights_have_the_slot_initializers_shapes_and_lay_out_as_jax_tpu_embedding_does(trained, tmp_path):
    spec, engine, migration = trained
    features, variables, namespace = _from_code(migration, tmp_path)
    tables = {t.name: t for t in spec.tables}
    for name, value in variables.items():
        optimizer = jte_embedding.get_table_specs(features)[name].optimizer
        initializers = optimizer.slot_variables_initializers()
        assert type(value.slot) is type(initializers) and value.slot._fields == initializers._fields
        shape = (tables[name].vocabulary_size, tables[name].dim)
        assert value.table.shape == shape
        for init, slot in zip(initializers, value.slot):
            assert init(jax.random.key(0), shape, np.float32).shape == slot.shape == shape
    sharded = namespace["sharded_variables"](features, variables, DEVICES, SPARSECORES)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    table_specs = jte_embedding.get_table_specs(features)
    initial = jte_embedding.init_embedding_variables(
        jax.random.key(0),
        table_specs,
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x", None)),
        num_sparsecore_per_device=SPARSECORES,
    )
    flat = jax.tree.map(lambda x: x.reshape((-1, x.shape[-1])), sharded)
    assert jax.tree.structure(flat) == jax.tree.structure(initial)
    assert jax.tree.map(lambda x: x.shape, flat) == jax.tree.map(lambda x: x.shape, initial)
    back = table_stacking.unshard_and_unstack_tables(table_specs, sharded, DEVICES * SPARSECORES)
    for name, value in back.items():
        np.testing.assert_array_equal(value.table, engine.table(name))
        for field, slot in zip(value.slot._fields, value.slot):
            np.testing.assert_array_equal(slot, migration.weights[f"{name}/{field}"])


# The kernels' row updates, transcribed from jax-tpu-embedding 0.1.0's lowering (one row: g, w, slots, hyper-params).


def _kernel(kind, spec_optimizer, hyper, w, slots, g):
    f32 = np.float32
    hyper = [np.asarray(h, f32) for h in hyper]
    if kind == "sgd":  # sparse_dense_matmul_grad_with_sgd.py
        (lr,) = hyper
        return w - lr * g, ()
    if kind == "adagrad":  # ..._with_adagrad.py: a += g^2; w -= lr * g / sqrt(a)
        (lr,) = hyper
        a = slots[0] + g * g
        return w - lr * g / np.sqrt(a), (a,)
    if kind == "adagrad_momentum":  # ..._with_adagrad_momentum.py
        lr, k, beta2, eps, exponent, nesterov = hyper
        a = slots[0] + g * g if beta2 == 1 else beta2 * slots[0] + (1 - beta2) * g * g
        s = np.power(a + eps, -1 / exponent) * g
        m = k * slots[1] + s
        update = k * m + s if nesterov else m
        return w - lr * update, (a, m)
    if kind == "adam":  # ..._with_adam.py: theta -= alpha_t * m / (sqrt(v) + epsilon_hat)
        alpha, b1, b2, eps_hat = hyper
        m = slots[0] + (1 - b1) * (g - slots[0])
        v = slots[1] + (1 - b2) * (g * g - slots[1])
        return w - alpha * m / (np.sqrt(v) + eps_hat), (m, v)
    if kind == "ftrl":  # ..._with_ftrl.py
        lr, power, l1, l2, beta = hyper
        multiply = spec_optimizer.multiply_linear_by_learning_rate
        a, linear = slots
        a_new = a + g * g
        delta_p = np.power(a_new, -power) - np.power(a, -power)
        linear = linear + lr * g - delta_p * w if multiply else linear + g - delta_p / lr * w
        scale = lr if multiply else 1
        numerator = -linear if l1 == 0 else np.clip(linear, -l1 * scale, l1 * scale) - linear
        denominator = (
            np.power(a_new, -power) + 2 * lr * l2 + beta if multiply else (np.power(a_new, -power) + beta) / lr + 2 * l2
        )
        return numerator / denominator, (a_new, linear)
    raise AssertionError(kind)


OPTIMIZERS = [
    SGDSpec(learning_rate=0.3),
    AdagradSpec(learning_rate=0.2, initial_accumulator=0.3),
    AdagradMomentumSpec(learning_rate=0.1, momentum=0.9, use_nesterov=True, exponent=3.0, beta2=0.99, epsilon=1e-7),
    AdagradMomentumSpec(learning_rate=0.1, momentum=0.5),
    AdamSpec(learning_rate=0.05, beta1=0.8, beta2=0.95, epsilon=1e-8, sum_inside_sqrt=False),
    FtrlSpec(learning_rate=0.5, l1_regularization_strength=0.01, l2_regularization_strength=0.02, beta=0.1),
    FtrlSpec(
        learning_rate=0.5, learning_rate_power=-0.3, multiply_linear_by_learning_rate=True, initial_linear_value=0.2
    ),
]


@pytest.mark.parametrize("optimizer", OPTIMIZERS, ids=lambda o: f"{o.kind}-{id(o) % 1000}")
def test_the_kernels_fed_with_the_converted_specs_follow_the_engine(tmp_path, optimizer):
    spec = small_spec("sum", optimizer, vocabulary_size=12, dim=3)
    engine, path = _trained(spec, tmp_path, steps=2)
    migration = to_jax_tpu_embedding(spec, path, allow_lossy=True, batch_size=5)
    impossible = [r.option for r in migration.report.impossible]
    assert impossible == (["optimizer.epsilon"] if optimizer.kind == "adam" else [])
    jte = migration.config["feature_specs"]["f"].table_spec.optimizer
    variables = migration.config["variables"]["t"]
    w, slots = np.array(variables.table), tuple(np.array(s) for s in variables.slot)
    plain = (w.copy(), tuple(s.copy() for s in slots))  # Adam without the correction cancelled: to show it matters
    rng = np.random.default_rng(7)
    for _ in range(4):
        step = engine.global_step
        ids = rng.integers(0, 12, 5)
        gradients = rng.normal(size=(5, 3)).astype(np.float32)
        engine.apply_gradients(engine.forward({"f": [[i] for i in ids]}), {"f": gradients})
        rows = np.unique(ids)
        summed = np.stack([gradients[ids == r].sum(axis=0) for r in rows])  # one update per row, as SparseCore
        hyper = jte.get_hyperparameters(step)
        new_w, new_slots = _kernel(optimizer.kind, optimizer, hyper, w[rows], tuple(s[rows] for s in slots), summed)
        w[rows] = new_w
        for slot, value in zip(slots, new_slots):
            slot[rows] = value
        if optimizer.kind == "adam":
            uncorrected = embedding_spec.AdamOptimizerSpec(
                learning_rate=optimizer.learning_rate,
                beta_1=optimizer.beta1,
                beta_2=optimizer.beta2,
                epsilon=optimizer.epsilon,
            ).get_hyperparameters(step)
            pw, ps = plain
            new_w, new_slots = _kernel("adam", optimizer, uncorrected, pw[rows], tuple(s[rows] for s in ps), summed)
            pw[rows] = new_w
            for slot, value in zip(ps, new_slots):
                slot[rows] = value
        np.testing.assert_allclose(w, engine.table("t"), rtol=2e-5, atol=1e-6)
        tf_slots = [engine.slots("t")[s] for s, _ in SLOTS[optimizer.kind]]
        for mine, theirs in zip(slots, tf_slots):
            np.testing.assert_allclose(mine, theirs, rtol=2e-5, atol=1e-6)
    if optimizer.kind == "adam":
        assert not np.allclose(plain[0], engine.table("t"), rtol=1e-2)


def test_every_option_and_movielens_build(tmp_path):
    migration = to_jax_tpu_embedding(every_option_config(), allow_lossy=True, batch_size=8)
    features, _, namespace = _from_code(migration, tmp_path / "every")
    jte_embedding.prepare_feature_specs_for_training(features, DEVICES, SPARSECORES)
    assert sorted(features) == ["city", "history", "item", "tags", "user"]  # country is the model's (tensor core)
    assert namespace["tensor_core_tables"]()["tbl_country"].shape == (12, 4)
    assert features["item"].table_spec is features["history"].table_spec  # a shared table stays shared
    assert namespace["EMBEDDING_VAR_LIMITS"]["tbl_user"] == (-2.0, 2.0)
    movielens = to_jax_tpu_embedding(movielens_config(), allow_lossy=True, batch_size=32)
    features = movielens.config["feature_specs"]
    jte_embedding.prepare_feature_specs_for_training(features, DEVICES, SPARSECORES)
    assert {f.table_spec.optimizer.initial_accumulator_value for f in features.values()} == {0.1}


@pytest.mark.parametrize("make", [_from_code, _from_build], ids=["generated code", "built"])
def test_a_quantized_table_keeps_its_quantization_config_through_sharded_variables(tmp_path, make):
    """The lookup reads the config from the prepared (stacked) table spec: model.py stacks nothing, so it stays.
    (0.1.0's table_stacking.stack_tables / auto_stack_tables build a StackedTableSpec without it: the report says
    so.)"""
    spec = quantized_midlevel_spec()
    _, path = _trained(spec, tmp_path / "model")
    migration = to_jax_tpu_embedding(spec, path, batch_size=8)
    features, variables, namespace = make(migration, tmp_path / "out")
    wanted = embedding_spec.QuantizationConfig(min_value=-0.25, max_value=0.25, num_buckets=5)
    assert features["a"].table_spec.quantization_config == wanted
    assert features["b"].table_spec.quantization_config is None
    if namespace is None:
        jte_embedding.prepare_feature_specs_for_training(features, DEVICES, SPARSECORES)
    else:
        namespace["sharded_variables"](features, variables, DEVICES, SPARSECORES)
    assert features["a"].table_spec.stacked_table_spec.quantization_config == wanted
    assert features["b"].table_spec.stacked_table_spec.quantization_config is None
