"""SparseCore's partitioning, limits and id dropping, checked against jax-tpu-embedding's C++ input preprocessing.

TensorFlow 2.21's wheels register no CPU kernel for its SparseCore preprocessing ops, so TensorFlow cannot be the
oracle. jax-tpu-embedding 0.1.0 (`pybind_input_preprocessing.preprocess_sparse_dense_matmul_input`, the C++ that
its `embedding.preprocess_sparse_dense_matmul_input` calls) runs on a CPU, with no TPU. It shares most of
TensorFlow's rules (`tensorflow/core/tpu/kernels/sparse_core_preprocess_ops.cc`), and
`api/sparse_core_limits.py` follows TensorFlow where they differ:

- Shared, compared entry by entry: SparseCore c of a chip gets samples [c*k, (c+1)*k) of every feature (k = the
  feature's samples / 4); an id goes to partition `(id + rotation) % P` (P = 4 * chips, a power of two) and row
  `id // P + the table's row offset in the stack`; equal (sample, id) pairs merge and their gains add; a gain is
  the weight over the whole sample's sum (`mean`) or root of the sum of squares (`sqrtn`); within a partition the
  entries are sorted by table in the stack, id, then feature and sample; each partition is padded to 8. The
  per-partition id and unique-id counts and each SparseCore's padded size are the same numbers.
- The buffer: TensorFlow fills one buffer per chip (`max_ids_per_chip_per_sample * samples`) SparseCore by
  SparseCore and drops everything after the first entry that does not fit; jax-tpu-embedding gives each
  SparseCore its own segment (`suggested_coo_buffer_size_per_device / 4`) and drops the tail of each. The rule
  inside a segment is the same, so TensorFlow's chip buffer is jax-tpu-embedding's run SparseCore by SparseCore
  with the budget the earlier SparseCores left: that is what the tests compare.
- The per-partition limits: over `max_ids_per_partition` or `max_unique_ids_per_partition`, TensorFlow raises
  (`InvalidArgumentError`) whatever `allow_id_dropping` says; jax-tpu-embedding drops the entries past the limit
  with `allow_id_dropping` and aborts the process (`LOG(FATAL)`) without it. Compared: when a limit is exceeded
  (the same counts); not compared: what jax-tpu-embedding then drops (TensorFlow drops nothing there).
- jax-tpu-embedding takes one combiner per stacked table; TensorFlow one per table. The inputs here give every
  table one combiner.

Runs in the venv with the migrate-keras extra (CI's keras-rs / jax-tpu-embedding stage); skipped elsewhere.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax_preprocessing = pytest.importorskip(
    "jax_tpu_embedding.sparsecore.lib.core.pybind_input_preprocessing",
    reason="jax-tpu-embedding is not installed (the migrate-keras venv runs this)",
)

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as jax_spec  # noqa: E402

import tpu_embedding_shim as tf  # noqa: E402
from tpu_embedding_shim.api import sparse_core_limits as limits  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

E = tf.tpu.experimental.embedding
SC = limits.SPARSE_CORES_PER_CHIP


# Generated batches -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """Tables, features on them and one replica's batch: ids and weights per sample, per feature."""

    replicas: int
    tables: tuple[tuple[int, int], ...]  # (rows, dim) of table "t{j}"
    features: tuple[tuple[int, tuple[tuple[tuple[int, float], ...], ...]], ...]  # (table, samples of (id, weight))
    combiner: str

    @property
    def partitions(self) -> int:
        return SC * self.replicas

    def layouts(self) -> dict[str, limits.sparsecore_layout.TableLayout]:
        samples = {j: 0 for j in range(len(self.tables))}
        for table, rows in self.features:
            samples[table] += len(rows)
        request = [(f"t{j}", rows, dim, "g", samples[j]) for j, (rows, dim) in enumerate(self.tables)]
        layouts = limits.stack_layouts(request, num_replicas=self.replicas, disabled=False)
        return {layout.table_name: layout for layout in layouts}

    def stacks(self) -> list[limits.Stack]:
        request = [(f"t{j}", rows, dim, "g", 0) for j, (rows, dim) in enumerate(self.tables)]
        return limits.stack_tables(request, num_replicas=self.replicas, disabled=False)

    def stack_features(self, stack: limits.Stack) -> list[int]:
        """The features of a stack, in feature order (TensorFlow's and the JAX specs' order)."""
        return [f for f, (table, _) in enumerate(self.features) if f"t{table}" in stack.tables]

    def ours(self, stack: limits.Stack, per_sample: int) -> limits.TableStatistics:
        entries = []
        for f in self.stack_features(stack):
            table, rows = self.features[f]
            position = stack.tables.index(f"t{table}")
            samples = np.array([s for s, row in enumerate(rows) for _ in row], np.int64)
            ids = np.array([i for row in rows for i, _ in row], np.int64)
            entries.append((samples, ids, len(rows), position, stack.rotations[position]))
        return limits.table_statistics(
            stack.name, entries, num_replicas=self.replicas, max_ids_per_chip_per_sample=per_sample
        )

    def expected(self, stack: limits.Stack, entries: np.ndarray) -> list[tuple[int, int, int, int]]:
        """Our `(feature, sample, id)` entries as jax-tpu-embedding writes them: (SparseCore, partition, row in the
        partition's shard, sample on the SparseCore)."""
        layouts = self.layouts()
        features = self.stack_features(stack)
        offsets = np.cumsum([0] + [len(self.features[f][1]) // SC for f in features])
        out = []
        for k, s, i in entries.tolist():
            table, rows = self.features[features[k]]
            layout = layouts[f"t{table}"]
            chunk = len(rows) // SC
            partition = (i + layout.sparse_core_shard_rotation) % self.partitions
            row = i // self.partitions + layout.sparse_core_shard_row_offset
            out.append((s // chunk, partition, row, int(offsets[k]) + s % chunk))
        return out

    def table_entry(self, stack: limits.Stack, core: int, partition: int, row: int, sample: int):
        """jax-tpu-embedding's (SparseCore, partition, row, sample on the SparseCore) back to (table, sample in the
        table's features, id): the key of our preserved CSR."""
        features = self.stack_features(stack)
        starts = np.cumsum([0] + [len(self.features[f][1]) // SC for f in features]).tolist()
        k = int(np.searchsorted(starts, sample, side="right")) - 1
        table, rows = self.features[features[k]]
        layout = self.layouts()[f"t{table}"]
        identity = (row - layout.sparse_core_shard_row_offset) * self.partitions
        identity += (partition - layout.sparse_core_shard_rotation) % self.partitions
        before = sum(len(r) for t, r in self.features[: features[k]] if t == table)
        return f"t{table}", before + core * (len(rows) // SC) + sample - starts[k], identity


@st.composite
def cases(draw, *, replicas=(1, 2, 4), batches=(4, 8, 12)):
    tables = tuple(
        (draw(st.integers(1, 80)), draw(st.sampled_from([2, 4, 8, 12])))  # widths 8, 8, 8, 16: some stack
        for _ in range(draw(st.integers(1, 3)))
    )
    features = []
    for f in range(len(tables) + draw(st.integers(0, 2))):  # every table has a feature (jax-tpu-embedding needs one)
        table = f if f < len(tables) else draw(st.integers(0, len(tables) - 1))
        entry = st.tuples(st.integers(0, tables[table][0] - 1), st.sampled_from([0.5, 1.0, 2.0, 3.0]))
        size = draw(st.sampled_from(batches))
        rows = tuple(draw(st.lists(st.lists(entry, max_size=5).map(tuple), min_size=size, max_size=size)))
        features.append((table, rows))
    return Case(
        replicas=draw(st.sampled_from(replicas)),
        tables=tables,
        features=tuple(features),
        combiner=draw(st.sampled_from(["sum", "mean", "sqrtn"])),
    )


# jax-tpu-embedding's preprocessing ------------------------------------------------------------------------------


def jax_run(case: Case, stack: limits.Stack, *, max_ids, max_unique_ids, allow_id_dropping, per_sc_buffer=None):
    """One replica's batch of one stacked table through jax-tpu-embedding's C++ preprocessing, with the stack laid
    out as ours (rotation, row offset), on 1 local of `replicas` chips of 4 SparseCores.

    Returns ([(SparseCore, partition, row, sample on the SparseCore, gain)] in buffer order, its stats)."""
    layouts = case.layouts()
    p = case.partitions
    opt = jax_spec.SGDOptimizerSpec(learning_rate=0.1)
    stacked = jax_spec.StackedTableSpec(
        stack_name=stack.name,
        stack_vocab_size=sum(layouts[t].unsharded_padded_shape[0] for t in stack.tables),
        stack_embedding_dim=layouts[stack.tables[0]].unsharded_padded_shape[1],
        optimizer=opt,
        combiner=case.combiner,
        total_sample_count=sum(len(case.features[f][1]) for f in case.stack_features(stack)),
        max_ids_per_partition=max_ids,
        max_unique_ids_per_partition=max_unique_ids,
        suggested_coo_buffer_size_per_device=None if per_sc_buffer is None else SC * per_sc_buffer,
    )
    specs, ids, weights = [], [], []
    row_offset = 0
    for f in case.stack_features(stack):
        table, rows = case.features[f]
        layout = layouts[f"t{table}"]
        table_spec = jax_spec.TableSpec(
            vocabulary_size=case.tables[table][0],
            embedding_dim=case.tables[table][1],
            initializer=lambda *_: None,
            optimizer=opt,
            combiner=case.combiner,
            name=f"t{table}",
            max_ids_per_partition=max_ids,
            max_unique_ids_per_partition=max_unique_ids,
            _setting_in_stack=jax_spec.TableSettingInStack(
                stack_name=stack.name,
                padded_vocab_size=layout.unsharded_padded_shape[0],
                padded_embedding_dim=layout.unsharded_padded_shape[1],
                row_offset_in_shard=layout.sparse_core_shard_row_offset,
                shard_rotation=layout.sparse_core_shard_rotation,
            ),
            _stacked_table_spec=stacked,
        )
        specs.append(
            jax_spec.FeatureSpec(
                table_spec=table_spec,
                input_shape=[len(rows) * case.replicas, 1],
                output_shape=[len(rows) * case.replicas, case.tables[table][1]],
                name=f"f{f}",
                _id_transformation=jax_spec.FeatureIdTransformation(
                    row_offset=row_offset,  # the features before it in the stack, global samples
                    col_offset=layout.sparse_core_shard_row_offset * p,
                    col_shift=layout.sparse_core_shard_rotation,
                ),
            )
        )
        row_offset += len(rows) * case.replicas
        ids.append(np.array([np.array([i for i, _ in row], np.int32) for row in rows] + [None], object)[:-1])
        weights.append(np.array([np.array([w for _, w in row], np.float32) for row in rows] + [None], object)[:-1])
    pointers, rows_out, samples_out, gains_out, _, stats = jax_preprocessing.preprocess_sparse_dense_matmul_input(
        ids,
        weights,
        specs,
        1,
        case.replicas,
        num_sc_per_device=SC,
        allow_id_dropping=allow_id_dropping,
    )
    pointers, rows_out = pointers[stack.name], rows_out[stack.name]
    samples_out, gains_out = samples_out[stack.name], gains_out[stack.name]
    per_sc, pointers_per_sc = rows_out.size // SC, pointers.size // SC
    entries = []
    for c in range(SC):  # SparseCore c's segment: partition q's entries from the 8-aligned end of q - 1 to its end
        start = 0
        for q, end in enumerate(pointers[c * pointers_per_sc : c * pointers_per_sc + p].tolist()):
            for y in range(c * per_sc + start, c * per_sc + end):
                entries.append((c, q, int(rows_out[y]), int(samples_out[y]), float(gains_out[y])))
            start = -(-end // 8) * 8
    return entries, stats


def chip_buffer(case: Case, stack: limits.Stack, ours: limits.TableStatistics, per_sample: int):
    """TensorFlow's chip buffer of `per_sample * samples` entries, from jax-tpu-embedding: SparseCore c gets the
    budget SparseCores 0..c-1 left (their padded sizes, as jax-tpu-embedding reports them), in a segment of its
    own. Returns the kept entries in buffer order."""
    # Dropping allowed: counts above ours would drop (and fail the test) rather than abort the process.
    limit = dict(max_ids=max(ours.max_ids, 1), max_unique_ids=max(ours.max_unique_ids, 1), allow_id_dropping=True)
    everything, stats = jax_run(case, stack, **limit)
    assert stats.dropped_id_count[stack.name] == 0
    required = stats.required_buffer_sizes[stack.name].tolist()
    budget = per_sample * sum(len(case.features[f][1]) for f in case.stack_features(stack))
    kept = []
    for c in range(SC):
        left = budget - sum(required[:c])
        if left >= required[c]:
            kept += [e for e in everything if e[0] == c]
        elif left > 0:
            cut, _ = jax_run(case, stack, **limit, per_sc_buffer=left)
            kept += [e for e in cut if e[0] == c]
    return kept


# The tests ----------------------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(case=cases())
def test_partitions_counts_and_buffer_order_agree_with_jax(case):
    for stack in case.stacks():
        ours = case.ours(stack, per_sample=4096)
        theirs, stats = jax_run(
            case,
            stack,
            max_ids=max(ours.max_ids, 1),
            max_unique_ids=max(ours.max_unique_ids, 1),
            allow_id_dropping=True,  # a count above ours drops (and fails below) rather than aborting the process
        )
        assert stats.dropped_id_count[stack.name] == 0
        assert stats.max_ids_per_partition[stack.name].tolist() == ours.ids.max(axis=0).tolist()
        assert stats.max_unique_ids_per_partition[stack.name].tolist() == ours.unique_ids.max(axis=0).tolist()
        padded = -(-ours.ids // 8) * 8
        assert stats.required_buffer_sizes[stack.name].tolist() == padded.sum(axis=1).tolist()
        assert int(padded.sum()) == ours.buffer_needed
        assert [e[:4] for e in theirs] == case.expected(stack, ours.entries)


@settings(max_examples=80, deadline=None)
@given(case=cases(), per_sample=st.sampled_from([2, 4, 6]))
def test_the_chip_buffer_drops_what_jax_drops_sparsecore_by_sparsecore(case, per_sample):
    for stack in case.stacks():
        ours = case.ours(stack, per_sample=per_sample)
        kept = chip_buffer(case, stack, ours, per_sample)
        total = ours.entries.shape[0]
        assert ours.dropped == total - len(kept)
        assert [e[:4] for e in kept] == case.expected(stack, ours.entries[: total - ours.dropped])
        assert case.expected(stack, ours.dropped_entries) == case.expected(stack, ours.entries)[len(kept) :]


@settings(max_examples=80, deadline=None)
@given(case=cases(), max_ids=st.integers(1, 6), max_unique_ids=st.integers(1, 6))
def test_a_per_partition_limit_is_exceeded_exactly_when_jax_says_so(case, max_ids, max_unique_ids):
    # TensorFlow raises there, whatever allow_id_dropping says; jax-tpu-embedding drops with allow_id_dropping
    # (and aborts without it): compared is when, and the counts.
    for stack in case.stacks():
        ours = case.ours(stack, per_sample=4096)
        _, stats = jax_run(case, stack, max_ids=max_ids, max_unique_ids=max_unique_ids, allow_id_dropping=True)
        assert stats.max_ids_per_partition[stack.name].tolist() == ours.ids.max(axis=0).tolist()
        assert stats.max_unique_ids_per_partition[stack.name].tolist() == ours.unique_ids.max(axis=0).tolist()
        try:
            limits.check_limits(ours, max_ids=max_ids, max_unique_ids=max_unique_ids, allow_id_dropping=True)
            refused = False
        except ValueError as error:
            assert "Sparse core" in str(error)
            refused = True
        assert refused == (stats.dropped_id_count[stack.name] > 0)


@settings(max_examples=40, deadline=None)
@given(case=cases(replicas=(1,), batches=(8,)), per_sample=st.sampled_from([2, 4, 64]))
def test_tpu_embedding_v2_keeps_the_entries_and_gains_jax_keeps(case, per_sample):
    tables = [
        E.TableConfig(vocabulary_size=rows, dim=dim, combiner=case.combiner, name=f"t{j}")
        for j, (rows, dim) in enumerate(case.tables)
    ]
    names = [f"f{f}" for f in range(len(case.features))]  # sorted: the feature order is this order
    config = {name: E.FeatureConfig(table=tables[table], name=name) for name, (table, _) in zip(names, case.features)}
    ids = {
        n: tf.ragged.constant([[i for i, _ in r] for r in rows], dtype=tf.int64)
        for n, (_, rows) in zip(names, case.features)
    }
    weights = {
        n: tf.ragged.constant([[w for _, w in r] for r in rows], dtype=tf.float32)
        for n, (_, rows) in zip(names, case.features)
    }
    sc_config = E.SparseCoreEmbeddingConfig(max_ids_per_chip_per_sample=per_sample, allow_id_dropping=True)
    with tf.distribute.TPUStrategy().scope():
        embedding = E.TPUEmbeddingV2(config, E.SGD(0.1), sparse_core_embedding_config=sc_config)
    _, preserved = embedding(ids, weights=weights)
    layouts = case.layouts()
    assert {
        t: (x.stacked_table_name, x.sparse_core_shard_row_offset, x.sparse_core_shard_rotation)
        for t, x in layouts.items()
    } == {
        t: (x.stacked_table_name, x.sparse_core_shard_row_offset, x.sparse_core_shard_rotation)
        for t, x in embedding.embedding_layouts.items()
    }
    for stack in case.stacks():
        ours = embedding.sparse_core_statistics[stack.name]
        kept = chip_buffer(case, stack, ours, per_sample)
        assert embedding.dropped_ids[-1][stack.name] == ours.entries.shape[0] - len(kept)
        theirs = {}  # jax-tpu-embedding's kept entries as (table, sample in the table's features, id) -> gain
        for c, partition, row, sample, gain in kept:
            key = case.table_entry(stack, c, partition, row, sample)
            theirs[key] = theirs.get(key, 0.0) + gain
        mine = {}
        for table in stack.tables:
            csr = preserved[table]
            for s, i, g in zip(
                csr.sorted_sample_ids.tolist(), csr.sorted_token_ids.tolist(), csr.sorted_gains.tolist()
            ):
                mine[(table, s, i)] = mine.get((table, s, i), 0.0) + g
        assert sorted(mine) == sorted(theirs)
        for key, gain in theirs.items():
            assert mine[key] == pytest.approx(gain, rel=1e-5), key


# Sample 0 sends ids 1 and 5 to partition 1: 2 ids where the limit is 1.
OVER_ONE_ID = Case(
    replicas=1,
    tables=((64, 2),),
    features=((0, (((1, 1.0), (5, 1.0)), ((2, 1.0),), ((3, 1.0),), ((4, 1.0),))),),
    combiner="sum",
)


def test_jax_aborts_the_process_where_tensorflow_raises():
    # Over a per-partition limit without allow_id_dropping: TensorFlow's op fails with InvalidArgumentError ("Sparse
    # core 1 gets 2 ids while the max ids per sparse core is set to be 1 ..."), jax-tpu-embedding 0.1.0 LOG(FATAL)s.
    config = E.SparseCoreEmbeddingConfig(max_ids_per_table={"t0": 1})
    with tf.distribute.TPUStrategy().scope():
        embedding = E.TPUEmbeddingV2(
            {"f0": E.FeatureConfig(table=E.TableConfig(vocabulary_size=64, dim=2, name="t0"))},
            E.SGD(0.1),
            sparse_core_embedding_config=config,
        )
    with pytest.raises(ValueError, match="Sparse core 1 gets 2 ids while the max ids per sparse core is set to be 1"):
        embedding({"f0": tf.ragged.constant([[i for i, _ in row] for row in OVER_ONE_ID.features[0][1]])})
    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        import test_sparsecore_preprocessing_oracle as oracle
        case = oracle.OVER_ONE_ID
        oracle.jax_run(case, case.stacks()[0], max_ids=1, max_unique_ids=256, allow_id_dropping=False)
        print("returned")
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script, HERE], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert done.returncode == -signal.SIGABRT and "returned" not in done.stdout
    assert (
        "Observed max ids per partition: 2 for table: t0 is greater than the set max ids per partition: 1"
        in done.stderr
    )
