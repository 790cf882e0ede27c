"""To keras-rs: `TableConfig` / `FeatureConfig` for a `DistributedEmbedding` layer, on Keras' JAX backend.

Written against keras-rs 0.4.0 with Keras 3.15 and JAX 0.10 (and
jax-tpu-embedding 0.1.0, which keras-rs on JAX runs SparseCore tables with).
Every table gets its optimizer explicitly: keras-rs' default is Adam.
Tables of TF's TPU embedding get `placement='auto'`: SparseCore on a TPU
that has one (v5p, v6e), where keras-rs turns the Keras optimizer into
jax-tpu-embedding's and its kernels apply the update (the optimizer rows
of the report describe them: see `sparsecore`); elsewhere (CPU,
GPU) keras-rs places them on `default_device`, where a table is an
ordinary Keras variable: the `TableConfig` optimizer is not used there, the
model's optimizer trains it. Tensor-core tables get
`placement='default_device'`, which is what TF did with them.

Weights (`weights.npz`, `Migration.weights`): `<table>`, the [V, D] float32
table in id order; `<table>/<slot>`, the SparseCore optimizer slots under
jax-tpu-embedding's names with TensorFlow's values (`accumulator`,
`momentum`, `velocity`, `linear`), for SGD, Adagrad, Adam and FTRL tables.
The generated `model.py` loads them: `build_layer()` builds the layer for
the global batch, sets the tables with `set_embedding_tables`, and on
SparseCore sets the slots and the layer's step counter (keras-rs has no
API for those: `set_sparsecore_state` uses the layer's private
`_table_and_slot_variables` / `_iterations`, stacked and sharded by
jax-tpu-embedding's `stack_and_shard_tables`).

Inputs: `layer(ids, weights)`, dicts by feature name of dense [B, L] int
ids and [B, L] float32 weights; a padding entry gets weight 0 (keras-rs
0.4.0 on JAX fails on ragged numpy (object) arrays on default_device).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from ..spec import AdagradSpec, AdamSpec, OptimizerSpec
from ..spec import initializers as spec_initializers
from . import codegen, sparsecore
from .codegen import LOAD_WEIGHTS, header, initializer_call, literal, weights_constants
from .convert import Target
from .options import Option
from .report import CONVERTED, EXACT, IMPOSSIBLE, Row
from .rows import Rule, converted, impossible, make_row, row_of
from .runtime import embedded
from .source import MigrationInput

__all__ = ["TARGET", "NAME", "TITLE", "SLOTS", "map_option", "weights", "code", "build", "notes"]

NAME = "keras-rs"
TITLE = "keras-rs 0.4.0 (DistributedEmbedding, Keras 3 on JAX)"

_CLASSES = {"sgd": "SGD", "adagrad": "Adagrad", "adam": "Adam", "ftrl": "Ftrl"}
SLOTS = {kind: sparsecore.SLOTS[kind] for kind in _CLASSES}
"""The optimizers keras-rs takes, and their slots (TF's name, jax-tpu-embedding's field)."""
_INPUTS = "DistributedEmbedding(...)(inputs, weights={feature: ...})"
_STEPS = "on SparseCore keras-rs calls it with the layer's step counter, which set_sparsecore_state starts at STEP"


def _class_of(optimizer: OptimizerSpec | None) -> str | None:
    kind = None if optimizer is None else _CLASSES.get(optimizer.kind)
    return None if kind is None else f"keras.optimizers.{kind}"


# The report ----------------------------------------------------------------------------------------


_SPEC_ROWS: dict[str, Rule] = {
    "partition_strategy": sparsecore.sharding("keras-rs", "set_embedding_tables"),
    "num_shards": sparsecore.sharding("keras-rs", "set_embedding_tables"),
    "pipeline_execution_with_tensor_core": impossible(
        "keras-rs has no pipelining: lookups would see the previous step's update, TF's pipelined lookups were one "
        "step stale"
    ),
    "gradient_multiplier_fn": sparsecore.multiplier(
        "multiply the gradients of the layer's outputs by fn(step) (e.g. out = stop_gradient(out) + m * (out - "
        "stop_gradient(out)))"
    ),
    "profile_data_directory": converted(
        "DistributedEmbedding(update_stats=True)",
        "keras-rs (JAX, SparseCore) raises max_ids_per_partition / max_unique_ids_per_partition to what the "
        "training batches need; nothing is written to the directory",
    ),
}
_FEATURE_ROWS = sparsecore.feature_rows(_INPUTS)
_NO_WEIGHT_CLIPPING = (
    "keras-rs passes no limits to the SparseCore kernels and Keras optimizers have no weight clipping: rows would "
    "not be clipped"
)
_NO_CLIPVALUE = (
    "keras-rs on JAX neither maps nor rejects a Keras optimizer's clipvalue: the summed row gradients would not be "
    "clipped"
)
_DROPPED = {
    "clip_weight_min": _NO_WEIGHT_CLIPPING,
    "clip_weight_max": _NO_WEIGHT_CLIPPING,
    "weight_decay_factor": "keras-rs on JAX neither maps nor rejects a Keras optimizer's weight_decay: rows would not "
    "decay",
    "clip_gradient_min": _NO_CLIPVALUE,
    "clip_gradient_max": _NO_CLIPVALUE,
}
"""Optimizer fields keras-rs drops once they are set (unset, they change nothing: `convert.common_row`)."""


_NO_QUANTIZATION = (
    "keras-rs 0.4.0's TableConfig has no quantization, and on JAX it builds jax-tpu-embedding TableSpecs without "
    "their quantization_config: lookups would return the rows unrounded, so the activations (and the gradients "
    "that follow) would differ. (Its TensorFlow backend takes TF's own FeatureConfigs, quantization_config "
    "included; that is the tf-midlevel target.)"
)


def map_option(option: Option, source: MigrationInput) -> Row:
    if option.where == "spec":
        return row_of(_SPEC_ROWS, option, source, NAME)
    if option.feature is not None:
        return row_of(_FEATURE_ROWS, option, source, NAME)
    table = option.table
    assert table is not None
    if option.name == "placement":
        if option.value == "tensor_core":
            return make_row(
                option, EXACT, "TableConfig(placement='default_device'): a Keras variable the model's optimizer trains"
            )
        return make_row(
            option,
            CONVERTED,
            "TableConfig(placement='auto')",
            "SparseCore on a TPU that has one (v5p, v6e), where the TableConfig optimizer trains the table; "
            "elsewhere keras-rs uses default_device, where TableConfig.optimizer is not used and the model's "
            "optimizer trains the table (the optimizer rows hold on SparseCore)",
        )
    if option.name == "quantization":
        return make_row(option, IMPOSSIBLE, how=_NO_QUANTIZATION)
    if option.name == "optimizer" and source.is_tensor_core(table):
        return make_row(option, EXACT, "the model's optimizer (default_device), as TF's trained it")
    row = _keras_field_row(option, source) if option.name.startswith("optimizer.") else None
    return row or sparsecore.table_row(option, source, _class_of, _keras_initializer, _STEPS)


def _keras_field_row(option: Option, source: MigrationInput) -> Row | None:
    """The optimizer fields where keras-rs differs from jax-tpu-embedding itself; None for the others."""
    field, value = option.name.removeprefix("optimizer."), option.value
    if field in _DROPPED:
        return make_row(option, IMPOSSIBLE, how=_DROPPED[field])
    if field == "multiply_linear_by_learning_rate" and value:
        return make_row(
            option,
            IMPOSSIBLE,
            how="Keras' Ftrl has no such flag (keras-rs runs the kernel with it off): TF's `linears` slot holds "
            "linear * lr and would be read as linear",
        )
    if field == "initial_linear_value" and value != 0:
        return make_row(
            option,
            CONVERTED,
            "the `linear` slot",
            "Keras' Ftrl starts it at 0; the weights carry TF's linear slot, which set_sparsecore_state loads",
        )
    optimizer = source.optimizer_for(option.table or "")
    if field == "initial_accumulator" and optimizer is not None and optimizer.kind == "adagrad":
        return make_row(
            option,
            EXACT,
            f"{_class_of(optimizer)}(initial_accumulator_value={value!r}, epsilon=1e-07)",
            "keras-rs takes only epsilon=1e-7, which the SparseCore kernel does not use (no epsilon, as TF)",
        )
    return None


# The weights ---------------------------------------------------------------------------------------


def weights(source: MigrationInput) -> dict[str, np.ndarray]:
    """`<table>` -> the table; `<table>/<slot>` -> its SparseCore slots (jax-tpu-embedding's names)."""
    out: dict[str, np.ndarray] = {}
    for table in source.tables:
        out[table.name] = source.state[table.name]["embedding"]
        if not source.is_tensor_core(table.name):
            out.update(sparsecore.slot_arrays(source, table.name, SLOTS))
    return out


# The code ------------------------------------------------------------------------------------------


def _keras_initializer(initializer: Any, dim: int) -> str | None:
    """keras.initializers source of the same distribution, or None."""
    if initializer is None:
        initializer = spec_initializers.default_table_initializer(dim)
    if isinstance(initializer, spec_initializers.Constant) and isinstance(initializer.value, float):
        return f"keras.initializers.Constant({literal(initializer.value)})"
    return initializer_call(initializer, "keras.initializers")


def _optimizer_code(source: MigrationInput, table: str) -> str:
    """`optimizer=...,` of a TableConfig, with a comment when it is not TF's optimizer."""
    if source.is_tensor_core(table):
        return "optimizer=keras.optimizers.SGD(),  # unused on default_device: the model's optimizer trains it"
    code = sparsecore.optimizer_code(source.optimizer_for(table), table, "keras.optimizers.SGD", _class_of, _arguments)
    return f"optimizer={code}"


def _arguments(optimizer: OptimizerSpec) -> list[str]:
    """The Keras optimizer's arguments besides the learning rate."""
    if isinstance(optimizer, AdamSpec):
        return [f"beta_1={optimizer.beta1!r}", f"beta_2={optimizer.beta2!r}", f"epsilon={optimizer.epsilon!r}"]
    if isinstance(optimizer, AdagradSpec):
        return [f"initial_accumulator_value={optimizer.initial_accumulator!r}", "epsilon=1e-07"]
    if optimizer.kind == "ftrl":
        fields = (
            "learning_rate_power",
            "initial_accumulator_value",
            "l1_regularization_strength",
            "l2_regularization_strength",
            "beta",
        )
        return [f"{field}={getattr(optimizer, field)!r}" for field in fields]
    return []


def code(source: MigrationInput) -> str:
    imports: list[str] = []
    rates = sparsecore.learning_rates_code(source, imports)
    tables = [t.name for t in source.tables]
    lines = header(
        f"keras-rs DistributedEmbedding ({len(tables)} tables) and its weights (keras-rs 0.4.0, JAX backend).",
        source.origin,
        [
            "build_layer() builds the layer for GLOBAL_BATCH_SIZE and loads weights.npz (beside this file): the",
            "tables, and on SparseCore the optimizer slots and the step. Call it as layer(ids, weights): dicts by",
            "feature of dense [batch, L] ids and float32 weights, weight 0 on padding entries.",
        ],
    )
    lines += [
        "import os",
        "",
        'os.environ.setdefault("KERAS_BACKEND", "jax")  # the backend this conversion was checked on',
        "",
        "import keras",
        "import keras_rs",
        "import numpy as np",
        *sorted(set(imports)),
        "",
        *weights_constants(source),
        f"TABLES = {tables!r}",
        "",
        *rates,
        *sparsecore.vocabularies_code(source),
    ]
    lines += sparsecore.adam_code(source)
    lines += [
        "",
        "",
        "def feature_configs(learning_rates=LEARNING_RATES):",
        '    """{feature: FeatureConfig}; features of one table share its TableConfig, which sets its optimizer',
        '    explicitly (keras-rs defaults to Adam)."""',
    ]
    variables = codegen.table_variables(source.tables)
    for table in source.tables:
        initializer = (_keras_initializer(table.initializer, table.dim), repr("zeros"), "Keras")
        placement = f"placement={'default_device' if source.is_tensor_core(table.name) else 'auto'!r},"
        call = "keras_rs.layers.TableConfig"
        lines += codegen.sparsecore_table_lines(
            variables[table.name], call, table, initializer, _optimizer_code(source, table.name), placement
        )
    lines += codegen.feature_lines(
        source,
        source.features,
        "{name!r}: keras_rs.layers.FeatureConfig(name={name!r}, table={variable}, input_shape=(GLOBAL_BATCH_SIZE, "
        "None), output_shape=(GLOBAL_BATCH_SIZE, {dim}))",
    )
    update_stats = source.spec.profile_data_directory is not None
    lines += [
        "",
        "",
        "def build_layer(weights=None, learning_rates=LEARNING_RATES):",
        '    """The DistributedEmbedding, built and loaded with the weights (a mapping, default: weights.npz)."""',
        *LOAD_WEIGHTS,
        "    features = feature_configs(learning_rates)",
        f"    layer = keras_rs.layers.DistributedEmbedding(features{', update_stats=True' if update_stats else ''})",
        "    layer.build({name: feature.input_shape for name, feature in features.items()})",
        "    layer.set_embedding_tables({name: np.asarray(weights[name]) for name in TABLES})",
        "    set_sparsecore_state(layer, weights)",
        "    return layer",
        "",
        "",
        *embedded("keras_rs_model").splitlines(),
    ]
    return "\n".join(lines) + "\n"


def build(source: MigrationInput) -> Any:
    """The generated code's `build_layer()`, run in-process with the functions themselves as learning rates:
    a built `DistributedEmbedding` holding the weights. Needs keras-rs on Keras' JAX backend."""
    if importlib.util.find_spec("keras_rs") is None:
        raise ImportError("No module named 'keras_rs'")
    import keras

    if keras.backend.backend() != "jax":
        raise ImportError(
            f"keras-rs is converted for Keras' JAX backend; this process runs {keras.backend.backend()!r} "
            "(set KERAS_BACKEND=jax before Keras is imported)"
        )
    namespace = sparsecore.run_code(code(source), NAME)
    return namespace["build_layer"](weights(source), sparsecore.learning_rates(source))


def notes(source: MigrationInput) -> list[str]:
    return [
        "Every TableConfig sets its optimizer: keras-rs' default is Adam.",
        "The optimizer rows describe SparseCore (JAX backend), where keras-rs runs jax-tpu-embedding's kernels. On "
        "default_device (CPU, GPU, TPUs without SparseCore) a table is a Keras variable: TableConfig.optimizer is "
        "not used, the model's optimizer trains it and keeps its own state (the `<table>/<slot>` arrays are not "
        "loaded there).",
        "keras-rs on JAX neither maps nor rejects a Keras optimizer's weight_decay or clipvalue: they would be "
        "silently dropped on SparseCore.",
        f"Weights: weights.npz, `<table>` and `<table>/<slot>` (global step {source.step}); build_layer() in model.py "
        "loads them.",
        "Inputs: dense [batch, L] ids with [batch, L] weights, 0 on padding entries (keras-rs 0.4.0 on JAX fails "
        "on ragged numpy (object) arrays on default_device).",
        *sparsecore.batch_size_notes(
            source, "FeatureConfig shapes hold None as the batch, which default_device accepts and SparseCore does not"
        ),
    ]


TARGET = Target(name=NAME, title=TITLE, map_option=map_option, weights=weights, code=code, build=build, notes=notes)
