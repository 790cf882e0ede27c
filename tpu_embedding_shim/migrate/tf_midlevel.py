"""To TensorFlow's mid-level API: `tf.tpu.experimental.embedding` v2 configs and a `tf.train.Checkpoint`.

The smallest move off TPUEstimator: the same tables, combiners and TPU
optimizers, as `TableConfig` / `FeatureConfig` / `SGD`, `Adagrad`,
`AdagradMomentum`, `Adam`, `FTRL`, for `TPUEmbedding` (and
`TPUEmbeddingForServing` on a CPU). Every table gets its optimizer
explicitly (the spec's, or its own).

Weights: a TensorFlow object-based checkpoint, `tf_checkpoint/ckpt-1`,
with TensorFlow's keys for a `TPUEmbedding` saved as `embedding=`:
`embedding/<table>/.ATTRIBUTES/VARIABLE_VALUE` and
`embedding/<table>.S<slot>/.ATTRIBUTES/VARIABLE_VALUE` (TF's slot names:
`accumulators`, `momenta`, `velocities`, `linears`). TensorFlow restores it
with `tf.train.Checkpoint(embedding=...).restore(path)`, and so does this
project's mid-level API. `Migration.weights` holds the same arrays under
those keys. Tensor-core tables are not mid-level tables (the model holds
them as dense variables): they go to `tensor_core.npz`.

`build()` makes the configs with this project's mid-level API (always
installed; the same classes as TensorFlow's); the generated `model.py`
imports `tensorflow`, and runs on a CPU without TensorFlow once that one
import reads `import tpu_embedding_shim as tf`.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any

import numpy as np

from ..api import tpu_embedding_v2_utils as v2
from ..api.optimizer_lowering import LOWERINGS
from ..api.tpu_embedding_v2 import TPUEmbedding
from ..api.train import Checkpoint
from ..progress import ProgressLine
from ..spec import OptimizerSpec, QuantizationSpec
from ..spec import initializers as spec_initializers
from .codegen import call_lines, header, importable_name, initializer_call, literal, table_variables
from .convert import Target
from .migration import Migration, write_npz
from .options import Option
from .report import CONVERTED, EXACT, IMPOSSIBLE, Row
from .rows import Rule, converted, exact, from_tokens, impossible, make_row, row_of, when_on
from .runtime import embedded
from .runtime.tf_midlevel_model import _StepCounter
from .source import MigrationInput

NAME = "tf-midlevel"
TITLE = "TensorFlow's mid-level API (tf.tpu.experimental.embedding, TF 2.15)"
CHECKPOINT_DIR = "tf_checkpoint"
TENSOR_CORE_FILE = "tensor_core.npz"

_CLASSES = {"sgd": "SGD", "adagrad": "Adagrad", "adagrad_momentum": "AdagradMomentum", "adam": "Adam", "ftrl": "FTRL"}
_UNSET = object()
_NOT_IN_V2 = {"initial_linear_value": 0.0}  # FTRL's: TF fixes it at 0
_MODEL_OPTIMIZER = "the model's (tensor core)"
_PREPROCESS = (
    "the mid-level API takes integer ids: map tokens to ids before enqueue as the feature column did "
    "(vocabulary index; unknown tokens to default_value or the OOV buckets after the vocabulary, by TF's "
    "fingerprint hash), e.g. with this project's categorical_column_with_vocabulary_* on numpy"
)


def _v2_class(optimizer: OptimizerSpec | None) -> str | None:
    """The v2 class of `optimizer`; SGD stands in for a kind the v2 API lacks (the report says it is lost)."""
    return None if optimizer is None else _CLASSES.get(optimizer.kind, "SGD")


def _v2_optimizer(optimizer: OptimizerSpec | None, step: int) -> Any:
    """The v2 optimizer object of `optimizer` (None for None)."""
    cls = _v2_class(optimizer)
    if optimizer is None or cls is None:
        return None
    return getattr(v2, cls)(**_arguments(optimizer, step))


def _stands_in(optimizer: OptimizerSpec | None) -> bool:
    return optimizer is not None and optimizer.kind not in _CLASSES


_SHARED_FIELDS = {field.name for field in dataclasses.fields(OptimizerSpec)}  # every optimizer's options


def _argument(cls: str, field: str) -> str:
    """The v2 class's argument for a spec field (`initial_accumulator` -> `initial_accumulator_value`, Adam's
    `beta1` -> `beta_1`): the renames the class was registered with; other fields keep their name."""
    return LOWERINGS[getattr(v2, cls)][1].get(field, field)


# The report ----------------------------------------------------------------------------------------


def map_option(option: Option, source: MigrationInput) -> Row:
    name, value = option.name, option.value
    if option.where == "spec":
        return row_of(_SPEC_ROWS, option, source, NAME)
    if option.feature is not None:
        if source.is_tensor_core(option.table or ""):  # a tensor-core column's feature: the model looks it up
            return make_row(
                option, CONVERTED, "the model's dense lookup", "a tensor-core feature: the model looks it up"
            )
        return row_of(_FEATURE_ROWS, option, source, NAME)
    table = option.table
    assert table is not None
    if name == "placement":
        if value == "tensor_core":
            return make_row(
                option,
                CONVERTED,
                "a dense table of the model (e.g. tf.keras.layers.Embedding)",
                f"not a mid-level table: the model keeps it and trains it; its values are in {TENSOR_CORE_FILE}",
            )
        return make_row(option, EXACT, "TPUEmbedding")
    if source.is_tensor_core(table):
        return make_row(option, CONVERTED, "the model's dense table", "a tensor-core table: kept by the model")
    if name in ("vocabulary_size", "dim", "combiner"):
        return make_row(option, EXACT, f"TableConfig({name}=...)")
    if name == "quantization":
        return make_row(
            option,
            EXACT,
            "TableConfig(quantization_config=QuantizationConfig(num_buckets, lower, upper))",
            "the same simulated quantization on the TPU's forward pass; serving() (TPUEmbeddingForServing) reads "
            "the float32 table unquantized, as TensorFlow's CPU lookups always do",
        )
    if name == "features":
        return make_row(option, EXACT, "FeatureConfig(table=...) per feature, one TableConfig shared")
    if name == "initializer":
        if _is_default(value, source.table(table).dim):
            return make_row(option, EXACT, "TableConfig(initializer=None): TF's default, the same distribution")
        return make_row(
            option,
            CONVERTED,
            "the checkpoint's values",
            "the checkpoint carries the tables; the code's initializer only matters for a fresh start "
            + (
                "(written as TF's initializer of the same distribution)"
                if _initializer_code(value)
                else "(None: TF's default)"
            ),
        )
    if name == "optimizer":
        if value is None:
            return make_row(option, EXACT, "optimizer=None (serving only)")
        target = _v2_class(source.optimizer_for(table))
        if _stands_in(source.optimizer_for(table)):
            return make_row(
                option,
                IMPOSSIBLE,
                "tf.tpu.experimental.embedding.SGD (a stand-in)",
                f"TensorFlow's v2 mid-level API has no {value} (it has SGD, Adagrad, AdagradMomentum, Adam, FTRL): "
                "the table trains with SGD at its learning rate, its slots are lost",
            )
        return make_row(option, EXACT, f"tf.tpu.experimental.embedding.{target}")
    return _optimizer_row(option, source.optimizer_for(table), source)


_SPEC_ROWS: dict[str, Rule] = {
    "partition_strategy": when_on(
        "the mid-level API's sharding (mod)",
        CONVERTED,
        "mod sharding",
        "the mid-level API always shards tables mod across the cores; the numbers do not depend on it, and the "
        "checkpoint holds whole tables in id order",
        on=lambda strategy: strategy != "mod",
    ),
    "num_shards": converted("the TPU topology", "set by the TPUStrategy's cores, not by the config"),
    "pipeline_execution_with_tensor_core": exact(
        lambda option: f"TPUEmbedding(pipeline_execution_with_tensor_core={option.value!r})"
    ),
    "gradient_multiplier_fn": converted(
        "your training step",
        "the mid-level API has no gradient multiplier: multiply the gradients passed to apply_gradients by "
        "fn(global_step)",
    ),
    "profile_data_directory": impossible(
        "TensorFlow's v2 TPUEmbedding writes no lookup statistics: none would be written"
    ),
}


def _default_value_row(option: Option, source: MigrationInput) -> Row:
    feature = source.feature(option.feature or "")
    if feature.id_source != "identity":
        return make_row(option, CONVERTED, "your input pipeline", _PREPROCESS)
    how = f"replace ids outside [0, {feature.num_buckets}) by {option.value} before enqueue"
    return make_row(option, CONVERTED, "your input pipeline", how)


_FEATURE_ROWS: dict[str, Rule] = {
    "table": exact("FeatureConfig(table=...)"),
    "id_source": when_on("integer ids", CONVERTED, "your input pipeline", _PREPROCESS, on=from_tokens),
    "default_value": _default_value_row,
    "num_oov_buckets": converted("your input pipeline", _PREPROCESS),
    "weight_key": when_on(
        "(no weights)",
        CONVERTED,
        "enqueue(..., weights=...)",
        lambda option: f"pass features[{option.value!r}] as the feature's weights",
    ),
    "max_sequence_length": exact(lambda option: f"FeatureConfig(max_sequence_length={option.value})"),
    "safe_lookup": when_on(
        "ids as given",
        CONVERTED,
        "your input pipeline",
        "the feature column's safe rule dropped negative ids (and weights <= 0 for mean / sqrtn); the mid-level "
        "API does not: drop them before enqueue (empty bags still give zeros)",
    ),
    "dense_zero_is_padding": when_on(
        "ids as given",
        CONVERTED,
        "a SparseTensor / RaggedTensor input",
        "TPUEstimator read 0 in a dense integer input as padding; the mid-level API looks id 0 up: pass the "
        "ids as a SparseTensor or RaggedTensor without the zeros",
    ),
}


def _optimizer_row(option: Option, optimizer: OptimizerSpec | None, source: MigrationInput) -> Row:
    field = option.name.removeprefix("optimizer.")
    value = option.value
    cls = _v2_class(optimizer)
    assert optimizer is not None and cls is not None
    if _stands_in(optimizer) and field not in _SHARED_FIELDS:
        return make_row(option, IMPOSSIBLE, how=f"an option of {optimizer.kind}, which the SGD stand-in does not have")
    if field == "learning_rate" and callable(value):
        reference = importable_name(value)
        if reference is None:
            return make_row(
                option,
                IMPOSSIBLE,
                f"{cls}(learning_rate=<a constant>)",
                "a local function of the step: the generated code cannot import it and uses its value at the "
                f"checkpoint's step ({value(source.step)!r}) as a constant (the built config calls it)",
            )
        return make_row(
            option,
            CONVERTED,
            f"{cls}(learning_rate=<zero-argument callable>)",
            f"v2 learning rates take no argument: {reference[0]}.{reference[1]} is called with a step counter that "
            f"starts at the checkpoint's step ({source.step}) and counts apply_gradients calls",
        )
    if field in ("clip_gradient_min", "clip_gradient_max"):
        return make_row(option, EXACT, f"{cls}(clipvalue=(min, max))")
    if field in _NOT_IN_V2:
        if value == _NOT_IN_V2[field]:
            return make_row(option, EXACT, f"(TF fixes it at {_NOT_IN_V2[field]})")
        return make_row(option, IMPOSSIBLE, how=f"TF's {cls} has no {field}: the slot would start at 0, not {value}")
    return make_row(option, EXACT, f"{cls}({_argument(cls, field)}=...)")


# The configs ---------------------------------------------------------------------------------------


def _arguments(optimizer: OptimizerSpec, step: int) -> dict[str, Any]:
    """The v2 class's keyword arguments for `optimizer` (callable learning rates wrapped in a step counter)."""
    arguments: dict[str, Any] = {}
    cls = _v2_class(optimizer)
    assert cls is not None
    for field in dataclasses.fields(optimizer):
        value = getattr(optimizer, field.name)
        if field.name in _NOT_IN_V2 or field.name.startswith("clip_gradient_"):
            continue
        if _stands_in(optimizer) and field.name not in _SHARED_FIELDS:
            continue
        if field.name == "learning_rate" and callable(value):
            value = _StepCounter(value, step)
        arguments[_argument(cls, field.name)] = value
    if optimizer.clip_gradient_min is not None or optimizer.clip_gradient_max is not None:
        arguments["clipvalue"] = (optimizer.clip_gradient_min, optimizer.clip_gradient_max)
    return arguments


