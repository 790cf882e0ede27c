"""TorchRec runs what to_torchrec converts, on a CPU, and its numbers are the engine's (TensorFlow's).

The generated model.py is imported from the written migration and sharded with TorchRec's fused path
(DistributedModelParallel in a one-process gloo group, table-wise, FBGEMM's fused CPU kernels); the objects that
`build()` made in-process look up too. Lookups (sum, mean, sqrtn, weighted, sequence, padded tables) match the
engine's to float32 rounding, and after several steps with the same activation gradients so do the tables and
Adagrad's accumulators (EXACT_SGD, EXACT_ADAGRAD). Needs torchrec and fbgemm-gpu-cpu (docs/migrate.md's recipe).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the TorchRec target runs in its own venv")
pytest.importorskip("torchrec", reason="torchrec is not installed (docs/migrate.md: installed without fbgemm-gpu)")
pytest.importorskip("fbgemm_gpu", reason="fbgemm-gpu-cpu is not installed (docs/migrate.md)")

import torch.distributed as dist  # noqa: E402

import tpu_embedding_shim as tf  # noqa: E402
from tpu_embedding_shim.engine import Engine, Ragged, lookup  # noqa: E402
from tpu_embedding_shim.engine.farmhash import hash_bucket  # noqa: E402
from tpu_embedding_shim.migrate import load_source, to_torchrec  # noqa: E402
from tpu_embedding_shim.migrate import torchrec as target  # noqa: E402
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec  # noqa: E402

from .models import every_option_config, movielens_config, small_spec  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6  # float32: sums in another order, rsqrt vs 1/sqrt
_counter = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def process_group():
    """One process, gloo: what DistributedModelParallel needs to shard on a CPU."""
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    if created:
        dist.destroy_process_group()


def _generated(migration, tmp_path):
    """The written model.py, imported."""
    directory = tmp_path / f"model{next(_counter)}"
    migration.write(directory)
    spec = importlib.util.spec_from_file_location(f"converted_model_{next(_counter)}", directory / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _batch(rng, source, module=None, size=5):
    """(the engine's features, the generated lookup()'s batch): random bags with repeated ids, empty examples,
    weights <= 0 among the weights, sequences longer than max_sequence_length, unknown vocabulary tokens."""
    features, batch = {}, {}
    for feature in source.features:
        longest = feature.max_sequence_length + 2 if feature.is_sequence else 4
        lengths = rng.integers(0, longest + 1, size)
        ids = rng.integers(0, min(feature.num_buckets, 12), int(lengths.sum()))
        split = np.cumsum(lengths)[:-1]
        if feature.vocabulary is not None:
            known = len(feature.vocabulary)
            tokens = [feature.vocabulary[i] if i < known else f"unknown-{i}" for i in ids]
            features[feature.name] = [list(part) for part in np.split(np.array(tokens, dtype=object), split)]
            ids = module.token_ids(feature.name, tokens, hash_bucket=hash_bucket)
        else:
            features[feature.name] = [list(part) for part in np.split(ids, split)]
        batch[feature.name] = (ids, lengths)
        if feature.weight_key is not None:
            weights = rng.choice(np.array([-0.5, 0.0, 0.25, 1.0, 2.0], np.float32), ids.size)
            features[feature.weight_key] = [list(part) for part in np.split(weights, split)]
            batch[feature.name] = (ids, lengths, weights)
    return features, batch


def _assert_activations(actual, expected):
    assert sorted(actual) == sorted(expected)
    for name, values in expected.items():
        np.testing.assert_allclose(actual[name].detach().numpy(), values, rtol=RTOL, atol=ATOL, err_msg=name)


def _full(tensor):
    """The whole array of a one-process ShardedTensor (or of a plain tensor)."""
    if hasattr(tensor, "local_shards"):
        (shard,) = tensor.local_shards()
        assert list(shard.metadata.shard_offsets) == [0, 0]
        tensor = shard.tensor
    return tensor.detach().numpy()


def _assert_state(model, engine, source):
    """The sharded model's tables and fused optimizer state equal the engine's; padding columns stay 0."""
    params = model.state_dict()
    states = model.fused_optimizer.state_dict()["state"]
    for table in source.spec.tables:
        name = target.torchrec_name(source, table.name)
        key = next(k for k in params if k.endswith(f".{name}.weight"))
        weights = _full(params[key])
        np.testing.assert_allclose(weights[:, : table.dim], engine.table(table.name), rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(weights[:, table.dim :], 0.0)
        for slot, state in target.fused(source, table.name).states:
            actual = _full(states[key][f"{name}.{state}"])[:, : table.dim]
            np.testing.assert_allclose(actual, engine.slots(table.name)[slot], rtol=RTOL, atol=ATOL)


def _train(model, module, engine, source, rng, steps, **lookup_options):
    """`steps` steps of both with the same batches and activation gradients; checks every step's activations."""
    for _ in range(steps):
        features, batch = _batch(rng, source, module)
        result = engine.forward(features)
        gradients = {name: rng.standard_normal(v.shape).astype(np.float32) for name, v in result.activations.items()}
        options = {key: f(engine.global_step) for key, f in lookup_options.items()}
        out = module.lookup(model, batch, **options)
        _assert_activations(out, result.activations)
        sum((out[name] * torch.from_numpy(g)).sum() for name, g in gradients.items()).backward()
        engine.apply_gradients(result, gradients)


