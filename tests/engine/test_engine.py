"""The Engine: steps, shared tables, pipelining, sharding invariance, failure atomicity, state."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.engine.lookup import pooled_backward, pooled_lookup
from tpu_embedding_shim.engine.optimizers import apply_sparse_update, initial_slots
from tpu_embedding_shim.engine.ragged import to_ragged
from tpu_embedding_shim.spec import (
    AdagradSpec,
    AdamSpec,
    EmbeddingSpec,
    FeatureSpec,
    FtrlSpec,
    RowIdInitializer,
    SGDSpec,
    TableSpec,
    TruncatedNormal,
)

V, D = 12, 3


def make_spec(
    optimizer=None,
    *,
    combiner="mean",
    shards=1,
    strategy="div",
    pipelining=False,
    shared=False,
    sequence=0,
    multiplier=None,
    seed=1,
    **extra,
):
    table = TableSpec(
        name="t", vocabulary_size=V, dim=D, combiner=combiner, initializer=TruncatedNormal(stddev=0.5, seed=seed)
    )
    features = [FeatureSpec(name="a", table="t", num_buckets=V)]
    if shared:
        features.append(FeatureSpec(name="b", table="t", num_buckets=V, weight_key="b_w"))
    if sequence:
        features.append(FeatureSpec(name="s", table="t", num_buckets=V, max_sequence_length=sequence))
    return EmbeddingSpec(
        tables=(table,),
        features=tuple(features),
        optimizer=optimizer or AdagradSpec(learning_rate=0.1),
        num_shards=shards,
        partition_strategy=strategy,
        pipeline_execution_with_tensor_core=pipelining,
        gradient_multiplier_fn=multiplier,
        **extra,
    )


def grads_like(result, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in result.activations.items()}


def run(engine, batches, seed=0):
    for i, features in enumerate(batches):
        result = engine.forward(features)
        engine.apply_gradients(result, grads_like(result, seed + i))
    return engine.table("t")


def test_one_step_equals_the_reference_kernels():
    spec = make_spec(AdagradSpec(learning_rate=0.3), combiner="sqrtn")
    engine = Engine(spec)
    table0 = engine.table("t")
    ids = [[1, 2, 2], [5, -1, -1], [2, 7, 11]]
    result = engine.forward({"a": ids})
    batch = to_ragged(ids, feature=spec.feature("a"))
    np.testing.assert_allclose(result.activations["a"], pooled_lookup(table0, batch, "sqrtn"), rtol=1e-6)
    grad = grads_like(result, 3)
    engine.apply_gradients(result, grad)
    row_ids, row_grads = pooled_backward(batch, "sqrtn", grad["a"])
    want, want_slots = apply_sparse_update(
        spec.optimizer, table0, initial_slots(spec.optimizer, table0.shape), row_ids, row_grads, step=0
    )
    np.testing.assert_allclose(engine.table("t"), want, rtol=1e-6)
    np.testing.assert_allclose(engine.slots("t")["accumulators"], want_slots["accumulators"], rtol=1e-6)
    assert engine.global_step == 1


def test_shared_table_sums_gradients_of_both_features_into_one_update():
    spec = make_spec(SGDSpec(learning_rate=1.0), combiner="sum", shared=True)
    engine = Engine(spec)
    before = engine.table("t")
    result = engine.forward({"a": [[3]], "b": [[3]], "b_w": [[2.0]]})
    np.testing.assert_allclose(result.activations["b"], 2 * before[[3]], rtol=1e-6)
    engine.apply_gradients(result, {"a": np.ones((1, D)), "b": np.ones((1, D))})
    np.testing.assert_allclose(engine.table("t")[3], before[3] - 3.0, rtol=1e-6)  # 1 (a) + 2 (b, weight 2)


def test_sequence_feature_gives_padded_activations_and_capped_lengths():
    spec = make_spec(SGDSpec(learning_rate=1.0), sequence=3)
    engine = Engine(spec)
    table = engine.table("t")
    result = engine.forward({"a": [[0], [0]], "s": [[4, 5, 6, 7], [8, -1, -1, -1]]})
    assert result.activations["s"].shape == (2, 3, D)
    np.testing.assert_allclose(result.activations["s"][0], table[[4, 5, 6]])
    np.testing.assert_allclose(result.activations["s"][1, 1:], 0.0)
    np.testing.assert_array_equal(result.sequence_lengths["s"], [3, 1])
    engine.apply_gradients(result, {"s": np.ones((2, 3, D))})
    after = engine.table("t")
    np.testing.assert_allclose(after[[4, 5, 6, 8]], table[[4, 5, 6, 8]] - 1.0, rtol=1e-6)
    np.testing.assert_array_equal(after[7], table[7])  # truncated position: no gradient


def disjoint_batches(steps=4):
    # consecutive steps share no id
    return [{"a": [[(2 * s) % V, (2 * s + 1) % V]]} for s in range(steps)]


def test_pipelining_changes_nothing_when_consecutive_steps_share_no_id():
    plain = run(Engine(make_spec()), disjoint_batches())
    piped = run(Engine(make_spec(pipelining=True)), disjoint_batches())
    np.testing.assert_array_equal(plain, piped)


def test_pipelining_is_one_step_stale_when_steps_share_ids():
    spec = make_spec(SGDSpec(learning_rate=1.0), combiner="sum", pipelining=True)
    engine = Engine(spec)
    row0 = engine.table("t")[4].copy()
    first = engine.forward({"a": [[4]]})
    engine.apply_gradients(first, {"a": np.ones((1, D))})
    second = engine.forward({"a": [[4]]})
    np.testing.assert_array_equal(second.activations["a"][0], row0)  # the update of step 0 is not seen yet
    engine.apply_gradients(second, {"a": np.ones((1, D))})
    third = engine.forward({"a": [[4]]})
    np.testing.assert_allclose(third.activations["a"][0], row0 - 1.0, rtol=1e-6)  # sees step 0, not step 1
    np.testing.assert_allclose(engine.table("t")[4], row0 - 2.0, rtol=1e-6)  # reading flushes step 1


@settings(max_examples=25, deadline=None)
@given(
    shards=st.integers(1, 7),
    strategy=st.sampled_from(["div", "mod"]),
    ids=st.lists(st.lists(st.integers(-1, V - 1), min_size=1, max_size=4), min_size=1, max_size=5),
)
def test_training_does_not_depend_on_shard_count_or_strategy(shards, strategy, ids):
    width = max(len(r) for r in ids)
    dense = [r + [-1] * (width - len(r)) for r in ids]
    batches = [{"a": dense}, {"a": dense[::-1]}]
    want = run(Engine(make_spec(AdamSpec(learning_rate=0.1, lazy_adam=True))), batches)
    got = run(Engine(make_spec(AdamSpec(learning_rate=0.1, lazy_adam=True), shards=shards, strategy=strategy)), batches)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_stored_shards_follow_the_strategy():
    engine = Engine(make_spec(shards=5, strategy="mod"))
    full = engine.table("t")
    shards = engine.shards("t")
    np.testing.assert_array_equal(shards[2], full[2::5])
    engine = Engine(make_spec(shards=5, strategy="div"))
    assert [s.shape[0] for s in engine.shards("t")] == [3, 3, 2, 2, 2]


@pytest.mark.parametrize(
    "features,gradients,error,fragment",
    [
        ({"a": [[V]]}, None, ValueError, "range"),
        ({}, None, ValueError, "missing"),
        ({"a": [[1]]}, {"a": np.ones((2, D))}, ValueError, "shape"),
        ({"a": [[1]]}, {"a": np.full((1, D), np.nan)}, ValueError, "NaN"),
        ({"a": [[1]]}, {"zzz": np.ones((1, D))}, ValueError, "unknown"),
    ],
)
def test_a_failing_step_changes_nothing(features, gradients, error, fragment):
    engine = Engine(make_spec(AdamSpec(learning_rate=0.1, lazy_adam=False), pipelining=True))
    run(engine, disjoint_batches(2))
    before = engine.state(), engine.global_step
    with pytest.raises(error, match=fragment):
        result = engine.forward(features)
        engine.apply_gradients(result, gradients)
    after = engine.state()
    assert engine.global_step == before[1]
    for key in ("embedding", "momenta", "velocities"):
        np.testing.assert_array_equal(after["t"][key], before[0]["t"][key])


def test_gradient_multiplier_scales_gradients_with_the_global_step():
    seen = []
    spec = make_spec(SGDSpec(learning_rate=1.0), combiner="sum", multiplier=lambda step: seen.append(step) or 0.5)
    engine = Engine(spec)
    row = engine.table("t")[2].copy()
    for _ in range(2):
        engine.apply_gradients(engine.forward({"a": [[2]]}), {"a": np.ones((1, D))})
    np.testing.assert_allclose(engine.table("t")[2], row - 1.0, rtol=1e-6)
    assert seen == [0, 1]


def test_learning_rate_function_sees_the_global_step():
    steps = []
    spec = make_spec(SGDSpec(learning_rate=lambda step: steps.append(step) or 0.0))
    engine = Engine(spec)
    run(engine, disjoint_batches(3))
    assert steps == [0, 1, 2]


def test_none_gradient_is_zero_but_still_moves_non_lazy_adam():
    spec = make_spec(AdamSpec(learning_rate=0.1, lazy_adam=False), combiner="sum")
    engine = Engine(spec)
    engine.apply_gradients(engine.forward({"a": [[1]]}), {"a": np.ones((1, D))})
    moved = engine.table("t").copy()
    engine.apply_gradients(engine.forward({"a": [[1]]}), {"a": None})
    assert not np.allclose(engine.table("t")[1], moved[1])  # momentum keeps moving the row


def test_inference_lookup_cannot_be_trained_and_changes_nothing():
    engine = Engine(make_spec())
    before = engine.table("t")
    result = engine.forward({"a": [[1]]}, training=False)
    with pytest.raises(RuntimeError, match="inference"):
        engine.apply_gradients(result, {"a": np.ones((1, D))})
    np.testing.assert_array_equal(engine.table("t"), before)


def test_stale_lookup_result_is_refused():
    engine = Engine(make_spec())
    result = engine.forward({"a": [[1]]})
    engine.apply_gradients(result, {"a": np.ones((1, D))})
    with pytest.raises(RuntimeError, match="step"):
        engine.apply_gradients(result, {"a": np.ones((1, D))})


def test_checkpoint_round_trip_is_exact_and_restores_into_other_sharding(tmp_path):
    spec = make_spec(FtrlSpec(learning_rate=0.1), shards=3, strategy="mod", pipelining=True)
    engine = Engine(spec)
    run(engine, disjoint_batches(3))
    path = engine.save(str(tmp_path))
    other = Engine(make_spec(FtrlSpec(learning_rate=0.1), shards=2, strategy="div", seed=7))
    other.restore(str(tmp_path))
    assert other.global_step == 3 and path.endswith("0000000003")
    for key, value in engine.state()["t"].items():
        np.testing.assert_array_equal(other.state()["t"][key], value)
    np.testing.assert_array_equal(run(engine, disjoint_batches(2)), run(other, disjoint_batches(2)))


def test_restore_refuses_a_different_spec(tmp_path):
    Engine(make_spec()).save(str(tmp_path))
    with pytest.raises(ValueError, match="t"):
        Engine(make_spec(AdamSpec(learning_rate=0.1))).restore(str(tmp_path))


def test_weights_from_the_weights_argument_or_the_weight_key():
    spec = make_spec(combiner="sum", shared=True)
    engine = Engine(spec)
    table = engine.table("t")
    by_key = engine.forward({"a": [[1]], "b": [[2]], "b_w": [[3.0]]}, training=False)
    by_arg = engine.forward({"a": [[1]], "b": [[2]]}, {"b": [[3.0]]}, training=False)
    np.testing.assert_allclose(by_key.activations["b"], 3 * table[[2]], rtol=1e-6)
    np.testing.assert_allclose(by_arg.activations["b"], by_key.activations["b"])
    with pytest.raises(ValueError, match="b_w"):
        engine.forward({"a": [[1]], "b": [[2]]})


def test_clipping_limit_warns_that_it_has_no_effect():
    with pytest.warns(UserWarning, match="clipping_limit=1.0 has no effect"):
        engine = Engine(make_spec(clipping_limit=1.0))
    assert any("ignored" in line for line in engine.describe())


def test_the_clipping_limit_warning_follows_pythons_filters():
    """Once per line that builds an engine by default; every time under "always" (no state of the engine's own)."""
    spec = make_spec(clipping_limit=1.0)
    for action, expected in (("default", 1), ("always", 3)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)
            for _ in range(3):
                Engine(spec)
        assert sum("clipping_limit" in str(w.message) for w in caught) == expected, action


def test_describe_names_emulated_tpu_behaviours():
    lines = Engine(make_spec(pipelining=True, shards=2, multiplier=lambda s: 1.0)).describe()
    text = "\n".join(lines)
    assert "pipeline_execution_with_tensor_core" in text and "2 shard(s)" in text
    assert "gradient_multiplier" in text


def test_row_id_tables_read_by_eye():
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=5, dim=2, initializer=RowIdInitializer(), combiner="mean"),),
        features=(FeatureSpec(name="a", table="t", num_buckets=5),),
        optimizer=SGDSpec(learning_rate=0.1),
    )
    out = Engine(spec).forward({"a": [[1, 3], [4, -1]]}, training=False).activations["a"]
    np.testing.assert_array_equal(out, [[2, 2], [4, 4]])


