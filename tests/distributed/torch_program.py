"""A TPUEstimator program with a torch dense part, run by test_torch_bridge.py alone or under `mpiexec -n W`.

`python torch_program.py MODEL_DIR OUT.json REDUCTION STEPS`: REDUCTION is
torch_bridge.train_op's. With "sum" the loss is the mean over the GLOBAL
batch (each replica divides its sum by the global batch size): every
gradient is one process's. With "mean" the loss is each replica's own mean,
as most TPU programs write it: the dense gradients are averaged
(`CrossShardOptimizer`'s default), the embeddings get the replicas' sum.
Replica 0 writes OUT.json: the module's weights and the tables.
"""

import json
import sys

import numpy as np
import torch

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import replicas
from tpu_embedding_shim.api.tensors import RaggedTensor
from tpu_embedding_shim.runner import torch_bridge

fc = tf.compat.v2.feature_column
tpu = tf.compat.v2.tpu.experimental
BATCH = 12


def input_fn(params):
    _, replica, count, _ = params["context"].current_input_fn_deployment()
    rng = np.random.default_rng(0)
    for _ in range(6):
        rows = [list(rng.integers(0, 9, size=rng.integers(1, 4))) for _ in range(BATCH)]
        labels = rng.integers(0, 2, size=BATCH).astype(np.float32)
        yield replicas.replica_slice(({"a": RaggedTensor.from_list(rows)}, labels), replica=replica, replicas=count)


def main(model_dir, out, reduction, steps):
    column = tpu.embedding_column(fc.categorical_column_with_identity("a", 9), 4, combiner="mean")

    def model_fn(features, labels, mode, params):
        state = params["dense_state"]
        if "module" not in state:
            torch.manual_seed(0)
            state["module"] = torch.nn.Linear(4, 1)
            state["optimizer"] = torch.optim.SGD(state["module"].parameters(), lr=0.5)
        x = torch_bridge.to_torch(tf.keras.layers.DenseFeatures([column])(features))
        logits = state["module"](x).squeeze(-1)
        losses = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.from_numpy(labels), reduction="sum")
        scale = len(labels) * (params["context"].num_replicas if reduction == "sum" else 1)
        loss = losses / scale
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=loss, train_op=torch_bridge.train_op(state["optimizer"], reduction=reduction)
        )

    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(
            model_dir=model_dir, tf_random_seed=1, tpu_config=tf.estimator.tpu.TPUConfig(num_shards=6)
        ),
        train_batch_size=BATCH,
        embedding_config_spec=tf.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=[column],
            optimization_parameters=tf.estimator.tpu.experimental.StochasticGradientDescentParameters(0.5),
        ),
    )
    engine = estimator.engine  # built fresh (collective under mpiexec)
    initial = engine.table(engine.spec.tables[0].name)
    estimator.train(input_fn, steps=int(steps))
    module = estimator.dense_state["module"]
    table = estimator.get_variable_value(estimator.get_variable_names()[0])
    record = {
        "weight": module.weight.detach().numpy().tolist(),
        "bias": module.bias.detach().numpy().tolist(),
        "table": np.asarray(table).tolist(),
        "initial": initial.tolist(),
    }
    if replicas.is_chief():
        with open(out, "w") as handle:
            json.dump(record, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
