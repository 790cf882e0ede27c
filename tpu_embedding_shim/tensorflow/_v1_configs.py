"""TensorFlow's own v1 TPU-embedding configuration objects, accepted in the mode.

A TPUEstimator program that configures its tables with
`EmbeddingConfigSpec(feature_to_config_dict=..., table_to_config_dict=...)`
builds them with TensorFlow's v1 `TableConfig` / `FeatureConfig`: TensorFlow
keeps those only in `tensorflow.python.tpu.tpu_embedding` (2.15 and before),
an internal module the mode does not touch. So two things meet there:

- TensorFlow's `TableConfig` refuses an `optimization_parameters` that is not
  one of its own `_OptimizationParameters`, and the mode's
  `tf.compat.v1.tpu.experimental.AdagradParameters` (etc.) are this
  project's. The mode's parameter classes here are the project's classes
  that are also TensorFlow's `_OptimizationParameters` (where TensorFlow has
  that module), so TensorFlow's `TableConfig` takes them.
- The mode's `EmbeddingConfigSpec` takes TensorFlow's v1 `TableConfig` /
  `FeatureConfig` (and TensorFlow's own parameter objects, made from that
  module) and converts them to the project's, field by field; the project's
  checks then run on them as on its own.

Where TensorFlow has no such module (2.16 and later) the classes are the
project's, unchanged.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..api import embedding_config_spec as spec_module
from ..api import tpu_embedding_v1 as v1

try:  # TensorFlow <= 2.15; an internal module, only read here
    from tensorflow.python.tpu import tpu_embedding as tf_v1
except ImportError:  # pragma: no cover - TensorFlow 2.16+ removed it with tf.estimator
    tf_v1 = None

__all__ = ["EmbeddingConfigSpec", "PARAMETER_CLASSES", "from_tensorflow"]

PARAMETER_NAMES = [
    "AdagradParameters",
    "AdamParameters",
    "FtrlParameters",
    "StochasticGradientDescentParameters",
    "MomentumParameters",
    "ProximalAdagradParameters",
    "RMSPropParameters",
]


def _tensorflow_facing(cls: type) -> type:
    """`cls`, also a subclass of TensorFlow's `_OptimizationParameters` when TensorFlow has that class."""
    if tf_v1 is None:
        return cls
    namespace = {"__module__": __name__, "__qualname__": cls.__name__, "__doc__": cls.__doc__}
    return type(cls.__name__, (cls, tf_v1._OptimizationParameters), namespace)  # noqa: SLF001  (TF's base class)


PARAMETER_CLASSES: dict[str, type] = {name: _tensorflow_facing(getattr(v1, name)) for name in PARAMETER_NAMES}


def _parameters(value: Any, where: str) -> Any:
    """TensorFlow's own v1 parameter object as the mode's class of its name; any other value as it is."""
    if tf_v1 is None or isinstance(value, v1.OPTIMIZATION_PARAMETER_CLASSES):
        return value
    if not isinstance(value, tf_v1._OptimizationParameters):  # noqa: SLF001  (TF's base class)
        return value
    name = type(value).__name__
    if name not in PARAMETER_CLASSES:
        raise ValueError(
            f"{where}: TensorFlow's {name} has no CPU implementation here. Use one of {', '.join(PARAMETER_NAMES)}."
        )
    cls = PARAMETER_CLASSES[name]
    arguments = {
        argument: getattr(value, argument) for argument in inspect.signature(cls).parameters if hasattr(value, argument)
    }
    return cls(**arguments)


def from_tensorflow(config: Any, where: str) -> Any:
    """A v1 `TableConfig` / `FeatureConfig` of TensorFlow's as the project's; any other value as it is."""
    if tf_v1 is None:
        return config
    if isinstance(config, tf_v1.TableConfig):
        fields = config._asdict()
        fields["optimization_parameters"] = _parameters(fields["optimization_parameters"], where)
        return v1.TableConfig(**fields)
    if isinstance(config, tf_v1.FeatureConfig):
        return v1.FeatureConfig(config.table_id, config.max_sequence_length, config.weight_key)
    return config


def _converted(configs: Any, kind: str) -> Any:
    if not isinstance(configs, dict):
        return configs  # the project's check names the argument
    return {name: from_tensorflow(config, f"{kind} {name!r}") for name, config in configs.items()}


class EmbeddingConfigSpec(spec_module.EmbeddingConfigSpec):
    """The project's `EmbeddingConfigSpec`, also taking TensorFlow's own v1 `TableConfig` / `FeatureConfig`
    and parameter objects (converted to the project's; module docstring)."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> EmbeddingConfigSpec:
        bound = inspect.signature(spec_module.EmbeddingConfigSpec.__new__).bind(cls, *args, **kwargs)
        arguments = bound.arguments
        if "table_to_config_dict" in arguments:
            arguments["table_to_config_dict"] = _converted(arguments["table_to_config_dict"], "table_to_config_dict")
        if "feature_to_config_dict" in arguments:
            arguments["feature_to_config_dict"] = _converted(
                arguments["feature_to_config_dict"], "feature_to_config_dict"
            )
        if "optimization_parameters" in arguments:
            arguments["optimization_parameters"] = _parameters(
                arguments["optimization_parameters"], "EmbeddingConfigSpec(optimization_parameters=...)"
            )
        return spec_module.EmbeddingConfigSpec.__new__(*bound.args, **bound.kwargs)