def test_profile_data_directory_gets_one_statistics_file_per_table(tmp_path):
    import json
    import os

    engine = Engine(make_spec(shards=2, profile_data_directory=str(tmp_path / "profile")))
    run(engine, disjoint_batches(3))
    engine.save(str(tmp_path / "ckpt"))
    files = os.listdir(tmp_path / "profile")
    stats = [json.load(open(tmp_path / "profile" / f)) for f in files if f.endswith(".json")]
    assert len(stats) == 1
    assert stats[0]["steps_seen"] == 3 and stats[0]["steps_sampled"] >= 1
    assert stats[0]["mean_ids_per_example"] == 2.0


def test_dense_zero_is_padding_follows_tpuestimator_and_warns_once(monkeypatch):
    import tpu_embedding_shim.engine.ragged as ragged

    monkeypatch.setattr(ragged, "_warned_dense_zeros", set())
    feature = FeatureSpec(name="z", table="t", num_buckets=V, dense_zero_is_padding=True)
    with pytest.warns(UserWarning, match="id 0 in a dense input is padding"):
        batch = to_ragged([[0, 3], [5, 0]], feature=feature)
    np.testing.assert_array_equal(batch.values, [3, 5])
    np.testing.assert_array_equal(batch.row_positions(), [1, 0])
    sparse = to_ragged([[0, 3], [5]], feature=feature)  # a ragged input keeps id 0
    np.testing.assert_array_equal(sparse.values, [0, 3, 5])
    plain = to_ragged([[0, 3]], feature=FeatureSpec(name="p", table="t", num_buckets=V))
    np.testing.assert_array_equal(plain.values, [0, 3])  # TF's CPU rule: only negatives are padding