def _quantization_config(quantization: QuantizationSpec | None) -> v2.QuantizationConfig | None:
    """The v2 `QuantizationConfig` of a table's `QuantizationSpec` (None for None)."""
    if quantization is None:
        return None
    return v2.QuantizationConfig(
        num_buckets=quantization.num_buckets, lower=quantization.lower, upper=quantization.upper
    )


def _quantization_code(quantization: QuantizationSpec | None) -> str:
    if quantization is None:
        return "None"
    return (
        f"tf.tpu.experimental.embedding.QuantizationConfig(num_buckets={quantization.num_buckets}, "
        f"lower={literal(float(quantization.lower))}, upper={literal(float(quantization.upper))})"
    )


def build(source: MigrationInput) -> dict[str, Any]:
    """`TPUEmbedding`'s arguments, made with this project's mid-level API (TensorFlow's classes):
    {'feature_config': {feature: FeatureConfig}, 'optimizer': ..., 'pipeline_execution_with_tensor_core': ...}."""
    spec = source.spec
    tables = {}
    for table in spec.tables:
        optimizer = spec.optimizer_for(table.name)
        v2_optimizer = _v2_optimizer(optimizer, source.step)
        tables[table.name] = v2.TableConfig(
            vocabulary_size=table.vocabulary_size,
            dim=table.dim,
            initializer=table.initializer,
            optimizer=v2_optimizer,
            combiner=table.combiner,
            name=table.name,
            quantization_config=_quantization_config(table.quantization),
        )
    features = {
        f.name: v2.FeatureConfig(table=tables[f.table], max_sequence_length=f.max_sequence_length, name=f.name)
        for f in spec.features
    }
    global_optimizer = _v2_optimizer(spec.optimizer, source.step)
    return {
        "feature_config": features,
        "optimizer": global_optimizer,
        "pipeline_execution_with_tensor_core": spec.pipeline_execution_with_tensor_core,
    }


