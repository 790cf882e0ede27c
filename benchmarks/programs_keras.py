"""Worker of `python -m benchmarks programs`: a Keras `model.fit` program with TFRS's TPU embedding layer.

The program is written as public TPU programs are, and run unmodified two ways (`programs.launch`):

- `python -m tpu_embedding_shim.tensorflow -m benchmarks.programs_keras ...` (ours, the drop-in mode): the
  TPUClusterResolver finds the stand-in TPU, the TPUStrategy is the engine's, and TFRS's layer takes its TPU
  path (TensorFlow's mid-level `TPUEmbedding` on the engine; the tables trained by the layer's Adagrad);
- `python -m benchmarks.programs_keras ...` (TensorFlow's own CPU path): with no TPU the resolver raises
  ValueError, and the program falls back to the default strategy, as TensorFlow's TPU guides and Kaggle
  notebooks write it; TFRS's layer then builds TensorFlow's `TPUEmbeddingForServing` and Keras's Adagrad trains
  the tables as ordinary variables (sparse updates of the rows looked up).

The model is the Criteo-like one of `programs.py` (26 one-id features, 13 dense ones, an MLP), Adagrad for
tables and MLP. A Keras callback stamps the start of each training batch; steps W..W+S are timed
(`programs.rate`). Prints one JSON line: examples/s, the number of stamps, which strategy and embedding class
ran (so the runner can check each path is the one it names), and the versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import tensorflow as tf
import tensorflow_recommenders as tfrs

from .programs import PROGRAMS, batches, quick, rate


def strategy_or_default():
    """A TPUStrategy where a TPU is found, else the default strategy (the usual TPU-detection cell)."""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except ValueError:  # "Please provide a TPU Name to connect to.": no TPU here
        return tf.distribute.get_strategy()


def model(program, strategy):
    """The Criteo-like ranking model: TFRS's TPUEmbedding for the 26 categorical features, then an MLP."""
    names = [f"c{i}" for i in range(len(program.vocab))]
    feature_config = {
        name: tf.tpu.experimental.embedding.FeatureConfig(
            table=tf.tpu.experimental.embedding.TableConfig(
                vocabulary_size=v, dim=program.dim, combiner="sum", name=f"table_{name}"
            ),
            name=name,
        )
        for name, v in zip(names, program.vocab)
    }
    with strategy.scope():
        inputs = {name: tf.keras.Input(shape=(), batch_size=program.batch, dtype=tf.int64, name=name) for name in names}
        inputs["dense"] = tf.keras.Input(shape=(program.dense_features,), batch_size=program.batch, name="numeric")
        embedding = tfrs.layers.embedding.TPUEmbedding(
            feature_config=feature_config,
            optimizer=tf.tpu.experimental.embedding.Adagrad(program.learning_rate),
        )
        looked_up = embedding({name: inputs[name] for name in names})
        x = tf.keras.layers.Concatenate()([looked_up[name] for name in names] + [inputs["dense"]])
        for width in program.hidden:
            x = tf.keras.layers.Dense(width, activation="relu")(x)
        logits = tf.keras.layers.Dense(1)(x)
        keras_model = tf.keras.Model(inputs, logits)
        keras_model.compile(
            optimizer=tf.keras.optimizers.legacy.Adagrad(program.learning_rate),
            loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
        )
    return keras_model, embedding


class Stamps(tf.keras.callbacks.Callback):
    """The time each training batch starts."""

    def __init__(self):
        super().__init__()
        self.times: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.times.append(time.perf_counter())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--program", choices=[name for name, p in PROGRAMS.items() if p.kind == "keras"])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    tf.get_logger().setLevel("ERROR")
    program = quick(PROGRAMS[args.program]) if args.quick else PROGRAMS[args.program]
    features, labels = batches(program, count=8)
    features = {name: ids[..., 0] if name != "dense" else ids for name, ids in features.items()}  # ids [B]
    dataset = tf.data.Dataset.from_tensor_slices((features, labels[..., None])).repeat()
    strategy = strategy_or_default()
    keras_model, embedding = model(program, strategy)
    stamps = Stamps()
    total = program.warmup + program.steps + 2
    keras_model.fit(dataset, epochs=1, steps_per_epoch=total, callbacks=[stamps], verbose=0)
    versions = {"tensorflow": tf.__version__, "tensorflow_recommenders": tfrs.__version__}
    try:
        import numba

        versions["numba"] = numba.__version__
    except ImportError:
        versions["numba"] = "missing"
    result = {
        "examples_per_s": rate(stamps.times, program),
        "stamps": len(stamps.times),
        "strategy": type(strategy).__module__ + "." + type(strategy).__name__,
        "embedding": type(embedding._tpu_embedding).__module__,
        "versions": versions,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
