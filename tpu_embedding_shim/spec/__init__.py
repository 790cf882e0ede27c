"""Framework-neutral, validated, frozen specifications.

Imports nothing from the rest of the package: `api/` lowers TensorFlow's
objects into these, and `engine/` is built from them.
"""

from .checks import COMBINERS, PARTITION_STRATEGIES, parse_combiner, parse_partition_strategy
from .embedding import EmbeddingSpec, optimizer_from_dict, optimizer_to_dict
from .initializers import (
    Constant,
    Ones,
    RandomNormal,
    RandomUniform,
    RowIdInitializer,
    TruncatedNormal,
    Zeros,
    default_table_initializer,
)
from .optimizers import (
    OPTIMIZER_SPECS,
    AdagradMomentumSpec,
    AdagradSpec,
    AdamSpec,
    FtrlSpec,
    MomentumSpec,
    OptimizerSpec,
    ProximalAdagradSpec,
    RMSPropSpec,
    SGDSpec,
    bias_corrected_learning_rate,
)
from .tables import ID_SOURCES, FeatureSpec, QuantizationSpec, TableSpec

__all__ = [
    "COMBINERS",
    "PARTITION_STRATEGIES",
    "ID_SOURCES",
    "parse_combiner",
    "parse_partition_strategy",
    "EmbeddingSpec",
    "TableSpec",
    "FeatureSpec",
    "QuantizationSpec",
    "OptimizerSpec",
    "OPTIMIZER_SPECS",
    "SGDSpec",
    "AdagradSpec",
    "AdagradMomentumSpec",
    "AdamSpec",
    "FtrlSpec",
    "MomentumSpec",
    "RMSPropSpec",
    "ProximalAdagradSpec",
    "bias_corrected_learning_rate",
    "optimizer_to_dict",
    "optimizer_from_dict",
    "TruncatedNormal",
    "RandomNormal",
    "RandomUniform",
    "Constant",
    "Zeros",
    "Ones",
    "RowIdInitializer",
    "default_table_initializer",
]