# The weights ---------------------------------------------------------------------------------------


def _table_key(table: str) -> str:
    return f"embedding/{table}/.ATTRIBUTES/VARIABLE_VALUE"


def _slot_key(table: str, slot: str) -> str:
    return f"embedding/{table}.S{slot}/.ATTRIBUTES/VARIABLE_VALUE"


def weights(source: MigrationInput) -> dict[str, np.ndarray]:
    """The checkpoint's arrays under TensorFlow's keys; tensor-core tables as `tensor_core/<table>`."""
    out: dict[str, np.ndarray] = {}
    for table in source.spec.tables:
        arrays = source.state[table.name]
        out[_table_key(table.name)] = arrays["embedding"]
        if _stands_in(source.optimizer_for(table.name)):
            continue  # SGD stands in: the optimizer's slots are lost (the report says so)
        for slot, values in arrays.items():
            if slot != "embedding":
                out[_slot_key(table.name, slot)] = values
    for table in source.tensor_core_tables:
        out[f"tensor_core/{table.name}"] = source.state[table.name]["embedding"]
    return out


def _state(migration: Migration) -> dict[str, dict[str, np.ndarray]]:
    """table -> {'embedding', slot: ...} back from the weights' keys."""
    state: dict[str, dict[str, np.ndarray]] = {}
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    for key, values in migration.weights.items():
        if not key.startswith("embedding/"):
            continue
        name = key[len("embedding/") : -len(suffix)]
        table, _, slot = name.partition(".S")
        state.setdefault(table, {})[slot or "embedding"] = values
    return state