# Lookups ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "combiner, weighted, safe",
    [
        ("sum", False, True),
        ("mean", False, True),
        ("sqrtn", False, True),
        ("sum", True, True),
        ("mean", True, True),
        ("sqrtn", True, True),
        ("mean", True, False),
        ("sqrtn", True, False),
    ],
)
def test_lookups_equal_the_engines(tmp_path, combiner, weighted, safe):
    spec = small_spec(combiner, weighted=weighted, vocabulary_size=12, dim=6)
    spec = dataclasses.replace(spec, features=(dataclasses.replace(spec.features[0], safe_lookup=safe),))
    migration = to_torchrec(spec)
    assert migration.report.lossless
    module = _generated(migration, tmp_path)
    sharded = module.shard(module.build())
    source = load_source(spec)
    engine = Engine(spec, seed=0, kernels="numpy")
    rng = np.random.default_rng(1)
    for _ in range(3):
        features, batch = _batch(rng, source, module, size=7)
        expected = engine.forward(features, training=False).activations
        _assert_activations(module.lookup(sharded, batch), expected)
        _assert_activations(migration.config.lookup(migration.config.embeddings, batch), expected)  # build()'s


def test_out_of_range_ids_go_to_the_default_value(tmp_path):
    spec = small_spec("sum", vocabulary_size=12, dim=4)
    spec = dataclasses.replace(spec, features=(dataclasses.replace(spec.features[0], default_value=3),))
    migration = to_torchrec(spec)
    assert migration.report.row("feature f", "default_value").status == "converted"
    module = _generated(migration, tmp_path)
    ids, lengths = np.array([-2, 5, 40, 11, 3]), np.array([3, 0, 2])
    expected = Engine(spec, seed=0, kernels="numpy").forward({"f": [[-2, 5, 40], [], [11, 3]]}, training=False)
    _assert_activations(module.lookup(module.shard(module.build()), {"f": (ids, lengths)}), expected.activations)


def test_an_unweighted_mean_is_torchrecs_mean(tmp_path):
    module = _generated(to_torchrec(small_spec("mean")), tmp_path)
    assert module.IS_WEIGHTED is False
    assert str(module.TABLES[0].pooling) == "PoolingType.MEAN"


# Training --------------------------------------------------------------------------------------------------


def _training_spec(optimizer) -> EmbeddingSpec:
    """Every layout: a weighted sum, an sqrtn, a sequence feature whose table a pooled mean reads too, a dim that
    is padded (6 -> 8), duplicate ids (ids below 12 of 16)."""
    tables = (
        TableSpec(name="t_sum", vocabulary_size=16, dim=4, combiner="sum"),
        TableSpec(name="t_sqrtn", vocabulary_size=16, dim=6, combiner="sqrtn"),
        TableSpec(name="t_seq", vocabulary_size=16, dim=4, combiner="mean"),
    )
    features = (
        FeatureSpec(name="a", table="t_sum", num_buckets=16, weight_key="a_w"),
        FeatureSpec(name="b", table="t_sqrtn", num_buckets=16),
        FeatureSpec(name="s", table="t_seq", num_buckets=16, max_sequence_length=3),
        FeatureSpec(name="p", table="t_seq", num_buckets=16),
    )
    return EmbeddingSpec(tables=tables, features=features, optimizer=optimizer)


@pytest.mark.parametrize(
    "optimizer",
    [
        SGDSpec(learning_rate=0.3),
        AdagradSpec(learning_rate=0.2),
        AdagradSpec(learning_rate=0.5, initial_accumulator=2.0),
    ],
    ids=["sgd", "adagrad", "adagrad-initial-2"],
)
def test_training_through_fbgemms_fused_kernels_equals_the_engine(tmp_path, optimizer):
    spec = _training_spec(optimizer)
    migration = to_torchrec(spec)
    assert migration.report.lossless
    _sharded_trains_as_the_engine(migration, spec, tmp_path, np.random.default_rng(2), steps=5)


