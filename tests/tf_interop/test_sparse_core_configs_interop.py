"""TensorFlow 2.21's SparseCore configuration objects against ours: generated arguments, same acceptance, same
exception type (`TableConfig(combiner=, dtype=)`, `QuantizationConfig`, `CustomOptimizer`, `CustomCombiner`,
`SparseCoreEmbeddingConfig`), and the table stacking names TensorFlow's layout stacker gives unstacked tables.

Runs only with TensorFlow >= 2.21 (CI's TF 2.21 venv); skips elsewhere. Where we are stricter than TensorFlow
(docs/stricter_than_tensorflow.md), the generated case is allowed to be refused here and accepted there.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow", reason="the TensorFlow interop tests need TensorFlow")
if not hasattr(tf.tpu.experimental.embedding, "SparseCoreEmbeddingConfig") or not hasattr(
    tf.tpu.experimental.embedding, "CustomCombiner"
):
    pytest.skip(
        "TensorFlow 2.21's SparseCore configuration objects are not in this TensorFlow", allow_module_level=True
    )

import tpu_embedding_shim as shim  # noqa: E402

TF, SHIM = tf.tpu.experimental.embedding, shim.tpu.experimental.embedding


def outcome(make):
    """`None` if `make()` succeeds, else its exception type."""
    try:
        make()
    except Exception as error:  # the type is what is compared
        return type(error)
    return None


def agree(make_tf, make_shim, stricter=False):
    """Same outcome; where `stricter`, ours may refuse (ValueError / TypeError) what TensorFlow accepts."""
    theirs, ours = outcome(make_tf), outcome(make_shim)
    if theirs is None and ours is not None and stricter:
        assert ours in (ValueError, TypeError)
        return
    assert theirs == ours, (theirs, ours)


combiners = st.one_of(st.sampled_from(["mean", "sum", "sqrtn", "max", "", "SUM"]), st.integers(0, 2), st.none())
dtypes = st.sampled_from(["float32", "int32", "float64", "int64", "bool"])


@settings(max_examples=60, deadline=None)
@given(vocabulary=st.integers(-1, 5), dim=st.integers(-1, 5), combiner=combiners, dtype=dtypes, custom=st.booleans())
def test_table_config(vocabulary, dim, combiner, dtype, custom):
    def make(module, dtype_of):
        def build():
            chosen = module.CustomCombiner(lambda v, x: x[0], max_valency=2) if custom else combiner
            return module.TableConfig(
                vocabulary_size=vocabulary, dim=dim, combiner=chosen, name="t", dtype=dtype_of(dtype)
            )

        return build

    agree(make(TF, tf.as_dtype), make(SHIM, np.dtype))
    agree(make(TF, lambda d: d), make(SHIM, tf.as_dtype))  # a string dtype; a TensorFlow DType here


@settings(max_examples=60, deadline=None)
@given(
    num_buckets=st.one_of(st.integers(-2, 6), st.floats(-2, 6, allow_nan=False)),
    lower=st.floats(-4, 4, allow_nan=False),
    upper=st.floats(-4, 4, allow_nan=False),
)
def test_quantization_config(num_buckets, lower, upper):
    # Stricter: num_buckets an int, upper > lower (TensorFlow checks num_buckets >= 2 only).
    agree(
        lambda: TF.QuantizationConfig(num_buckets, lower, upper),
        lambda: SHIM.QuantizationConfig(num_buckets, lower, upper),
        stricter=True,
    )


slot_lists = st.lists(st.sampled_from(["a", "b", "c"]), max_size=3)


@settings(max_examples=60, deadline=None)
@given(
    names=slot_lists,
    initializers=st.integers(0, 3),
    dims=st.one_of(st.none(), st.lists(st.integers(0, 3), max_size=3)),
    learning_rate=st.floats(0, 1),
)
def test_custom_optimizer(names, initializers, dims, learning_rate):
    def make(module):
        return lambda: module.CustomOptimizer(
            lambda *a: a[1],
            learning_rate=learning_rate,
            slot_names=names,
            slot_initializers=[tf.constant_initializer(0.1)] * initializers,
            slot_dims=dims,
        )

    agree(make(TF), make(SHIM))


@settings(max_examples=40, deadline=None)
@given(num_weights=st.integers(-1, 3), with_initializer=st.booleans(), max_valency=st.integers(1, 8))
def test_custom_combiner(num_weights, with_initializer, max_valency):
    def make(module):
        initializer = tf.constant_initializer(0.5) if with_initializer else None
        return lambda: module.CustomCombiner(
            lambda v, x: x[0], max_valency=max_valency, num_weights=num_weights, initializer=initializer
        )

    agree(make(TF), make(SHIM))
    ours = make(SHIM)() if num_weights <= 0 or with_initializer else None
    if ours is not None:
        theirs = make(TF)()
        assert ours._slot_names() == theirs._slot_names()
        assert str(ours).startswith("custom_combiner_")


@settings(max_examples=40, deadline=None)
@given(
    per_sample=st.integers(1, 128),
    limit=st.integers(1, 512),
    dropping=st.booleans(),
    stacking=st.booleans(),
)
def test_sparse_core_embedding_config(per_sample, limit, dropping, stacking):
    kwargs = dict(
        disable_table_stacking=stacking,
        max_ids_per_chip_per_sample=per_sample,
        max_ids_per_table={"t": limit},
        max_unique_ids_per_table={"t": limit},
        allow_id_dropping=dropping,
    )
    theirs, ours = TF.SparseCoreEmbeddingConfig(**kwargs), SHIM.SparseCoreEmbeddingConfig(**kwargs)
    for field in kwargs:
        assert getattr(theirs, field) == getattr(ours, field)
    defaults_tf, defaults_ours = TF.SparseCoreEmbeddingConfig(), SHIM.SparseCoreEmbeddingConfig()
    assert vars(defaults_tf) == vars(defaults_ours)


def test_table_stacking_disabled_keeps_one_stack_per_table_named_as_the_table():
    """The limits are keyed by stacked table name; with stacking disabled TensorFlow's stacker names each stack after
    its one table, which is how the limits are keyed here."""
    from tensorflow.python.tpu import _pywrap_sparse_core_layout as layout

    stacker = layout.SparseCoreLayoutStacker(
        num_partitions=1, sparse_cores_per_partition=4, disable_table_stacking=True
    )
    for name in ("a", "b"):
        stacker.AddTable(table_name=name, table_height=10, table_width=3, group="g", output_samples=4, num_features=1)
    stacks = {t.table_name: (t.stacked_table_name, t.sparse_core_shard_rotation) for t in stacker.GetLayouts().tables}
    assert stacks == {"a": ("a", 0), "b": ("b", 0)}


@settings(max_examples=40, deadline=None)
@given(
    tables=st.lists(
        st.tuples(st.integers(1, 40), st.integers(1, 20), st.integers(0, 1)),
        min_size=1,
        max_size=6,
        unique_by=lambda t: t,
    ),
    replicas=st.sampled_from([1, 2, 4]),
    disabled=st.booleans(),
)
def test_table_stacking_matches_tensorflows_stacker(tables, replicas, disabled):
    """Names, membership and rotations of the stacks, against TensorFlow 2.21's own `SparseCoreLayoutStacker`
    (small tables: its memory flags never split a stack)."""
    from tensorflow.python.tpu import _pywrap_sparse_core_layout as layout

    from tpu_embedding_shim.api import sparse_core_limits as limits

    named = [(f"t{i:02d}", height, dim, f"g{group}", 8) for i, (height, dim, group) in enumerate(tables)]
    stacker = layout.SparseCoreLayoutStacker(
        num_partitions=replicas, sparse_cores_per_partition=4, disable_table_stacking=disabled
    )
    for name, height, dim, group, samples in sorted(named):
        stacker.AddTable(
            table_name=name, table_height=height, table_width=dim, group=group, output_samples=samples, num_features=1
        )
    theirs = {t.table_name: (t.stacked_table_name, t.sparse_core_shard_rotation) for t in stacker.GetLayouts().tables}
    ours = {
        table: (stack.name, rotation)
        for stack in limits.stack_tables(named, num_replicas=replicas, disabled=disabled)
        for table, rotation in zip(stack.tables, stack.rotations)
    }
    assert ours == theirs
