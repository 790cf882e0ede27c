"""To jax-tpu-embedding: `TableSpec` / `FeatureSpec` and optimizer specs, tables and slot tuples as arrays.

Written against jax-tpu-embedding 0.1.0 (the wheel pip gives Python 3.11;
0.2.0 is cp312 only): `jax_tpu_embedding.sparsecore.lib.nn.embedding_spec`
and `.embedding`. Its lookups and updates run on a SparseCore TPU (v5p,
v6e); on a CPU its specs construct, `prepare_feature_specs_for_training`
validates them and its stacking helpers lay out the variables. The update
formulas below were read from its kernels' lowering
(`lib/core/primitives/sparse_dense_matmul_grad_with_*.py`), and fed with the
specs' own `get_hyperparameters(step)` in tests/migrate/test_jax_tpu_embedding_run.py.

Weights (`weights.npz`, `Migration.weights`): `<table>`, the [V, D] float32
table in id order; `<table>/<slot>`, its optimizer slots under
jax-tpu-embedding's slot names with TensorFlow's values (`accumulators` ->
`accumulator`, `momenta` -> `momentum`, `velocities` -> `velocity`,
`linears` -> `linear`; TF's accumulators include their initial value). A
tensor-core table is `<table>` only: not a SparseCore table, the model
keeps it. The generated `model.py` loads them: `embedding_variables()`
gives `{table: EmbeddingVariables(table, slot=AdagradSlotVariables(...))}`,
whole tables; `sharded_variables(feature_specs, variables,
global_device_count, num_sc_per_device)` prepares the specs and lays the
variables out as the SparseCores hold them (`table_stacking.stack_and_shard_tables`).

Traps: TF's TPU Adam has no bias correction, jax-tpu-embedding's has one
(cancelled by the learning rate `adam_learning_rate` gives) and scales
epsilon; AdagradMomentum's slots start at 0 in TF, at 0.1 (and momentum
0.9) by jax-tpu-embedding's defaults; the step passed to
`tpu_sparse_dense_matmul_grad` must continue from the checkpoint's.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

import numpy as np

from ..spec import OptimizerSpec, TableSpec
from ..spec import initializers as spec_initializers
from .codegen import (
    LOAD_WEIGHTS,
    feature_lines,
    header,
    literal,
    sparsecore_table_lines,
    table_variables,
    weights_constants,
)
from .convert import Target
from .options import Option
from .report import CONVERTED, EXACT, Row
from .rows import Rule, converted, impossible, make_row, row_of
from .source import MigrationInput
from .sparsecore import (
    SHARED_FIELDS,
    SLOTS,
    adam_code,
    argument,
    batch_size_notes,
    feature_rows,
    learning_rates,
    learning_rates_code,
    multiplier,
    optimizer_code,
    run_code,
    sharding,
    slot_arrays,
    table_row,
    vocabularies_code,
)

__all__ = [
    "TARGET",
    "NAME",
    "TITLE",
    "map_option",
    "weights",
    "code",
    "build",
    "notes",
]

NAME = "jax"
TITLE = "jax-tpu-embedding 0.1.0 (TableSpec / FeatureSpec, SparseCore)"


_SPECS = {
    "sgd": ("SGDOptimizerSpec", "SGDSlotVariables"),
    "adagrad": ("AdagradOptimizerSpec", "AdagradSlotVariables"),
    "adagrad_momentum": ("AdagradMomentumOptimizerSpec", "AdagradMomentumSlotVariables"),
    "adam": ("AdamOptimizerSpec", "AdamSlotVariables"),
    "ftrl": ("FTRLOptimizerSpec", "FTRLSlotVariables"),
}

_NO_ARGUMENT = SHARED_FIELDS | {"lazy_adam", "sum_inside_sqrt", "allow_zero_accumulator"}
"""Spec fields that are no argument of the optimizer spec: the learning rate (given apart), the options every
optimizer has (the report says how each maps) and the switches the SparseCore kernels do not have."""


# The report ----------------------------------------------------------------------------------------


_SPEC_ROWS: dict[str, Rule] = {
    "partition_strategy": sharding("jax-tpu-embedding", "sharded_variables() in model.py"),
    "num_shards": sharding("jax-tpu-embedding", "sharded_variables() in model.py"),
    "pipeline_execution_with_tensor_core": impossible(
        "lookups would see the previous step's update; TF's pipelined lookups were one step stale "
        "(jax-tpu-embedding's lib/auto_pipelining overlaps steps, but what it makes stale was not checked)"
    ),
    "gradient_multiplier_fn": multiplier(
        "multiply the activation gradients by fn(step) before tpu_sparse_dense_matmul_grad"
    ),
    "profile_data_directory": converted(
        "fdo.file_fdo_client.NPZFileFDOClient(base_dir=...)",
        "record() the statistics preprocess_sparse_dense_matmul_input returns (ids per partition, per table) "
        "and publish() them as .npz files; TF's profile files are not written",
    ),
}
_FEATURE_ROWS = feature_rows("preprocess_sparse_dense_matmul_input(features, features_weights)")


def map_option(option: Option, source: MigrationInput) -> Row:
    if option.where == "spec":
        return row_of(_SPEC_ROWS, option, source, NAME)
    if option.feature is not None:
        if source.is_tensor_core(option.table or ""):
            return make_row(
                option, CONVERTED, "the model's dense lookup", "a tensor-core feature: the model looks it up"
            )
        return row_of(_FEATURE_ROWS, option, source, NAME)
    table = option.table
    assert table is not None
    if option.name == "placement":
        if option.value == "tensor_core":
            return make_row(
                option,
                CONVERTED,
                "a dense table of the model (e.g. flax.nnx.Embed)",
                "not a SparseCore table: the model keeps it and its optimizer trains it (as TF's did); its values "
                f"are `{table}` in weights.npz (tensor_core_tables() in model.py)",
            )
        return make_row(option, EXACT, "a SparseCore TableSpec")
    if source.is_tensor_core(table):
        return make_row(option, CONVERTED, "the model's dense table", "a tensor-core table: kept by the model")
    if option.name == "quantization":
        return make_row(option, EXACT, "TableSpec(quantization_config=QuantizationConfig(...))", _QUANTIZATION)
    return table_row(option, source, _class_of, _jax_initializer)


_QUANTIZATION = (
    "QuantizationConfig(min_value=lower, max_value=upper, num_buckets=num_buckets); the lookup hands the three to "
    "the SparseCore's forward kernel only (its gradient kernels take none: the backward is unquantized, as TF's), "
    "and only for a table not stacked with others, as model.py's sharded_variables() leaves them: 0.1.0's "
    "table_stacking.stack_tables / auto_stack_tables drop it. That kernel is in the TPU runtime, not published; "
    "TF 2.21's SparseCore lookup hands it the same three values. No lookup runs on a CPU"
)


def _class_of(optimizer: OptimizerSpec | None) -> str | None:
    """jax-tpu-embedding's spec class for `optimizer`, None when it has none."""
    return None if optimizer is None else _SPECS.get(optimizer.kind, (None,))[0]