def _sharded_trains_as_the_engine(migration, spec, tmp_path, rng, steps):
    """The migration's sharded model starts with the engine's tables and trains as the engine does."""
    module = _generated(migration, tmp_path)
    model = module.shard(module.build())
    source = load_source(spec)
    engine = Engine(spec, seed=0, kernels="numpy")
    _assert_state(model, engine, source)
    _train(model, module, engine, source, rng, steps=steps)
    _assert_state(model, engine, source)


def test_tables_named_like_a_module_dicts_attributes_are_renamed_and_train(tmp_path):
    """TorchRec keeps tables in a torch.nn.ModuleDict: 'items', 'keys', 'a.b' cannot be its keys as they are."""
    renamed = {"t_sum": "items", "t_sqrtn": "a.b", "t_seq": "keys"}
    spec = _training_spec(AdagradSpec(learning_rate=0.2))
    spec = dataclasses.replace(
        spec,
        tables=tuple(dataclasses.replace(t, name=renamed[t.name]) for t in spec.tables),
        features=tuple(dataclasses.replace(f, table=renamed[f.table]) for f in spec.features),
    )
    migration = to_torchrec(spec)
    assert any("'items' -> 'items_'" in note and "'a.b' -> 'a_b'" in note for note in migration.report.notes)
    _sharded_trains_as_the_engine(migration, spec, tmp_path, np.random.default_rng(4), steps=3)


def test_the_module_dict_names_are_torchs():
    """The converter's list of names a ModuleDict refuses holds every attribute of this torch's ModuleDict."""
    module_dict = torch.nn.ModuleDict()
    assert set(dir(module_dict)) | set(vars(module_dict)) <= target.MODULE_DICT_NAMES


def test_training_continues_from_a_checkpoint(tmp_path):
    spec = _training_spec(AdagradSpec(learning_rate=0.3))
    engine = Engine(spec, seed=5, kernels="numpy")
    rng = np.random.default_rng(3)
    source = load_source(spec)
    for _ in range(3):
        features, _ = _batch(rng, source)
        result = engine.forward(features)
        engine.apply_gradients(result, {k: rng.standard_normal(v.shape) for k, v in result.activations.items()})
    path = engine.save(str(tmp_path / "checkpoints"))
    migration = to_torchrec(spec, path)
    module = _generated(migration, tmp_path)
    model = module.shard(module.build())
    _assert_state(model, engine, source)
    _train(model, module, engine, source, rng, steps=3)
    _assert_state(model, engine, source)


def _rate(step: int) -> float:
    return 0.4 / (1.0 + step)


def _multiplier(step: int) -> float:
    return 1.5 - 0.25 * step


def test_a_model_of_sequence_features_only(tmp_path):
    """No EmbeddingBagCollection at all, and a padded sequence table (dim 2 -> 4)."""
    spec = small_spec("mean", AdagradSpec(learning_rate=0.3), vocabulary_size=10, dim=2, sequence_length=3)
    module = _generated(to_torchrec(spec), tmp_path)
    assert module.TABLES == [] and len(module.SEQUENCE_TABLES) == 1
    model = module.shard(module.build())
    source = load_source(spec)
    engine = Engine(spec, seed=0, kernels="numpy")
    _train(model, module, engine, source, np.random.default_rng(8), steps=3)
    _assert_state(model, engine, source)


def test_a_learning_rate_function_and_the_gradient_multiplier(tmp_path):
    spec = _training_spec(AdagradSpec(learning_rate=0.1))
    tables = (dataclasses.replace(spec.tables[0], optimizer=SGDSpec(learning_rate=_rate)), *spec.tables[1:])
    spec = dataclasses.replace(spec, tables=tables, gradient_multiplier_fn=_multiplier)
    migration = to_torchrec(spec)
    module = _generated(migration, tmp_path)
    assert module.LEARNING_RATE_FNS["t_sum"] is _rate and len(module.LEARNING_RATE_FNS) == 1
    assert module.GRADIENT_MULTIPLIER_FN is _multiplier
    model = module.shard(module.build())
    source = load_source(spec)
    engine = Engine(spec, seed=0, kernels="numpy")
    rng = np.random.default_rng(4)
    for step in range(4):
        module.set_learning_rates(model, {name: fn(step) for name, fn in module.LEARNING_RATE_FNS.items()})
        _train(model, module, engine, source, rng, steps=1, gradient_multiplier=module.GRADIENT_MULTIPLIER_FN)
    _assert_state(model, engine, source)


