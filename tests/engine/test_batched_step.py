"""The table-batched small step (`engine/fast/batched.py`) gives the numpy reference kernels' bits (hypothesis).

A small step (below `threads.SERIAL_WORK`) runs every feature's lookup in one
kernel call, every table's sums in one, and the updates of tables sharing an
optimizer in one. Over mixed specs (several tables, tables shared by
features, sum / mean / sqrtn, weights with zeros and negatives, safe or not,
sequence features, every fused optimizer with its shared options, a
learning-rate schedule, a gradient multiplier, sharding, pipelining, missing
gradients) a fast engine must equal a numpy engine bit for bit, step after
step, and refuse bad gradients with the same error, changing nothing.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .fast_only import require_fast_kernels

require_fast_kernels()

from tpu_embedding_shim.engine.engine import Engine  # noqa: E402
from tpu_embedding_shim.engine.fast import batched  # noqa: E402
from tpu_embedding_shim.engine.fast.kernels import FastKernels  # noqa: E402
from tpu_embedding_shim.engine.kernels import Lookup, NumpyKernels  # noqa: E402
from tpu_embedding_shim.engine.lookup import quantization_parameters  # noqa: E402
from tpu_embedding_shim.spec import (  # noqa: E402
    AdagradSpec,
    EmbeddingSpec,
    FeatureSpec,
    SGDSpec,
    TableSpec,
    TruncatedNormal,
)

from .strategies import FUSED_KINDS, assert_same_bits, batches, fused_optimizers, quantizations, step_both  # noqa: E402


@st.composite
def mixed_specs(draw):
    """(spec, sequence lengths by feature): 1-3 tables, 1-5 features over them (tables shared), each pooled
    (weighted or not, safe or not) or a sequence; a global optimizer and maybe one per table; some tables
    quantized."""
    n_tables = draw(st.integers(1, 3))
    tables = []
    for t in range(n_tables):
        own = draw(st.one_of(st.none(), fused_optimizers(kind=draw(st.sampled_from(FUSED_KINDS)))))
        tables.append(
            TableSpec(
                name=f"t{t}",
                vocabulary_size=draw(st.integers(1, 30)),
                dim=draw(st.integers(1, 9)),
                combiner=draw(st.sampled_from(["sum", "mean", "sqrtn"])),
                initializer=TruncatedNormal(seed=t),
                optimizer=own,
                quantization=draw(st.one_of(st.none(), quantizations())),
            )
        )
    features = []
    for f in range(draw(st.integers(n_tables, 5))):  # every table read, some by several features
        table = tables[f] if f < n_tables else tables[draw(st.integers(0, n_tables - 1))]
        sequence = draw(st.booleans())
        features.append(
            FeatureSpec(
                name=f"f{f}",
                table=table.name,
                num_buckets=table.vocabulary_size,
                max_sequence_length=draw(st.integers(1, 4)) if sequence else 0,
                weight_key=f"f{f}_w" if not sequence and draw(st.booleans()) else None,
                safe_lookup=draw(st.booleans()),
            )
        )
    multiplier = draw(st.sampled_from([None, lambda step: 0.5 + step]))
    return EmbeddingSpec(
        tables=tuple(tables),
        features=tuple(features),
        optimizer=draw(fused_optimizers()),
        num_shards=draw(st.integers(1, 3)),
        partition_strategy=draw(st.sampled_from(["div", "mod"])),
        pipeline_execution_with_tensor_core=draw(st.booleans()),
        gradient_multiplier_fn=multiplier,
    )


def _step(spec: EmbeddingSpec, rng, batch: int):
    """Ragged ids (empty rows, repeats), weights in [-0.5, 2] with zeros, and gradients (some missing)."""
    features, grads = {}, {}
    for f in spec.features:
        vocab = spec.table(f.table).vocabulary_size
        ids = [list(rng.integers(0, vocab, rng.integers(0, 5))) for _ in range(batch)]
        features[f.name] = ids
        if f.weight_key:
            features[f.weight_key] = [
                [float(w) for w in rng.choice(np.float32([-0.5, 0.0, 0.25, 1.0, 2.0]), len(r))] for r in ids
            ]
        dim = spec.table(f.table).dim
        shape = (batch, f.max_sequence_length, dim) if f.is_sequence else (batch, dim)
        if rng.random() < 0.85:
            grads[f.name] = rng.standard_normal(shape).astype(np.float32)
    return features, grads


@settings(max_examples=60, deadline=None)
@given(spec=mixed_specs(), seed=st.integers(0, 2**16), batch=st.integers(1, 9), hashed=st.booleans())
def test_batched_steps_are_the_numpy_kernels_bits(spec, seed, batch, hashed):
    """`hashed`: every table summed through a hash of the step's ids, as a table above `DIRECT_ROWS` is."""
    fast, slow = Engine(spec, kernels="fast"), Engine(spec, kernels="numpy")
    rng = np.random.default_rng(seed)
    with mock.patch.object(batched, "DIRECT_ROWS", 0 if hashed else batched.DIRECT_ROWS):
        _three_steps(spec, fast, slow, rng, batch)


