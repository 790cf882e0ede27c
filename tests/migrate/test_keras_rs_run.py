"""keras-rs built from the converted output gives the engine's numbers (Keras 3 on JAX, CPU).

The generated model.py (written and executed) and `build()` make a
`DistributedEmbedding` whose pooled lookups equal the engine's for sum /
mean / sqrtn, with and without weights (float32 rounding: rtol 1e-6,
atol 1e-6), on the weights of a trained checkpoint; MovieLens and the
every-option model convert and look up as the engine does (vocabulary
features through VOCABULARIES, the tensor-core table on default_device).
On default_device the model's optimizer trains the tables (TableConfig's is
not used). SparseCore is emulated (keras-rs told the CPU has 4 SparseCores)
far enough to build: keras-rs turns the Keras optimizers into the
jax-tpu-embedding specs the report names, and `set_sparsecore_state` loads
the slots and the step (its lookups need a TPU).

Run in a venv with the migrate-keras extra (`pip install -e '.[test,migrate-keras]'`):
KERAS_BACKEND=jax python -m pytest tests/migrate/test_keras_rs_run.py
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np
import pytest

keras_rs = pytest.importorskip("keras_rs", reason="keras-rs is not installed (its venv runs this test)")

import jax  # noqa: E402
import keras  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding as jte_embedding  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec, table_stacking  # noqa: E402
from jax_tpu_embedding.sparsecore.utils import utils as jte_utils  # noqa: E402
from keras_rs.src.layers.embedding import base_distributed_embedding  # noqa: E402

from tpu_embedding_shim.engine import Engine  # noqa: E402
from tpu_embedding_shim.migrate import EXACT, load_source, to_keras_rs  # noqa: E402
from tpu_embedding_shim.spec import AdagradSpec, SGDSpec  # noqa: E402

from .models import EVERY_OPTIMIZER, every_optimizer_spec, every_option_config, movielens_config, small_spec  # noqa: E402

CLOSE = {"rtol": 1e-6, "atol": 1e-6}


def test_keras_runs_on_jax():
    assert keras.backend.backend() == "jax", "set KERAS_BACKEND=jax before Keras is imported"


def _trained(spec, directory, steps=3, seed=5):
    engine = Engine(spec, seed=seed, kernels="numpy")
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        features = {f.name: [list(rng.integers(0, f.num_buckets, 3)) for _ in range(4)] for f in spec.features}
        if any(f.weight_key for f in spec.features):
            features |= {
                f.weight_key: [list(rng.uniform(0.5, 2, 3)) for _ in range(4)] for f in spec.features if f.weight_key
            }
        result = engine.forward(features)
        engine.apply_gradients(result, {k: rng.normal(size=np.shape(v)) for k, v in result.activations.items()})
    return engine, engine.save(str(directory))


def _module(migration, directory):
    """model.py as written, executed: its namespace."""
    migration.write(directory)
    namespace = {"__file__": str(directory / "model.py"), "__name__": "migrated_keras_rs"}
    exec(compile((directory / "model.py").read_text(), "model.py", "exec"), namespace)
    return namespace


def _from_code(migration, directory):
    """The generated build_layer(), reading weights.npz beside model.py."""
    return _module(migration, directory)["build_layer"]()


def _from_build(migration, directory):
    return migration.config


def _dense(bags, weights=None):
    """Ragged bags -> dense [B, L] ids and weights (the bag's weights, 1 without; 0 on padding)."""
    width = max([len(bag) for bag in bags] + [1])
    ids = np.zeros((len(bags), width), np.int32)
    dense = np.zeros((len(bags), width), np.float32)
    for row, bag in enumerate(bags):
        ids[row, : len(bag)] = bag
        dense[row, : len(bag)] = 1.0 if weights is None else weights[row]
    return ids, dense


@pytest.mark.parametrize("make", [_from_code, _from_build], ids=["generated code", "built"])
@pytest.mark.parametrize("weighted", [False, True], ids=["no weights", "weights"])
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_pooled_lookups_equal_the_engine(tmp_path, combiner, weighted, make):
    spec = small_spec(combiner, weighted=weighted)
    engine, path = _trained(spec, tmp_path / "ckpt")
    migration = to_keras_rs(spec, path, batch_size=4)
    assert migration.report.lossless
    layer = make(migration, tmp_path / "out")
    np.testing.assert_array_equal(layer.get_embedding_tables()["t"], engine.table("t"))
    bags = [[1, 2, 2], [29], [], [3, 4, 5, 6]]
    weights = [[0.5, 1.0, 2.0], [3.0], [], [1.0, 0.25, 4.0, 1.5]]
    features = {"f": bags} | ({"w": weights} if weighted else {})
    expected = engine.forward(features, training=False).activations["f"]
    ids, dense = _dense(bags, weights if weighted else None)
    np.testing.assert_allclose(layer({"f": ids}, {"f": dense})["f"], expected, **CLOSE)
    if not weighted:  # equal bags need no weights at all
        full = [[1, 2, 2], [29, 0, 7], [8, 8, 8], [3, 4, 5]]
        expected = engine.forward({"f": full}, training=False).activations["f"]
        np.testing.assert_allclose(layer({"f": np.array(full, np.int32)})["f"], expected, **CLOSE)


@pytest.fixture(scope="module")
def layers():
    """combiner -> (engine, layer): fresh weights, no batch size (FeatureConfig shapes hold None)."""
    out = {}
    for combiner in ("sum", "mean", "sqrtn"):
        spec = small_spec(combiner, weighted=True, vocabulary_size=17, dim=3)
        migration = to_keras_rs(spec, seed=11)
        assert "GLOBAL_BATCH_SIZE = None" in migration.code
        out[combiner] = (Engine(spec, seed=11, kernels="numpy"), migration.config)
    return out


BAGS = st.lists(
    st.lists(st.tuples(st.integers(0, 16), st.floats(0.125, 4.0, width=32)), max_size=5), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(combiner=st.sampled_from(["sum", "mean", "sqrtn"]), batch=BAGS)
def test_random_weighted_bags_pool_as_the_engine(layers, combiner, batch):
    engine, layer = layers[combiner]
    bags = [[i for i, _ in bag] for bag in batch]
    weights = [[w for _, w in bag] for bag in batch]
    expected = engine.forward({"f": bags, "w": weights}, training=False).activations["f"]
    ids, dense = _dense(bags, weights)
    np.testing.assert_allclose(layer({"f": ids}, {"f": dense})["f"], expected, rtol=1e-5, atol=1e-6)


def test_every_option_model_looks_up_as_the_engine(tmp_path):
    config = every_option_config(profile=False)
    spec = config.to_spec()
    migration = to_keras_rs(config, allow_lossy=True, batch_size=4, seed=3)
    module = _module(migration, tmp_path)
    layer = module["build_layer"]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # clipping_limit has no effect (the report says so too)
        engine = Engine(spec, seed=3, kernels="numpy")  # the migration's fresh weights are this engine's
    rng = np.random.default_rng(2)
    cities = ["paris", "oslo", "lima"]
    bags = {
        "user": [list(rng.integers(0, 50, 2)) for _ in range(4)],
        "item": [list(rng.integers(0, 40, 3)) for _ in range(4)],
        "history": [list(rng.integers(0, 40, 2)) for _ in range(4)],
        "tags": [list(rng.integers(0, 30, 3)) for _ in range(4)],
        "city": [list(rng.choice(cities, 2)) for _ in range(4)],
        "country": [list(rng.integers(0, 12, 2)) for _ in range(4)],
    }
    tag_weights = [list(rng.uniform(0.5, 2.0, 3)) for _ in range(4)]
    expected = engine.forward(bags | {"tag_weights": tag_weights}, training=False).activations
    vocabulary = list(module["VOCABULARIES"]["city"])
    assert vocabulary == cities  # TF's id order
    ids = {name: _dense(bag) for name, bag in bags.items() if name != "city"}
    ids["city"] = _dense([[vocabulary.index(c) for c in bag] for bag in bags["city"]])
    ids["tags"] = _dense(bags["tags"], tag_weights)
    out = layer({k: v[0] for k, v in ids.items()}, {k: v[1] for k, v in ids.items()})
    for name in ("user", "item", "tags", "city"):
        np.testing.assert_allclose(out[name], expected[name], **CLOSE, err_msg=name)
    # The tensor-core table (TF kept it on the model, mean combiner) is a default_device table with TF's values.
    table = load_source(config, seed=3).state["tbl_country"]["embedding"]
    np.testing.assert_array_equal(layer.get_embedding_tables()["tbl_country"], table)
    mean = np.stack([table[bag].mean(axis=0) for bag in bags["country"]])
    np.testing.assert_allclose(out["country"], mean, **CLOSE)
    assert out["history"].shape == (4, 8)  # the sequence feature is pooled: the report's impossible row


def test_movielens_converts_and_looks_up_as_the_engine(tmp_path):
    config = movielens_config()
    migration = to_keras_rs(config, allow_lossy=True, batch_size=4, seed=1)
    report = migration.report
    assert [(r.where, r.option) for r in report.impossible] == [("feature history", "max_sequence_length")]
    assert report.row("table tbl_genres", "combiner").status == EXACT
    module = _module(migration, tmp_path)
    layer = module["build_layer"]()
    engine = Engine(config.to_spec(), seed=1, kernels="numpy")
    for table, values in layer.get_embedding_tables().items():
        np.testing.assert_array_equal(values, engine.table(table), err_msg=table)
    vocabularies = module["VOCABULARIES"]
    genres = [["Action", "Drama"], ["Comedy"], ["Crime", "Documentary", "Animation"], ["Drama"]]
    tokens = {
        "genres": genres,
        "occupation": [["artist"], ["doctor"], ["other"], ["student"]],
        "gender": [["M"], ["F"], ["F"], ["M"]],
    }
    numbers = {"user": [[5], [17], [900], [1]], "item": [[3], [1600], [42], [8]], "age": [[2], [3], [7], [1]]}
    zips = [["042"], ["007"], ["099"], ["013"]]
    history = [[3, 4], [5], [6, 7, 8], [9]]
    features = tokens | numbers | {"zip": zips, "history": history}
    expected = engine.forward(features, training=False).activations
    ids = {name: _dense([[vocabularies[name].index(t) for t in bag] for bag in bags]) for name, bags in tokens.items()}
    ids |= {name: _dense(bags) for name, bags in numbers.items()}
    ids["zip"] = _dense([[vocabularies["zip"].index(t) for t in bag] for bag in zips])
    ids["history"] = _dense(history)
    out = layer({k: v[0] for k, v in ids.items()}, {k: v[1] for k, v in ids.items()})
    for name in ("user", "item", "age", "genres", "occupation", "gender", "zip"):
        np.testing.assert_allclose(out[name], expected[name], **CLOSE, err_msg=name)


def test_on_default_device_the_models_optimizer_trains_the_table(tmp_path):
    """TableConfig's optimizer (here Adagrad) is not used: Keras' SGD on the layer's variable gives TF's SGD."""
    spec = small_spec("mean", AdagradSpec(learning_rate=0.5))
    migration = to_keras_rs(spec, seed=4)
    layer = migration.config
    assert [v.path.rsplit("/", 1)[1] for v in layer.variables] == ["embeddings"]  # no slot variables
    sgd = Engine(small_spec("mean", SGDSpec(learning_rate=0.5)), seed=4, kernels="numpy")
    bags, gradients = [[1, 2], [2, 3, 3], [7]], np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    sgd.apply_gradients(sgd.forward({"f": bags}), {"f": gradients})
    ids, dense = _dense(bags)

    def loss(values):
        out, _ = layer.stateless_call(values, layer.non_trainable_variables, {"f": ids}, weights={"f": dense})
        return (out["f"] * gradients).sum()

    grads = jax.grad(loss)([v.value for v in layer.trainable_variables])
    keras.optimizers.SGD(learning_rate=0.5).apply(grads, layer.trainable_variables)
    np.testing.assert_allclose(layer.get_embedding_tables()["t"], sgd.table("t"), **CLOSE)


@pytest.fixture
def sparsecore(monkeypatch):
    """keras-rs told that this CPU has 4 SparseCores: it builds SparseCore variables (lookups would need a TPU)."""
    monkeypatch.setattr(base_distributed_embedding.DistributedEmbedding, "_has_sparsecore", lambda self: True)
    monkeypatch.setitem(jte_utils.NUM_SC_PER_DEVICE_MAP, jax.devices()[0].device_kind, 4)


KINDS = {
    "sgd": embedding_spec.SGDOptimizerSpec,
    "adagrad": embedding_spec.AdagradOptimizerSpec,
    "adam": embedding_spec.AdamOptimizerSpec,
    "ftrl": embedding_spec.FTRLOptimizerSpec,
}


@pytest.mark.parametrize("make", [_from_code, _from_build], ids=["generated code", "built"])
def test_on_sparsecore_keras_rs_runs_the_reported_optimizers_from_the_checkpoints_state(tmp_path, sparsecore, make):
    spec = every_optimizer_spec()
    engine, path = _trained(spec, tmp_path / "ckpt")
    migration = to_keras_rs(spec, path, allow_lossy=True, batch_size=8)
    layer = make(migration, tmp_path / "out")
    assert list(layer._placement_to_path_to_feature_config) == ["sparsecore"]
    config = layer._config
    tables = jte_embedding.get_table_specs(config.feature_specs)
    for optimizer in EVERY_OPTIMIZER:
        jte = tables[f"t_{optimizer.kind}"].optimizer
        assert type(jte) is KINDS.get(optimizer.kind, embedding_spec.SGDOptimizerSpec), optimizer.kind
        for step in (3, 50):
            hyper = np.asarray(jte.get_hyperparameters(step)[0])
            np.testing.assert_allclose(hyper, optimizer.learning_rate, rtol=1e-4)  # Adam: the correction cancelled
        if optimizer.kind == "adagrad":
            assert jte.initial_accumulator_value == optimizer.initial_accumulator
        if optimizer.kind == "ftrl":
            expected = (
                optimizer.learning_rate_power,
                optimizer.l1_regularization_strength,
                optimizer.l2_regularization_strength,
                optimizer.beta,
                optimizer.initial_accumulator_value,
            )
            assert (
                jte.learning_rate_power,
                jte.l1_regularization_strength,
                jte.l2_regularization_strength,
                jte.beta,
                jte.initial_accumulator_value,
            ) == expected
    num_shards = config.mesh.devices.size * config.num_sc_per_device
    stacked = {name: jax.tree.map(lambda v: v.value, value) for name, value in layer._table_and_slot_variables.items()}
    back = table_stacking.unshard_and_unstack_tables(tables, stacked, num_shards)
    for name, value in back.items():
        np.testing.assert_array_equal(value.table, engine.table(name), err_msg=name)
        assert len(value.slot) == len([k for k in migration.weights if k.startswith(f"{name}/")])
        for field, slot in zip(value.slot._fields, value.slot):
            np.testing.assert_array_equal(slot, migration.weights[f"{name}/{field}"], err_msg=f"{name}/{field}")
    np.testing.assert_array_equal(back["t_ftrl"].slot.linear, engine.slots("t_ftrl")["linears"])
    assert float(layer._iterations.value) == 3.0  # the step counter continues from the checkpoint's