def weights(source: MigrationInput) -> dict[str, np.ndarray]:
    """`<table>` -> the table, `<table>/<slot>` -> its slots (jax-tpu-embedding's names), every table."""
    out: dict[str, np.ndarray] = {}
    for table in source.tables:
        out[table.name] = source.state[table.name]["embedding"]
        out.update(slot_arrays(source, table.name, SLOTS))
    return out


# The code ------------------------------------------------------------------------------------------


def _jax_initializer(initializer: Any, dim: int) -> str | None:
    """jax.nn.initializers source of the same distribution, or None."""
    if initializer is None:
        initializer = spec_initializers.default_table_initializer(dim)
    kind = type(initializer)
    if kind is spec_initializers.TruncatedNormal and initializer.mean == 0:
        return f"jax.nn.initializers.truncated_normal(stddev={literal(float(initializer.stddev))})"
    if kind is spec_initializers.RandomNormal and initializer.mean == 0:
        return f"jax.nn.initializers.normal(stddev={literal(float(initializer.stddev))})"
    if kind is spec_initializers.Zeros:
        return "jax.nn.initializers.zeros"
    if kind is spec_initializers.Ones:
        return "jax.nn.initializers.ones"
    if kind is spec_initializers.Constant and isinstance(initializer.value, float):
        return f"jax.nn.initializers.constant({literal(initializer.value)})"
    return None