def write_weights(migration: Migration, directory: str, progress: ProgressLine | None = None) -> list[str]:
    """Writes `tf_checkpoint/ckpt-1` (a mid-level TPUEmbedding restored from the weights, saved as `embedding=`)
    and `tensor_core.npz` when the model has tensor-core tables."""
    names = [CHECKPOINT_DIR]
    config = migration.config
    state = _state(migration)
    if state:
        if progress is not None:
            progress.status(f"writing {CHECKPOINT_DIR}/ckpt-1 ({len(state)} tables with their slots)")
        embedding = TPUEmbedding(
            feature_config=config["feature_config"],
            optimizer=config["optimizer"],
            pipeline_execution_with_tensor_core=config["pipeline_execution_with_tensor_core"],
        )
        embedding.restore_state(state, migration.step)
        Checkpoint(embedding=embedding).save(os.path.join(directory, CHECKPOINT_DIR, "ckpt"))
    else:
        os.makedirs(os.path.join(directory, CHECKPOINT_DIR))
    tensor_core = {key.split("/", 1)[1]: v for key, v in migration.weights.items() if key.startswith("tensor_core/")}
    if tensor_core:
        write_npz(os.path.join(directory, TENSOR_CORE_FILE), tensor_core, progress, TENSOR_CORE_FILE)
        names.append(TENSOR_CORE_FILE)
    return names


