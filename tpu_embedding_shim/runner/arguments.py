"""TPUEstimator's argument checks, in TensorFlow's order and words (tensorflow_estimator 2.15).

`check_constructor` runs the constructor's checks before anything is
made; `model_dir_of` settles the model directory; `check_hooks` and
`check_steps` check the arguments of train / evaluate / predict.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

import numpy as np

from ..api import replicas
from ..api.embedding_config_spec import EmbeddingConfigSpec
from .model_fn import verify_model_fn
from .run_config import InputPipelineConfig, TPURunConfig, check_positive_integer

log = logging.getLogger("tpu_embedding_shim")

RESERVED_PARAMS_KEYS = ["batch_size", "context"]
OWN_PARAMS_KEYS = ["dense_state"]  # this runner's (the dense model's state)


def check_constructor(
    model_fn: Any,
    config: Any,
    params: Any,
    use_tpu: Any,
    batch_sizes: tuple[Any, Any, Any],
    embedding_config_spec: Any,
    export_saved_model_api_version: Any,
) -> bool:
    """TPUEstimator's construction checks; returns `use_tpu` as a bool.

    `batch_sizes` are (train, eval, predict).
    """
    if config is None or not isinstance(config, TPURunConfig):
        raise ValueError("`config` must be provided with type `tpu_config.RunConfig`")
    if params is not None and not isinstance(params, dict):  # TensorFlow fails on it with Python's own text
        raise TypeError(f"Argument `params` of TPUEstimator must be a dict or None. Received: {params!r:.200}.")
    try:
        use_tpu = bool(use_tpu)
    except (TypeError, ValueError):  # an array of several values has no truth value
        raise ValueError(f"Argument `use_tpu` of TPUEstimator must be a bool. Received: {use_tpu!r:.200}.") from None
    if embedding_config_spec is not None and not isinstance(embedding_config_spec, EmbeddingConfigSpec):
        raise TypeError(
            "embedding_config_spec must be an EmbeddingConfigSpec "
            f"(tf.estimator.tpu.experimental.EmbeddingConfigSpec). Received: {embedding_config_spec!r}."
        )
    if params is not None and any(k in params for k in RESERVED_PARAMS_KEYS):
        raise ValueError(f"{RESERVED_PARAMS_KEYS} are reserved keys but existed in params {params}.")
    if params is not None and any(k in params for k in OWN_PARAMS_KEYS):
        raise ValueError(
            f"{OWN_PARAMS_KEYS} is reserved by this runner (the dense model's state) but existed in params {params}."
        )
    _check_batch_sizes(config, use_tpu, batch_sizes, embedding_config_spec)
    # TensorFlow raises "Mod sharding of embedding tables not supported on CPU." here when not
    # (use_tpu and eval_on_tpu); the CPU engine shards by 'mod' as well as 'div', so we don't.
    verify_model_fn(model_fn, params)
    if export_saved_model_api_version not in (1, 2):
        raise ValueError(f"export_saved_model_api_version should be 1 or 2; got {export_saved_model_api_version}.")
    return use_tpu


def _check_batch_sizes(config: Any, use_tpu: bool, batch_sizes: tuple[Any, Any, Any], embedding_config_spec: Any):
    train_batch_size, eval_batch_size, predict_batch_size = batch_sizes
    tpu_config = config.tpu_config
    if not use_tpu:
        for name, value in zip(("train_batch_size", "eval_batch_size", "predict_batch_size"), batch_sizes):
            if value is not None:
                check_positive_integer(value, name)
        return
    if train_batch_size is None:
        raise ValueError("`train_batch_size` cannot be `None`")
    check_positive_integer(train_batch_size, "train_batch_size")
    if tpu_config.per_host_input_for_training is InputPipelineConfig.PER_SHARD_V1 and tpu_config.num_cores_per_replica:
        raise ValueError(
            "Model parallelism only supports per host input for training. Please adjust "
            "TPURunconfig.per_host_input_for_training."
        )
    if eval_batch_size is not None:
        check_positive_integer(eval_batch_size, "eval_batch_size")
    if predict_batch_size is not None:
        check_positive_integer(predict_batch_size, "predict_batch_size")
    if embedding_config_spec and tpu_config.per_host_input_for_training not in (
        InputPipelineConfig.PER_HOST_V1,
        InputPipelineConfig.PER_HOST_V2,
    ):
        raise ValueError(
            "Only PER_HOST_V1 and PER_HOST_V2 is supported when using TPU Embedding; got "
            f"{tpu_config.per_host_input_for_training}."
        )


def model_dir_of(model_dir: Any, config: Any) -> str:
    """The estimator's model directory: the argument or the config's (both set and different: ValueError), else a
    new temporary directory (one process only: ValueError under several replicas)."""
    if model_dir is not None and config.model_dir is not None and model_dir != config.model_dir:
        raise ValueError(
            "`model_dir` are set both in constructor and `RunConfig`, but with different values. "
            f"In constructor: '{model_dir}', in `RunConfig`: '{config.model_dir}' "
        )
    model_dir = model_dir or config.model_dir
    if model_dir is None and replicas.num_replicas() > 1:
        # each replica would make its own temporary folder, on its own host: the checkpoint's files split over them
        raise ValueError(
            f"`model_dir` is None on {replicas.num_replicas()} replicas (mpiexec): each would use a temporary "
            "folder of its own, and no checkpoint could be written or read whole. Pass a model_dir that every "
            "replica's host sees (a shared file system)."
        )
    if model_dir is None:
        model_dir = tempfile.mkdtemp()
        log.warning("Using temporary folder as model directory: %s", model_dir)
    return os.fspath(model_dir)


def check_hooks(value: Any, name: str) -> None:
    """Session hooks need a graph, which this runner has not: any given is a ValueError."""
    if value:
        raise ValueError(
            f"`{name}` are TensorFlow session hooks, which need a graph; this runner has none. "
            "Do the work in the model_fn or around train()/evaluate() instead."
        )


def check_steps(value: Any, name: str) -> int | None:
    """`steps` / `max_steps`: None or an int > 0 (TensorFlow's message)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"Must specify {name} > 0, given: {value}")
    return int(value)
