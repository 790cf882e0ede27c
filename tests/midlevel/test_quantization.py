"""Quantized tables through the mid-level API: `TableConfig(quantization_config=QuantizationConfig(...))`.

`TPUEmbedding` and `TPUEmbeddingV2` look rows up as a TPU does: the activations are TensorFlow's formula
applied to the rows before the combiner, and training updates the float32 table as if nothing were
quantized. `TPUEmbeddingForServing` reads the float32 table as TensorFlow's CPU lookups do.
"""

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine.lookup import pooled_lookup, quantization_parameters, quantize
from tpu_embedding_shim.engine.ragged import Ragged
from tpu_embedding_shim.spec import QuantizationSpec

E = tf.tpu.experimental.embedding
V, D, LR = 6, 3, 0.5
IDS = [[0, 5], [3], [1, 1, 4]]
BATCH = Ragged(np.array([0, 5, 3, 1, 1, 4]), np.array([0, 2, 3, 6]), None)
QUANTIZATION = QuantizationSpec(num_buckets=9, lower=-1.0, upper=1.0)
GRADS = np.array([[1.0, -2.0, 0.5], [0.25, 0.0, -1.0], [3.0, 1.0, -0.75]], np.float32)


def initial(shape, dtype=None):
    """Values spread over [-2, 2], most between levels, some outside [-1, 1]."""
    return np.linspace(-2.0, 2.0, shape[0] * shape[1], dtype=np.float32).reshape(shape)


def feature_config(quantized: bool):
    config = E.QuantizationConfig(num_buckets=9, lower=-1.0, upper=1.0) if quantized else None
    table = E.TableConfig(V, D, initializer=initial, combiner="mean", name="t", quantization_config=config)
    return {"f": E.FeatureConfig(table=table)}


def v1_embedding(quantized):
    embedding = E.TPUEmbedding(feature_config(quantized), optimizer=E.SGD(LR))
    embedding.build(per_replica_batch_size=len(IDS))

    def step():
        embedding.enqueue({"f": tf.ragged.constant(IDS)}, training=True)
        activations = embedding.dequeue()["f"]
        embedding.apply_gradients({"f": GRADS})
        return activations

    return embedding, step


def v2_embedding(quantized):
    with tf.distribute.TPUStrategy().scope():
        embedding = E.TPUEmbeddingV2(feature_config(quantized), optimizer=E.SGD(LR))

    def step():
        activations, preserved = embedding.embedding_lookup({"f": tf.ragged.constant(IDS)})
        embedding.apply_gradients({"f": GRADS}, preserved)
        return activations["f"]

    return embedding, step


def quantized_rows(table):
    return quantize(table, quantization_parameters(QUANTIZATION))


@pytest.mark.parametrize("make", [v1_embedding, v2_embedding], ids=["TPUEmbedding", "TPUEmbeddingV2"])
def test_a_quantized_table_trains_on_the_formulas_activations(make):
    quantized, step = make(True)
    plain, plain_step = make(False)
    for _ in range(3):
        table = quantized.engine.table("t")
        activations = step()
        np.testing.assert_array_equal(activations, pooled_lookup(quantized_rows(table), BATCH, "mean"))
        assert np.all(np.abs(activations) <= 1.0)  # a mean of levels in [-1, 1]
        plain_step()
        # the same gradients give the same float32 table: the backward pass ignores quantization
        np.testing.assert_array_equal(quantized.engine.table("t"), plain.engine.table("t"))
    assert not np.array_equal(quantized_rows(table), table)  # the case quantizes something


def test_serving_reads_the_float32_table_as_tensorflows_cpu_lookup_does():
    embedding, step = v1_embedding(True)
    step()
    serving = E.TPUEmbeddingForServing(feature_config(True), optimizer=E.SGD(LR))
    serving.build()
    table = embedding.engine.table("t")
    serving.restore_state({"t": {"embedding": table, **embedding.engine.slots("t")}}, step=1)
    got = serving({"f": tf.ragged.constant(IDS)})["f"]
    np.testing.assert_array_equal(got, pooled_lookup(table, BATCH, "mean"))
    assert not any("quantization" in line for line in serving.engine.describe())