# The code ------------------------------------------------------------------------------------------


def _is_default(initializer: Any, dim: int) -> bool:
    """None, or TF's default initializer for `dim` (truncated normal, mean 0, stddev 1/sqrt(dim)), any seed."""
    default = spec_initializers.default_table_initializer(dim)
    return initializer is None or (
        isinstance(initializer, spec_initializers.TruncatedNormal)
        and (initializer.mean, initializer.stddev) == (default.mean, default.stddev)
    )


def _initializer_code(initializer: Any) -> str | None:
    """TF source for a built-in initializer (the same distribution), else None (TF's default is used)."""
    return initializer_call(initializer, "tf.initializers")


def _optimizer_code(optimizer: OptimizerSpec, source: MigrationInput, imports: list[str], indent: int) -> str:
    """`tf.tpu.experimental.embedding.<Class>(...)`, one argument a line, those at TF's defaults left out."""
    cls = _v2_class(optimizer)
    assert cls is not None
    defaults = {k: p.default for k, p in inspect.signature(getattr(v2, cls)).parameters.items()}
    lines = []
    for key, value in _arguments(optimizer, source.step).items():
        if isinstance(value, _StepCounter):
            reference = importable_name(value.function)
            if reference is None:
                constant = literal(float(value.function(source.step)))
                lines.append(
                    f"learning_rate={constant},  # TF: a local function of the step; its value now (report.md)"
                )
                continue
            imports.append(f"from {reference[0]} import {reference[1]}")
            lines.append(f"learning_rate=_StepCounter({reference[1]}, start={source.step}),")
        elif key == "learning_rate" or defaults.get(key, _UNSET) != value:
            lines.append(f"{key}={literal(value)},")
    pad = " " * indent
    inner = "".join(f"\n{pad}    {line}" for line in lines)
    return f"tf.tpu.experimental.embedding.{cls}({inner}\n{pad})"