def _spec_class(optimizer: OptimizerSpec | None) -> str | None:
    """The optimizer spec's class as model.py names it (`embedding_spec.<Class>`), None when it has none."""
    cls = _class_of(optimizer)
    return None if cls is None else f"embedding_spec.{cls}"


def _arguments(optimizer: OptimizerSpec) -> list[str]:
    """The optimizer spec's arguments besides the learning rate: TF's values, and AdagradMomentum's slots at 0."""
    arguments = [
        f"{argument(optimizer, field.name)}={literal(getattr(optimizer, field.name))}"
        for field in dataclasses.fields(optimizer)
        if field.name not in _NO_ARGUMENT
    ]
    if optimizer.kind == "adagrad_momentum":
        arguments += ["initial_accumulator_value=0.0", "initial_momentum_value=0.0"]
    return arguments


def _quantization_code(table: TableSpec) -> str:
    """jax-tpu-embedding's `QuantizationConfig` of the table's simulated quantization (TF's bounds, as given)."""
    q = table.quantization
    assert q is not None
    return (
        f"embedding_spec.QuantizationConfig(min_value={literal(float(q.lower))}, "
        f"max_value={literal(float(q.upper))}, num_buckets={q.num_buckets})"
    )


def code(source: MigrationInput) -> str:
    spec = source.spec
    imports: list[str] = []
    rates = learning_rates_code(source, imports)
    lines = header(
        f"jax-tpu-embedding specs ({len(spec.tables)} SparseCore tables) and their weights (jax-tpu-embedding 0.1.0).",
        source.origin,
        [
            "feature_specs() builds the TableSpec / FeatureSpec; embedding_variables() reads weights.npz beside",
            "this file: {table: EmbeddingVariables(table, slot)}, whole tables in id order; sharded_variables()",
            "prepares the specs and lays the variables out for the SparseCores. Lookups and updates need a",
            "SparseCore TPU. Give tpu_sparse_dense_matmul_grad step=STEP + the updates since (TF's global step).",
        ],
    )
    lines += [
        "import os",
        "",
        "import jax",
        "import numpy as np",
        "from jax_tpu_embedding.sparsecore.lib.nn import embedding, embedding_spec, table_stacking",
        *sorted(set(imports)),
        "",
        *weights_constants(source),
        "",
        *rates,
    ]
    limits = {
        t.name: (source.optimizer_for(t.name).clip_weight_min, source.optimizer_for(t.name).clip_weight_max)  # type: ignore[union-attr]
        for t in spec.tables
        if source.optimizer_for(t.name) is not None
    }
    if any(bound is not None for pair in limits.values() for bound in pair):
        lines += [
            "# TF's clip_weight_min / max: pass as tpu_sparse_dense_matmul_grad(embedding_var_limits=...).",
            "EMBEDDING_VAR_LIMITS = {",
            *(f"    {name!r}: ({literal(low)}, {literal(high)})," for name, (low, high) in limits.items()),
            "}",
        ]
    lines += vocabularies_code(source)
    lines += adam_code(source)
    lines += [
        "",
        "",
        "def feature_specs(learning_rates=LEARNING_RATES):",
        '    """{feature: FeatureSpec}; features of one table share its TableSpec (every table has its optimizer)."""',
    ]
    variables = table_variables(spec.tables)
    for table in spec.tables:
        initializer = (_jax_initializer(table.initializer, table.dim), "jax.nn.initializers.zeros", "jax")
        optimizer_text = optimizer_code(
            source.optimizer_for(table.name), table.name, "embedding_spec.SGDOptimizerSpec", _spec_class, _arguments
        )
        quantization = [] if table.quantization is None else [f"quantization_config={_quantization_code(table)},"]
        lines += sparsecore_table_lines(
            variables[table.name],
            "embedding_spec.TableSpec",
            table,
            initializer,
            f"optimizer={optimizer_text}",
            *quantization,
        )
    lines += feature_lines(
        source,
        spec.features,
        "{name!r}: embedding_spec.FeatureSpec(name={name!r}, table_spec={variable}, input_shape=[GLOBAL_BATCH_SIZE], "
        "output_shape=[GLOBAL_BATCH_SIZE, {dim}])",
    )
    lines += [
        "",
        "",
        "def embedding_variables(weights=None):",
        '    """{table: EmbeddingVariables(table, slot)}: whole tables and slots in id order, TF\'s values."""',
        *LOAD_WEIGHTS,
        "    return {",
    ]
    for table in spec.tables:
        optimizer = source.optimizer_for(table.name)
        kind = optimizer.kind if optimizer is not None and optimizer.kind in _SPECS else "sgd"
        slot_class = _SPECS[kind][1]
        slots = ", ".join(f"{slot}=weights[{f'{table.name}/{slot}'!r}]" for _, slot in SLOTS[kind])
        lines.append(
            f"        {table.name!r}: embedding.EmbeddingVariables(table=weights[{table.name!r}], "
            f"slot=embedding_spec.{slot_class}({slots})),"
        )
    lines += [
        "    }",
        "",
        "",
        "def tensor_core_tables(weights=None):",
        '    """{table: [V, D] array}: TF\'s tensor-core tables; the model looks them up and trains them."""',
        *LOAD_WEIGHTS,
        f"    return {{name: weights[name] for name in {[t.name for t in source.tensor_core_tables]!r}}}",
        "",
        "",
        "def sharded_variables(feature_specs, variables, global_device_count, num_sc_per_device):",
        '    """Prepares `feature_specs` for training (in place); lays `variables` out as the SparseCores hold them:',
        "    {stacked table: EmbeddingVariables of [global_device_count * num_sc_per_device, rows, dim] arrays}.",
        '    """',
        "    embedding.prepare_feature_specs_for_training(feature_specs, global_device_count, num_sc_per_device)",
        "    table_specs = embedding.get_table_specs(feature_specs)",
        "    return table_stacking.stack_and_shard_tables(",
        "        table_specs, variables, global_device_count * num_sc_per_device",
        "    )",
    ]
    return "\n".join(lines) + "\n"