def _three_steps(spec, fast, slow, rng, batch):
    for _ in range(3):
        features, grads = _step(spec, rng, batch)
        r_fast, r_slow = fast.forward(features), slow.forward(features)
        assert r_fast.packed is not None  # the table-batched path
        for name in r_slow.activations:
            assert_same_bits(r_fast.activations[name], r_slow.activations[name])
            if name in r_slow.sequence_lengths:
                np.testing.assert_array_equal(r_fast.sequence_lengths[name], r_slow.sequence_lengths[name])
        fast.apply_gradients(r_fast, grads)
        slow.apply_gradients(r_slow, grads)
    for table in spec.tables:
        assert_same_bits(fast.table(table.name), slow.table(table.name))
        for name, values in slow.slots(table.name).items():
            assert_same_bits(fast.slots(table.name)[name], values)


@settings(max_examples=40, deadline=None)
@given(pieces=st.lists(st.tuples(batches(), st.sampled_from(["sum", "mean", "sqrtn"]), st.booleans(),
                                 st.sampled_from([None, 1, 3]), st.one_of(st.none(), quantizations())),
                       min_size=1, max_size=4))  # fmt: skip
def test_batched_lookups_are_the_reference(pieces):
    """`FastKernels.lookups` of a small step (one call) against `NumpyKernels.lookups`, request by request
    (some tables quantized)."""
    requests = [
        Lookup(table, batch, combiner, safe, length, quantization_parameters(quantization))
        for (table, batch), combiner, safe, length, quantization in pieces
    ]
    kernels = FastKernels()
    assert kernels.pack(requests) is not None
    for got, want in zip(kernels.lookups(requests), NumpyKernels().lookups(requests)):
        if isinstance(want, tuple):
            assert_same_bits(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
        else:
            assert_same_bits(got, want)


def test_a_large_tables_sums_are_hashed_with_the_same_bits():
    """Tables above `DIRECT_ROWS` rows, a few ids a step (repeated, shared by two features): the summing
    pass's hash gives the slot map's sums, the numpy kernels' bits."""
    rows = 4 * batched.DIRECT_ROWS
    spec = EmbeddingSpec(
        tables=(TableSpec(name="big", vocabulary_size=rows, dim=5, initializer=TruncatedNormal(seed=3)),),
        features=(
            FeatureSpec(name="a", table="big", num_buckets=rows),
            FeatureSpec(name="b", table="big", num_buckets=rows, max_sequence_length=2),
        ),
        optimizer=AdagradSpec(learning_rate=0.2),
    )
    fast, slow = Engine(spec, kernels="fast"), Engine(spec, kernels="numpy")
    rng = np.random.default_rng(7)
    for _ in range(4):
        hot = rng.integers(0, rows, 6)  # few distinct ids: many duplicates, in both features
        features = {"a": rng.choice(hot, (32, 3)), "b": rng.choice(hot, (32, 2))}
        grads = {"a": rng.standard_normal((32, 5)), "b": rng.standard_normal((32, 2, 5))}
        step_both(fast, slow, features, grads)
    assert_same_bits(fast.table("big"), slow.table("big"))
    assert_same_bits(fast.slots("big")["accumulators"], slow.slots("big")["accumulators"])


def test_no_lookup_is_no_call():
    assert FastKernels().pack([]) is None
    assert FastKernels().lookups([]) == []


def _migration_spec(optimizer=None):
    """docs/migration.md's tables and features (small): user (mean), item and a history sharing a table."""
    return EmbeddingSpec(
        tables=(
            TableSpec(name="user", vocabulary_size=12, dim=4, combiner="mean", initializer=TruncatedNormal(seed=1)),
            TableSpec(name="shared", vocabulary_size=12, dim=4, combiner="mean", initializer=TruncatedNormal(seed=2)),
        ),
        features=(
            FeatureSpec(name="user", table="user", num_buckets=12, dense_zero_is_padding=True),
            FeatureSpec(name="item", table="shared", num_buckets=12, dense_zero_is_padding=True),
            FeatureSpec(name="history", table="shared", num_buckets=12, max_sequence_length=3),
        ),
        optimizer=optimizer or AdagradSpec(learning_rate=0.3),
    )


def _dense_step(rng, batch=6):
    features = {
        "user": rng.integers(1, 12, (batch, 1)),
        "item": rng.integers(1, 12, (batch, 1)),
        "history": rng.integers(1, 12, (batch, 3)),
    }
    grads = {
        "user": rng.standard_normal((batch, 4)),
        "item": rng.standard_normal((batch, 4)),
        "history": rng.standard_normal((batch, 3, 4)),
    }
    return features, grads


def test_the_migration_step_is_batched_and_exact():
    fast, slow = Engine(_migration_spec(), kernels="fast"), Engine(_migration_spec(), kernels="numpy")
    rng = np.random.default_rng(0)
    for _ in range(5):
        step_both(fast, slow, *_dense_step(rng))
    for name in ("user", "shared"):
        assert_same_bits(fast.table(name), slow.table(name))
        assert_same_bits(fast.slots(name)["accumulators"], slow.slots(name)["accumulators"])


@pytest.mark.parametrize("kernels", ["fast", "numpy"])
def test_a_bad_gradient_is_the_first_features_error_and_changes_nothing(kernels):
    """A NaN in `user` and a wrong shape in `history`: the NaN is named (a loop over the features checks
    `user` first); a NaN alone is named too; tables, slots and the step stay as they were."""
    engine = Engine(_migration_spec(), kernels=kernels)
    rng = np.random.default_rng(1)
    features, grads = _dense_step(rng)
    before = engine.state()
    result = engine.forward(features)
    grads["user"][2, 1] = np.nan
    bad_shape = dict(grads, history=np.zeros((6, 2, 4)))
    with pytest.raises(ValueError, match="feature 'user' holds NaN"):
        engine.apply_gradients(result, bad_shape)
    grads_item = dict(grads, user=np.ones((6, 4)), item=np.full((6, 4), np.inf))
    with pytest.raises(ValueError, match="feature 'item' holds NaN"):
        engine.apply_gradients(result, grads_item)
    with pytest.raises(ValueError, match="feature 'history' must have the shape"):
        engine.apply_gradients(result, dict(grads, user=np.ones((6, 4)), history=np.zeros((6, 2, 4))))
    assert engine.global_step == 0
    for name, arrays in engine.state().items():
        for key, values in arrays.items():
            assert_same_bits(values, before[name][key])
    engine.apply_gradients(result, dict(grads, user=np.ones((6, 4))))  # the same lookup, once it is right
    assert engine.global_step == 1


@pytest.mark.parametrize("kernels", ["fast", "numpy"])
def test_a_nan_comes_before_an_untrained_table(kernels):
    """An inference-only table with a gradient, and a NaN in an earlier feature: the NaN is the error."""
    spec = EmbeddingSpec(
        tables=(
            TableSpec(name="a", vocabulary_size=5, dim=2, optimizer=SGDSpec(learning_rate=0.1)),
            TableSpec(name="b", vocabulary_size=5, dim=2),
        ),
        features=(FeatureSpec(name="fa", table="a", num_buckets=5), FeatureSpec(name="fb", table="b", num_buckets=5)),
        optimizer=None,
    )
    engine = Engine(spec, kernels=kernels)
    result = engine.forward({"fa": [[1, 2], [3]], "fb": [[4], []]})
    with pytest.raises(ValueError, match="feature 'fa' holds NaN"):
        engine.apply_gradients(result, {"fa": np.full((2, 2), np.nan), "fb": np.ones((2, 2))})
    with pytest.raises(RuntimeError, match="Table 'b' has no optimizer"):
        engine.apply_gradients(result, {"fa": np.ones((2, 2)), "fb": np.ones((2, 2))})
    engine.apply_gradients(result, {"fa": np.ones((2, 2))})
    assert engine.global_step == 1