def test_features_may_have_their_own_example_counts_when_asked(tmp_path):
    spec = make_spec(
        SGDSpec(learning_rate=1.0), combiner="sum", shared=True, profile_data_directory=str(tmp_path / "profile")
    )
    engine = Engine(spec)
    features = {"a": [[1], [2], [3]], "b": [[4]], "b_w": [[1.0]]}
    with pytest.raises(ValueError, match="same batch size"):
        engine.forward(features)
    result = engine.forward(features, same_batch_size=False)
    assert result.activations["a"].shape == (3, D) and result.activations["b"].shape == (1, D)
    before = engine.table("t")
    engine.apply_gradients(result, {"a": np.ones((3, D)), "b": np.ones((1, D))})
    np.testing.assert_allclose(engine.table("t")[[1, 4]], before[[1, 4]] - 1.0, rtol=1e-6)


@pytest.mark.parametrize("shards,strategy", [(1, "div"), (3, "div"), (3, "mod")])
@pytest.mark.parametrize("kernels", ["numpy", "auto"])
def test_tables_and_slots_start_at_a_cache_line_whatever_the_sharding(shards, strategy, kernels):
    """An unaligned 256-byte row spans 5 cache lines instead of 4 (engine/aligned.py)."""
    from tpu_embedding_shim.engine.aligned import ALIGNMENT

    engine = Engine(make_spec(AdamSpec(learning_rate=0.1), shards=shards, strategy=strategy), kernels=kernels)
    state = engine.state()

    def arrays():
        table, slots = engine.stored("t")
        return [table.storage] + [s.storage for s in slots.values()]

    assert all(a.ctypes.data % ALIGNMENT == 0 for a in arrays())
    engine.load_state(state)  # a restore re-allocates: aligned again
    assert all(a.ctypes.data % ALIGNMENT == 0 for a in arrays())
    np.testing.assert_array_equal(engine.table("t"), state["t"]["embedding"])


@pytest.mark.parametrize("given,expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_idle_kernel_threads_sleep_unless_the_user_chose_a_policy(given, expected):
    """Spinning OpenMP threads took the cores from the model between kernels (docs/engine.md)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = "import os, tpu_embedding_shim.engine.fast; print(os.environ['OMP_WAIT_POLICY'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected
