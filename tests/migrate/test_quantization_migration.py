"""Quantized tables (TF's simulated quantization) through the migration: no target drops it silently.

The source is a mid-level feature config whose `TableConfig` has a
`quantization_config`, lowered as `TPUEmbedding` lowers it. TF's mid-level
API and jax-tpu-embedding take the quantization; keras-rs and TorchRec have
none, so the migration refuses them without `allow_lossy`. The mid-level
API restored from the migration looks rows up quantized, as the source's
engine does.
"""

from __future__ import annotations

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.migrate import (
    EXACT,
    IMPOSSIBLE,
    TARGETS,
    LossyMigrationError,
    load_source,
    migrate,
    to_jax_tpu_embedding,
    to_tf_midlevel,
)
from tpu_embedding_shim.spec import QuantizationSpec

from .models import midlevel_from_build, midlevel_from_code, quantized_midlevel_spec

QUANTIZATION = QuantizationSpec(num_buckets=5, lower=-0.25, upper=0.25)
VALUE = "QuantizationSpec(num_buckets=5, lower=-0.25, upper=0.25)"
LOSSY = {"torchrec": "TorchRec has no simulated quantization", "keras-rs": "TableConfig has no quantization"}


def _trained(spec, directory, steps=2):
    """The spec's engine after `steps` steps of random gradients, and its checkpoint."""
    engine = Engine(spec, seed=5, kernels="numpy")
    rng = np.random.default_rng(0)
    for _ in range(steps):
        result = engine.forward(_batch(spec))
        engine.apply_gradients(
            result, {k: rng.normal(size=v.shape).astype(np.float32) for k, v in result.activations.items()}
        )
    return engine, engine.save(str(directory))


def _batch(spec):
    batch = {"a": [[0, 1, 2], [3]], "b": [[4, 5], [6]], "s": [[7, 8], [9, 10, 11]]}
    return {f.name: batch[f.name] for f in spec.features}


def test_load_source_keeps_the_quantization_of_a_midlevel_config(tmp_path):
    spec = quantized_midlevel_spec(sequence=True)
    assert spec.tables[0].quantization == QUANTIZATION and spec.tables[1].quantization is None
    fresh = load_source(spec)
    engine, path = _trained(spec, tmp_path / "model")
    resumed = load_source(spec, path)
    for source in (fresh, resumed):
        assert source.table("q").quantization == QUANTIZATION
        assert source.table("p").quantization is None
    np.testing.assert_array_equal(resumed.state["q"]["embedding"], engine.table("q"))


@pytest.mark.parametrize("to", sorted(TARGETS))
def test_every_target_reports_the_quantization(to):
    spec = quantized_midlevel_spec()
    if to in LOSSY:
        with pytest.raises(LossyMigrationError, match="table q: quantization=QuantizationSpec") as raised:
            migrate(to, spec)
        assert [(r.where, r.option) for r in raised.value.rows] == [("table q", "quantization")]
        assert LOSSY[to] in raised.value.rows[0].how
        report = migrate(to, spec, allow_lossy=True).report
        assert report.row("table q", "quantization").status == IMPOSSIBLE
    else:
        report = migrate(to, spec).report
        row = report.row("table q", "quantization")
        assert (row.status, row.value) == (EXACT, VALUE)
        assert "quantization_config=QuantizationConfig(" in row.target
    unset = report.row("table p", "quantization")
    assert (unset.status, unset.value, unset.target) == (EXACT, "None", "(not set)")


def test_the_tf_midlevel_code_and_configs_carry_the_quantization(tmp_path):
    migration = to_tf_midlevel(quantized_midlevel_spec(sequence=True))
    lines = [line.strip() for line in migration.code.splitlines() if "quantization_config" in line]
    assert lines == [
        "quantization_config=tf.tpu.experimental.embedding.QuantizationConfig(num_buckets=5, lower=-0.25, upper=0.25),"
    ]
    built = migration.config["feature_config"]
    assert built["a"].table is built["s"].table
    q, p = built["a"].table.quantization_config, built["b"].table.quantization_config
    assert (q.num_buckets, q.lower, q.upper) == (5, -0.25, 0.25) and p is None


@pytest.mark.parametrize("make", [midlevel_from_code, midlevel_from_build], ids=["generated code", "built"])
def test_the_migrated_midlevel_api_looks_up_quantized_as_the_source(tmp_path, make):
    spec = quantized_midlevel_spec(sequence=True)
    engine, path = _trained(spec, tmp_path / "model")
    assert np.abs(engine.table("q")).max() > 0.25  # the quantization clips some values
    embedding = make(to_tf_midlevel(spec, path), tmp_path / "out")
    batch = _batch(spec)
    expected = engine.forward(batch).activations
    embedding.enqueue({k: tf.ragged.constant(v) for k, v in batch.items()}, training=False)
    activations = embedding.dequeue()
    for name, values in expected.items():
        np.testing.assert_array_equal(activations[name], values, err_msg=name)
    levels = np.float32([-0.25, -0.125, 0.0, 0.125, 0.25])
    assert np.isin(activations["s"][np.nonzero(activations["s"])], levels).all()  # one row per position: levels


def test_the_jax_code_passes_jax_tpu_embeddings_quantization_config():
    code = to_jax_tpu_embedding(quantized_midlevel_spec()).code
    lines = [line.strip() for line in code.splitlines() if "quantization_config" in line]
    assert lines == [
        "quantization_config=embedding_spec.QuantizationConfig(min_value=-0.25, max_value=0.25, num_buckets=5),"
    ]
