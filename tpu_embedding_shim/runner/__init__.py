"""The legacy model_fn runner: `TPUEstimator` and what a model_fn needs around it.

`tf.compat.v1.estimator.tpu.TPUEstimator` (also `tf.estimator.tpu.TPUEstimator`)
runs a TPUEstimator program on a CPU: its embedding tables on the emulated
TPU embedding engine, trained with the EmbeddingConfigSpec's optimizer, its
dense part in numpy (or torch, through `torch_bridge`). See docs/runner.md.
"""

from ..api.warm_start import WarmStartSettings
from ..checkpoints.state import DenseState
from ..progress import Progress, progress_enabled
from . import metrics
from .context import TPUContext
from .export import ExportedModel, load_exported
from .model_fn import EstimatorSpec, ModeKeys, NanLossDuringTrainingError, TPUEstimatorSpec
from .run_config import InputPipelineConfig, RunConfig, TPUConfig, TPURunConfig
from .tpu_estimator import ExportSavedModelApiVersion, TPUEstimator

__all__ = [
    "TPUEstimator",
    "TPUEstimatorSpec",
    "EstimatorSpec",
    "ModeKeys",
    "RunConfig",
    "TPURunConfig",
    "TPUConfig",
    "InputPipelineConfig",
    "TPUContext",
    "DenseState",
    "ExportedModel",
    "load_exported",
    "Progress",
    "progress_enabled",
    "NanLossDuringTrainingError",
    "ExportSavedModelApiVersion",
    "metrics",
    "WarmStartSettings",
]