def test_tables_of_one_fused_kernel_share_their_learning_rate(tmp_path):
    spec = _training_spec(SGDSpec(learning_rate=0.1))  # equal settings: FBGEMM groups the tables in one kernel
    module = _generated(to_torchrec(spec), tmp_path)
    model = module.shard(module.build())
    with pytest.raises(ValueError, match="share one fused kernel"):
        module.set_learning_rates(model, {"t_sum": 0.2})
    module.set_learning_rates(model, {"t_sum": 0.2, "t_sqrtn": 0.2})


def test_fbgemm_clips_each_entry_where_tf_clips_the_row(tmp_path):
    """Why the report refuses clip_gradient_*: FBGEMM's gradient_clipping clamps before duplicates are summed."""
    spec = small_spec("sum", SGDSpec(learning_rate=1.0), vocabulary_size=8, dim=4)
    module = _generated(to_torchrec(spec), tmp_path)
    module.FUSED_OPTIMIZERS["t"][1].update(gradient_clipping=True, max_gradient=0.5)
    model = module.shard(module.build())
    before = _full(model.state_dict()["ebc.embedding_bags.t.weight"]).copy()
    out = module.lookup(model, {"f": (np.array([3, 3]), np.array([2]))})
    out["f"].backward(torch.full((1, 4), 0.4))
    after = _full(model.state_dict()["ebc.embedding_bags.t.weight"])
    np.testing.assert_allclose(before[3] - after[3], 0.8, rtol=1e-6)  # 0.4 + 0.4, each under the limit
    clipped = dataclasses.replace(
        spec, optimizer=SGDSpec(learning_rate=1.0, clip_gradient_min=-0.5, clip_gradient_max=0.5)
    )
    engine = Engine(clipped, seed=0, kernels="numpy")
    result = engine.forward({"f": [[3, 3]]})
    start = engine.table("t")[3].copy()
    engine.apply_gradients(result, {"f": np.full((1, 4), 0.4, np.float32)})
    np.testing.assert_allclose(start - engine.table("t")[3], 0.5, rtol=1e-6)  # TF: the row's 0.8, clipped


# Whole models ----------------------------------------------------------------------------------------------


def test_movielens_converted_trains_as_the_engine(tmp_path):
    config = movielens_config()
    migration = to_torchrec(config)
    assert migration.report.lossless
    module = _generated(migration, tmp_path)
    model = module.shard(module.build())
    source = load_source(config)
    engine = Engine(source.spec, seed=0, kernels="numpy")
    _train(model, module, engine, source, np.random.default_rng(5), steps=3)
    _assert_state(model, engine, source)
    # A dense input: TPUEstimator reads 0 as padding, and so does from_dense().
    dense = np.array([[5, 0, 7], [0, 0, 0], [3, 3, -1]])
    ids, lengths = module.from_dense("user", dense)
    assert (ids.tolist(), lengths.tolist()) == ([5, 7, 3, 3], [2, 0, 2])
    features, batch = _batch(np.random.default_rng(6), source, module, size=3)
    features["user"], batch["user"] = dense, (ids, lengths)
    _assert_activations(module.lookup(model, batch), engine.forward(features, training=False).activations)


def _tensor_core_config():
    fc = tf.feature_column
    user = fc.categorical_column_with_identity("user", 20)
    country = fc.categorical_column_with_identity("country", 12)
    tpu = tf.tpu.experimental
    return tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[
            tpu.embedding_column(user, 8, combiner="sum"),
            tpu.embedding_column(country, 4, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3]),
        ],
        optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1),
    )


@pytest.mark.parametrize("config", [_tensor_core_config, every_option_config], ids=["tensor-core", "every-option"])
def test_every_option_and_tensor_core_models_look_up_as_the_engine(tmp_path, config):
    """The every-option model (allow_lossy: its Adam has no CPU kernel in FBGEMM) looks up with build()'s objects;
    a tensor-core table is data_parallel once sharded. A tensor-core table is the model's: its lookup is checked
    with the engine's reference kernel."""
    config = config()
    migration = to_torchrec(config, allow_lossy=True)
    module = _generated(migration, tmp_path)
    source = load_source(config)
    models = [migration.config.embeddings]
    if migration.report.lossless:
        models.append(module.shard(module.build()))
    engine = Engine(dataclasses.replace(source.spec, clipping_limit=None), seed=0, kernels="numpy")  # no effect
    features, batch = _batch(np.random.default_rng(7), source, module)
    expected = dict(engine.forward(features, training=False).activations)
    for feature in source.tensor_core_features:
        ids, lengths = batch[feature.name]
        ragged = Ragged(values=ids, row_splits=np.concatenate([[0], np.cumsum(lengths)]), weights=None)
        table = source.state[feature.table]["embedding"]
        expected[feature.name] = lookup.pooled_lookup(table, ragged, source.table(feature.table).combiner)
    for model in models:
        _assert_activations(module.lookup(model, batch), expected)
