"""Quantized tables against a real TensorFlow: its CPU lookups (`TPUEmbeddingForServing`,
`serving_embedding_lookup`) ignore `quantization_config`, and so does our serving path; only a TPU lookup
(ours: `TPUEmbedding.dequeue`, `TPUEmbeddingV2`) quantizes. No TensorFlow CPU path computes the
quantization, so the formula itself is checked in tests/engine/test_quantization.py.

Runs only where TensorFlow is installed (see __init__.py).
"""

import numpy as np
import pytest

tf = pytest.importorskip(
    "tensorflow", reason="the TensorFlow interop tests need TensorFlow (tensorflow-cpu==2.15.1 in a separate venv)"
)

import tpu_embedding_shim as shim  # noqa: E402

TF, SHIM = tf.tpu.experimental.embedding, shim.tpu.experimental.embedding
VALUES = np.array([[0.1, 0.3], [0.62, 2.0], [-5.0, 0.0], [0.9, -0.4]], np.float32)
IDS = [[0, 1], [2], [3, 3, 1]]


def config(module):
    table = module.TableConfig(
        vocabulary_size=4,
        dim=2,
        initializer=lambda shape, dtype=None: tf.constant(VALUES) if module is TF else VALUES,
        combiner="mean",
        name="t",
        quantization_config=module.QuantizationConfig(num_buckets=5, lower=-1.0, upper=1.0),
    )
    return {"f": module.FeatureConfig(table=table)}


def plain_means():
    return np.stack([VALUES[ids].mean(axis=0) for ids in IDS]).astype(np.float32)


def tensorflow_lookup(how):
    """TensorFlow's CPU lookup of IDS: `TPUEmbeddingForServing.embedding_lookup`, or `serving_embedding_lookup`
    on the tables of a `TPUEmbedding` created outside a TPUStrategy (which has no lookup of its own)."""
    features = {"f": tf.ragged.constant(IDS, dtype=tf.int64)}
    if how == "TPUEmbeddingForServing":
        serving = TF.TPUEmbeddingForServing(config(TF), optimizer=TF.SGD(0.1))
        serving.build()
        return serving.embedding_lookup(features)["f"].numpy()
    feature_config = config(TF)
    embedding = TF.TPUEmbedding(feature_config, optimizer=TF.SGD(0.1))
    embedding.build(per_replica_batch_size=3)
    return TF.serving_embedding_lookup(features, None, embedding.embedding_tables, feature_config)["f"].numpy()


@pytest.mark.parametrize("how", ["TPUEmbeddingForServing", "serving_embedding_lookup"])
def test_tensorflows_cpu_lookups_ignore_quantization_as_our_serving_does(how):
    got_tf = tensorflow_lookup(how)
    ours = SHIM.TPUEmbeddingForServing(config(SHIM), optimizer=SHIM.SGD(0.1))
    got_ours = ours({"f": shim.ragged.constant(IDS)})["f"]
    np.testing.assert_allclose(got_tf, plain_means(), rtol=1e-6)  # not quantized: 2.0 and -5.0 kept
    np.testing.assert_allclose(got_ours, got_tf, rtol=1e-6)


def test_our_tpu_lookup_quantizes_where_tensorflows_cpu_lookup_does_not():
    ours = SHIM.TPUEmbedding(config(SHIM), optimizer=SHIM.SGD(0.1))
    ours.build(per_replica_batch_size=3)
    ours.enqueue({"f": shim.ragged.constant(IDS)}, training=False)
    levels = np.array([[0.0, 0.5], [0.5, 1.0], [-1.0, 0.0], [1.0, -0.5]], np.float32)  # the rows quantized
    want = np.stack([levels[ids].mean(axis=0) for ids in IDS]).astype(np.float32)
    np.testing.assert_allclose(ours.dequeue()["f"], want, rtol=1e-6)
