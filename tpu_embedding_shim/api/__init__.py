"""TensorFlow's TPU-embedding objects, with TensorFlow's arguments, defaults, validation and exception types.

Feature columns, `EmbeddingConfigSpec`, the optimizer parameter classes,
the mid-level `TPUEmbedding` / `TPUEmbeddingV2` / `TPUEmbeddingForServing`,
`tf.nn`'s lookups, `tf.train.Checkpoint` and the `TPUStrategy` stand-in,
one idea per module. They lower to the spec layer and run on the engine.
A program reaches them at TensorFlow's paths through the namespaces
(`import tpu_embedding_shim as tf`, `compat/v1`, `compat/v2`).
"""
