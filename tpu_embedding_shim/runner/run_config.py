"""`RunConfig`, the TPU `RunConfig`, `TPUConfig` and `InputPipelineConfig`.

TensorFlow's arguments, defaults and checks (tensorflow_estimator 2.15).
The runner reads: `model_dir`, `tf_random_seed` (seeds the tables and the
tensor-core variables), `save_checkpoints_steps` / `save_checkpoints_secs`,
`keep_checkpoint_max`, `log_step_count_steps`, and
`tpu_config.num_shards` (how many shards each table is stored in; numbers
never depend on it). The rest is accepted and kept for code that reads it.

>>> config = TPURunConfig(model_dir="/tmp/m", save_checkpoints_steps=100,
...                       tpu_config=TPUConfig(iterations_per_loop=100, num_shards=8))
>>> config.save_checkpoints_steps, config.save_checkpoints_secs, config.tpu_config.per_host_input_for_training
(100, None, 2)
"""

from __future__ import annotations

import collections
import copy
import re
from typing import Any

import numpy as np

from ..api import replicas
from .model_fn import fields_signature

_USE_DEFAULT = object()
_ITERATIONS_PER_LOOP = re.compile(r"^(?P<value>[1-9]\d*)((?P<suffix>[s|m|h])$|$)")


def check_positive_integer(value: Any, name: str) -> None:
    """TensorFlow's `util_lib.check_positive_integer`, same messages."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be int, got {type(value)}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def num_shards_of(tpu_config: Any) -> int:
    """`TPUConfig.num_shards`, or for None (TensorFlow: the TPU system's count) the number of replicas.

    >>> num_shards_of(TPUConfig()), num_shards_of(TPUConfig(num_shards=4))
    (1, 4)
    """
    if tpu_config.num_shards is None:
        return replicas.num_replicas()
    return int(tpu_config.num_shards)


def parse_iterations_per_loop(iterations_per_loop: Any):
    """(value, unit): unit 'count' for an int, 'seconds' for '<N>s' / '<N>m' / '<N>h'."""
    match = _ITERATIONS_PER_LOOP.match(str(iterations_per_loop))
    if match is None or isinstance(iterations_per_loop, bool):
        raise ValueError(
            f"Invalid TPUConfig `iterations_per_loop` value. Value must be positive integer value or "
            f"time-based value `<N><s|m|h>`. Got: {iterations_per_loop}"
        )
    value = int(match.group("value"))
    suffix = match.group("suffix")
    if suffix is None:
        if not isinstance(iterations_per_loop, (int, np.integer)):
            raise ValueError(
                f"Invalid TPUConfig `iterations_per_loop` value: {iterations_per_loop!r}. Use an int "
                "for a step count, or '<N>s', '<N>m', '<N>h' for a time."
            )
        return value, "count"
    return value * {"s": 1, "m": 60, "h": 3600}[suffix], "seconds"


class InputPipelineConfig:
    """Where `input_fn` runs on a TPU system (accepted; the CPU runner has one host)."""

    PER_SHARD_V1 = 1
    PER_HOST_V1 = 2
    PER_HOST_V2 = 3
    BROADCAST = 4
    SLICED = 5


@fields_signature
class TPUConfig(
    collections.namedtuple(
        "TPUConfig",
        "iterations_per_loop num_shards num_cores_per_replica per_host_input_for_training tpu_job_name "
        "initial_infeed_sleep_secs input_partition_dims eval_training_input_configuration "
        "experimental_host_call_every_n_steps experimental_allow_per_host_v2_parallel_get_next "
        "experimental_customized_tpu_infeed_outfeed_session_hook_class",
        defaults=(2, None, None, True, None, None, None, InputPipelineConfig.PER_HOST_V1, 1, False, None),
    )
):
    """`tf.compat.v1.estimator.tpu.TPUConfig`, a namedtuple with TensorFlow's fields, defaults and checks.

    `num_shards` is how many shards the runner stores each table in, split
    by the EmbeddingConfigSpec's partition_strategy. None (the default),
    where TensorFlow takes the count from the TPU system, is the number of
    replicas: 1 in one process, N under `mpiexec -n N` (`num_shards_of`).
    `iterations_per_loop` is validated and kept; the runner works step by
    step (checkpoints and progress are per step). `_replace` checks again.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> TPUConfig:
        config = super().__new__(cls, *args, **kwargs)
        parse_iterations_per_loop(config.iterations_per_loop)
        if config.num_shards is not None:
            check_positive_integer(config.num_shards, "TPUConfig num_shards")
        per_host, cores = config.per_host_input_for_training, config.num_cores_per_replica
        if config.input_partition_dims is not None:
            if len(config.input_partition_dims) not in (1, 2):
                raise ValueError("input_partition_dims must be a list/tuple with one or two elements.")
            if per_host is not InputPipelineConfig.PER_HOST_V2:
                raise ValueError("input_partition_dims is only supported in PER_HOST_V2 mode.")
            if cores is None:
                raise ValueError("input_partition_dims requires setting num_cores_per_replica.")
        if cores is not None and cores not in (1, 2, 4, 8, 16, 32, 64, 128):
            raise ValueError(f"num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64, 128; got {cores}")
        if config.eval_training_input_configuration not in (
            InputPipelineConfig.PER_HOST_V1,
            InputPipelineConfig.SLICED,
        ):
            raise ValueError(
                "eval_training_input_configuration must be PER_HOST_V1 or SLICED; got "
                f"{config.eval_training_input_configuration}"
            )
        if config.initial_infeed_sleep_secs:
            check_positive_integer(config.initial_infeed_sleep_secs, "TPUConfig initial_infeed_sleep_secs")
        if per_host is False or per_host is True:  # TensorFlow's booleans of old: the input pipeline they meant
            per_host = InputPipelineConfig.PER_HOST_V1 if per_host else InputPipelineConfig.PER_SHARD_V1
            config = super()._make((*config[:3], per_host, *config[4:]))
        return config

    def _replace(self, **kwargs: Any) -> TPUConfig:
        return TPUConfig(**{**self._asdict(), **kwargs})


class RunConfig:
    """`tf.estimator.RunConfig`: where and how often the runner saves.

    Args (those the runner uses):
      model_dir: where checkpoints go (None: the estimator's own, or a
        temporary directory).
      tf_random_seed: seeds the initial tables (None: fresh randomness).
      save_checkpoints_steps / save_checkpoints_secs: at most one; both
        unset means every 600 seconds, as in TensorFlow. Training always
        saves at its end too.
      keep_checkpoint_max: checkpoints kept (0 or None: all).
      log_step_count_steps: log `global_step/sec` and the loss every N steps.
    """

    def __init__(
        self,
        model_dir: str | None = None,
        tf_random_seed: int | None = None,
        save_summary_steps: int = 100,
        save_checkpoints_steps: Any = _USE_DEFAULT,
        save_checkpoints_secs: Any = _USE_DEFAULT,
        session_config: Any = None,
        keep_checkpoint_max: int | None = 5,
        keep_checkpoint_every_n_hours: int = 10000,
        log_step_count_steps: int | None = 100,
        train_distribute: Any = None,
        device_fn: Any = None,
        protocol: Any = None,
        eval_distribute: Any = None,
        experimental_distribute: Any = None,
        experimental_max_worker_delay_secs: Any = None,
        session_creation_timeout_secs: int = 7200,
        checkpoint_save_graph_def: bool = True,
    ):
        if save_checkpoints_steps is _USE_DEFAULT and save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_steps, save_checkpoints_secs = None, 600
        elif save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_secs = None
        elif save_checkpoints_steps is _USE_DEFAULT:
            save_checkpoints_steps = None
        elif save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise ValueError("Can not provide both save_checkpoints_steps and save_checkpoints_secs.")
        if model_dir is not None and (not isinstance(model_dir, str) or not model_dir):
            raise ValueError("model_dir should be non-empty")
        for name, value, minimum in (
            ("save_summary_steps", save_summary_steps, 0),
            ("save_checkpoints_steps", save_checkpoints_steps, 0),
            ("save_checkpoints_secs", save_checkpoints_secs, 0),
            ("keep_checkpoint_max", keep_checkpoint_max, 0),
            ("log_step_count_steps", log_step_count_steps, 0),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or value < minimum
            ):
                raise ValueError(f"{name} should be >= {minimum}")
        if not keep_checkpoint_every_n_hours or keep_checkpoint_every_n_hours <= 0:
            raise ValueError("keep_checkpoint_every_n_hours should be > 0")
        if tf_random_seed is not None and (
            isinstance(tf_random_seed, bool) or not isinstance(tf_random_seed, (int, np.integer))
        ):
            raise ValueError("tf_random_seed must be integer.")
        self._model_dir = model_dir
        self._tf_random_seed = tf_random_seed
        self._save_summary_steps = save_summary_steps
        self._save_checkpoints_steps = save_checkpoints_steps
        self._save_checkpoints_secs = save_checkpoints_secs
        self._session_config = session_config
        self._keep_checkpoint_max = keep_checkpoint_max
        self._keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self._log_step_count_steps = log_step_count_steps
        self._train_distribute = train_distribute
        self._device_fn = device_fn
        self._protocol = protocol
        self._eval_distribute = eval_distribute
        self._experimental_distribute = experimental_distribute
        self._experimental_max_worker_delay_secs = experimental_max_worker_delay_secs
        self._session_creation_timeout_secs = session_creation_timeout_secs
        self._checkpoint_save_graph_def = checkpoint_save_graph_def

    model_dir = property(lambda self: self._model_dir)
    tf_random_seed = property(lambda self: self._tf_random_seed)
    save_summary_steps = property(lambda self: self._save_summary_steps)
    save_checkpoints_steps = property(lambda self: self._save_checkpoints_steps)
    save_checkpoints_secs = property(lambda self: self._save_checkpoints_secs)
    session_config = property(lambda self: self._session_config)
    keep_checkpoint_max = property(lambda self: self._keep_checkpoint_max)
    keep_checkpoint_every_n_hours = property(lambda self: self._keep_checkpoint_every_n_hours)
    log_step_count_steps = property(lambda self: self._log_step_count_steps)
    train_distribute = property(lambda self: self._train_distribute)
    eval_distribute = property(lambda self: self._eval_distribute)
    device_fn = property(lambda self: self._device_fn)
    protocol = property(lambda self: self._protocol)
    session_creation_timeout_secs = property(lambda self: self._session_creation_timeout_secs)
    checkpoint_save_graph_def = property(lambda self: self._checkpoint_save_graph_def)
    num_worker_replicas = property(lambda self: 1)
    num_ps_replicas = property(lambda self: 0)
    is_chief = property(lambda self: True)
    task_type = property(lambda self: "worker")
    task_id = property(lambda self: 0)
    master = property(lambda self: "")

    def replace(self, **kwargs: Any) -> RunConfig:
        """A copy with some properties replaced (TensorFlow's `RunConfig.replace`)."""
        new = copy.copy(self)
        for name, value in kwargs.items():
            if not hasattr(new, "_" + name):
                raise ValueError(f"{name} is not a valid RunConfig property.")
            setattr(new, "_" + name, value)
        if (
            new.save_checkpoints_steps is not None
            and new.save_checkpoints_secs is not None
            and ("save_checkpoints_steps" in kwargs) != ("save_checkpoints_secs" in kwargs)
        ):
            # TensorFlow: replacing one of them clears the other.
            other = "save_checkpoints_secs" if "save_checkpoints_steps" in kwargs else "save_checkpoints_steps"
            setattr(new, "_" + other, None)
        return new

    def __repr__(self):
        fields = (
            "model_dir",
            "tf_random_seed",
            "save_checkpoints_steps",
            "save_checkpoints_secs",
            "keep_checkpoint_max",
            "log_step_count_steps",
        )
        return f"{type(self).__name__}(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in fields) + ")"


class TPURunConfig(RunConfig):
    """`tf.compat.v1.estimator.tpu.RunConfig`: a RunConfig with a `tpu_config`.

    TPUEstimator requires this class (a plain RunConfig is refused, as in
    TensorFlow).
    """

    def __init__(
        self,
        tpu_config: TPUConfig | None = None,
        evaluation_master: str | None = None,
        master: str | None = None,
        cluster: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if tpu_config is not None and not isinstance(tpu_config, TPUConfig):
            raise TypeError(f"Argument `tpu_config` must be a TPUConfig or None. Received: {tpu_config!r}.")
        if master is not None and cluster is not None:
            raise ValueError("Both master and cluster are set.")
        self._tpu_config = tpu_config or TPUConfig()
        self._master = master or ""
        self._evaluation_master = evaluation_master if evaluation_master is not None else self._master
        self._cluster = cluster

    tpu_config = property(lambda self: self._tpu_config)
    evaluation_master = property(lambda self: self._evaluation_master)
    master = property(lambda self: self._master)
    cluster = property(lambda self: self._cluster)

    def __repr__(self):
        return super().__repr__()[:-1] + f", tpu_config={self._tpu_config!r})"


TPURunConfig.__name__ = TPURunConfig.__qualname__ = "RunConfig"
