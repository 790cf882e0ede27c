"""What TPUEstimator logs once, when it first runs: what it emulates, and what trains the tables.

The runner differs from TensorFlow's CPU path on purpose (the embeddings
train with the EmbeddingConfigSpec's optimizer even with use_tpu=False,
and `partition_strategy='mod'` works); it says so in the log rather than
silently.
"""

from __future__ import annotations

import logging
from typing import Any

from .context import TensorCoreColumns

log = logging.getLogger("tpu_embedding_shim")


def announce(
    spec: Any, *, use_tpu: bool, eval_on_tpu: bool, uses_engine: bool, tensor_core: TensorCoreColumns | None
) -> None:
    """Logs how this runner runs `spec` (an EmbeddingConfigSpec, or None) at INFO level."""
    log.info("TPUEstimator on CPU (use_tpu=%s): the TPU embedding engine is emulated with numpy.", use_tpu)
    if uses_engine:
        optimizer = type(spec.optimization_parameters).__name__ if spec.optimization_parameters else "per table"
        note = (
            ""
            if use_tpu
            else " even with use_tpu=False (TensorFlow's CPU path would train them with the model's optimizer instead)"
        )
        log.info("Embedding tables train with the EmbeddingConfigSpec optimizer (%s)%s.", optimizer, note)
        if spec.partition_strategy == "mod" and not (use_tpu and eval_on_tpu):
            log.info(
                "partition_strategy='mod' works here; TensorFlow refuses it on CPU ('Mod sharding of embedding "
                "tables not supported on CPU.')."
            )
    if tensor_core is not None:
        log.info(
            "Tensor-core columns %s: their tables %s are dense variables in params['dense_state'], trained "
            "by the model's own optimizer (train_op), as on a TPU.",
            tensor_core.feature_names,
            sorted(tensor_core.tables),
        )