def code(source: MigrationInput) -> str:
    spec = source.spec
    imports: list[str] = []
    body = ["", "", "# Tables: each with its optimizer (the EmbeddingConfigSpec's, or the column's own)."]
    variables = table_variables(spec.tables)
    for table in spec.tables:
        optimizer = spec.optimizer_for(table.name)
        optimizer_text = (
            "None"
            if optimizer is None or _v2_class(optimizer) is None
            else _optimizer_code(optimizer, source, imports, 4)
        )
        initializer = None if _is_default(table.initializer, table.dim) else _initializer_code(table.initializer)
        arguments = [
            f"vocabulary_size={table.vocabulary_size},",
            f"dim={table.dim},",
            f"initializer={initializer or 'None'},",
            f"optimizer={optimizer_text},",
            f"combiner={table.combiner!r},",
            f"name={table.name!r},",
        ]
        if table.quantization is not None:  # TF's simulated quantization of the TPU's lookups (forward only)
            arguments.append(f"quantization_config={_quantization_code(table.quantization)},")
        body += call_lines(variables[table.name], "tf.tpu.experimental.embedding.TableConfig", arguments)
    body += ["", "FEATURE_CONFIG = {"]
    for feature in spec.features:
        body.append(
            f"    {feature.name!r}: tf.tpu.experimental.embedding.FeatureConfig("
            f"table={variables[feature.table]}, max_sequence_length={feature.max_sequence_length}, "
            f"name={feature.name!r}),"
        )
    body.append("}")
    global_optimizer = spec.optimizer
    body += [
        "",
        "# The EmbeddingConfigSpec's optimizer (every table above also has its own).",
        "OPTIMIZER = "
        + (
            "None"
            if global_optimizer is None or _v2_class(global_optimizer) is None
            else _optimizer_code(global_optimizer, source, imports, 0)
        ),
        f"PIPELINE_EXECUTION_WITH_TENSOR_CORE = {spec.pipeline_execution_with_tensor_core!r}",
        f"# The model's own tables (embedding_lookup_device='tpu_tensor_core'), in {TENSOR_CORE_FILE}:",
        f"TENSOR_CORE_TABLES = {[t.name for t in source.tensor_core_tables]!r}",
        "",
        "",
        "def tpu_embedding():",
        '    """The training object (under a TPUStrategy scope on a TPU), restored from the checkpoint."""',
        "    embedding = tf.tpu.experimental.embedding.TPUEmbedding(",
        "        feature_config=FEATURE_CONFIG,",
        "        optimizer=OPTIMIZER,",
        "        pipeline_execution_with_tensor_core=PIPELINE_EXECUTION_WITH_TENSOR_CORE,",
        "    )",
        "    tf.train.Checkpoint(embedding=embedding).restore(CHECKPOINT)",
        "    return embedding",
        "",
        "",
        "def serving():",
        '    """The CPU serving object (TPUEmbeddingForServing), restored from the checkpoint."""',
        "    embedding = tf.tpu.experimental.embedding.TPUEmbeddingForServing(FEATURE_CONFIG, OPTIMIZER)",
        "    status = tf.train.Checkpoint(embedding=embedding).restore(CHECKPOINT)",
        "    embedding.build()  # TensorFlow creates the variables here, and restores them as it does",
        "    status.assert_existing_objects_matched()",
        "    return embedding",
    ]
    top = header(
        f"TensorFlow mid-level TPU embedding configs ({len(spec.tables)} tables), with their trained state.",
        source.origin,
        [
            "Written for TensorFlow 2.15: it imports `tensorflow` (pip install tensorflow==2.15.*).",
            "To run it on a CPU without TensorFlow, with tpu-embedding-shim's TensorFlow-shaped",
            "namespace, change that one line to `import tpu_embedding_shim as tf`.",
            f"The tables and slots are in the TensorFlow checkpoint {CHECKPOINT_DIR}/ckpt-1 beside",
            "this file; tpu_embedding() and serving() restore it.",
        ],
    )
    lines = top + ["import os", "", "import tensorflow as tf", *sorted(set(imports))]
    lines += [
        "",
        f'CHECKPOINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{CHECKPOINT_DIR}", "ckpt-1")',
    ]
    if any("_StepCounter" in line for line in body):
        lines += ["", "", *embedded("tf_midlevel_model").splitlines()]
    return "\n".join(lines + body) + "\n"


def notes(source: MigrationInput) -> list[str]:
    return [
        f"Weights: {CHECKPOINT_DIR}/ckpt-1, a TensorFlow object-based checkpoint of a TPUEmbedding saved as "
        f"`embedding=` (global step {source.step}); restore it with tf.train.Checkpoint(embedding=...).restore()."
    ]


__all__ = ["TARGET", "NAME", "TITLE", "map_option", "build", "weights", "write_weights", "code", "notes"]


# The weights go in a TensorFlow checkpoint (write_weights), not weights.npz.
TARGET = dataclasses.replace(
    Target(name=NAME, title=TITLE, map_option=map_option, weights=weights, code=code, build=build, notes=notes),
    write_weights=write_weights,
)