def build(source: MigrationInput) -> dict[str, Any]:
    """The generated code's objects, made in-process (the functions themselves as learning rates):
    {'feature_specs': {feature: FeatureSpec}, 'variables': {table: EmbeddingVariables}, 'tensor_core': {...}}."""
    if importlib.util.find_spec("jax_tpu_embedding") is None:
        raise ImportError("No module named 'jax_tpu_embedding'")
    namespace = run_code(code(source), NAME)
    arrays = weights(source)
    return {
        "feature_specs": namespace["feature_specs"](learning_rates(source)),
        "variables": namespace["embedding_variables"](arrays),
        "tensor_core": namespace["tensor_core_tables"](arrays),
    }


def notes(source: MigrationInput) -> list[str]:
    return [
        "Weights: weights.npz, `<table>` (the table) and `<table>/<slot>` (jax-tpu-embedding's slot names, TF's "
        f"values, global step {source.step}); model.py's embedding_variables() reads them.",
        "Lookups and updates need a SparseCore TPU (v5p, v6e): on a CPU the specs construct and validate, and the "
        "variables are laid out with jax-tpu-embedding's own stacking.",
        f"Pass tpu_sparse_dense_matmul_grad step=STEP + the updates since (STEP = {source.step}): learning-rate "
        "functions and Adam's correction read it, as TF's read the global step.",
        *batch_size_notes(source, "FeatureSpec shapes hold None, which preparing them for training refuses"),
    ]


TARGET = Target(name=NAME, title=TITLE, map_option=map_option, weights=weights, code=code, build=build, notes=notes)
