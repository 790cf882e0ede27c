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
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from ..spec import AdamSpec, OptimizerSpec, SGDSpec
from ..spec import initializers as spec_initializers
from .codegen import (
    LOAD_WEIGHTS,
    feature_lines,
    header,
    importable_name,
    literal,
    sparsecore_table_lines,
    table_variables,
    weights_constants,
)
from .convert import Target, make_row
from .options import Option
from .report import CONVERTED, EXACT, IMPOSSIBLE, Row
from .source import Source

__all__ = [
    "TARGET",
    "NAME",
    "TITLE",
    "SLOTS",
    "adam_learning_rate",
    "map_option",
    "weights",
    "code",
    "build",
    "notes",
]

NAME = "jax"
TITLE = "jax-tpu-embedding 0.1.0 (TableSpec / FeatureSpec, SparseCore)"

SLOTS: dict[str, tuple[tuple[str, str], ...]] = {
    "sgd": (),
    "adagrad": (("accumulators", "accumulator"),),
    "adagrad_momentum": (("accumulators", "accumulator"), ("momenta", "momentum")),
    "adam": (("momenta", "momentum"), ("velocities", "velocity")),
    "ftrl": (("accumulators", "accumulator"), ("linears", "linear")),
}
"""Optimizer kind -> (TF's slot name, jax-tpu-embedding's slot field) in the slot tuple's order."""

_SPECS = {
    "sgd": ("SGDOptimizerSpec", "SGDSlotVariables"),
    "adagrad": ("AdagradOptimizerSpec", "AdagradSlotVariables"),
    "adagrad_momentum": ("AdagradMomentumOptimizerSpec", "AdagradMomentumSlotVariables"),
    "adam": ("AdamOptimizerSpec", "AdamSlotVariables"),
    "ftrl": ("FTRLOptimizerSpec", "FTRLSlotVariables"),
}
_RENAMES = {
    "adagrad": {"initial_accumulator": "initial_accumulator_value"},
    "adam": {"beta1": "beta_1", "beta2": "beta_2"},
}
"""Spec field -> jax-tpu-embedding's argument, per optimizer kind (other fields keep their name)."""
SHARED_FIELDS = {f.name for f in dataclasses.fields(OptimizerSpec)}
"""The options every TPU optimizer has (learning rate, clipping, weight decay): they apply to an SGD fallback too."""

PREPROCESS = (
    "TF's feature column mapped tokens to ids; here the ids must be made before the lookup: VOCABULARIES[feature] "
    "in model.py lists the tokens in TF's id order"
)
OOV = (
    "unknown tokens go to len(vocabulary) + FarmHash Fingerprint64(token) % num_oov_buckets, TF's hash "
    "(tf.strings.to_hash_bucket_fast), when making the ids"
)
SAFE = (
    "the feature column's safe rule dropped negative ids (and, for mean / sqrtn, ids whose weight is <= 0); give "
    "them weight 0 (or leave them out) before the lookup; an empty bag gives zeros, as in TF"
)
ADAM = (
    "jax-tpu-embedding's Adam is bias corrected (alpha_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), t = step + 1); "
    "TF's TPU Adam is not: the learning rate given is adam_learning_rate(lr) = lr * (1 - beta_1^t) / "
    "sqrt(1 - beta_2^t), which cancels it (model.py defines it)"
)


def adam_learning_rate(learning_rate, beta_1, beta_2):
    """TF's TPU Adam step size for jax-tpu-embedding's bias-corrected Adam: the correction cancels out.

    jax-tpu-embedding multiplies the learning rate by sqrt(1 - beta_2**t) / (1 - beta_1**t) (t = step + 1);
    TF's TPU Adam does not. `learning_rate` is a number or a function of the step.
    """

    def corrected(step):
        t = step + 1
        rate = learning_rate(step) if callable(learning_rate) else learning_rate
        return rate * (1.0 - beta_1**t) / (1.0 - beta_2**t) ** 0.5

    return corrected


# The report ----------------------------------------------------------------------------------------


def map_option(option: Option, source: Source) -> Row:
    if option.where == "spec":
        return _spec_row(option)
    if option.feature is not None:
        if source.is_tensor_core(option.table or ""):
            return make_row(
                option, CONVERTED, "the model's dense lookup", "a tensor-core feature: the model looks it up"
            )
        return feature_row(option, source, "preprocess_sparse_dense_matmul_input(features, features_weights)")
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
    return table_row(option, source, _class_of, _jax_initializer)


def _spec_row(option: Option) -> Row:
    name, value = option.name, option.value
    if name in ("partition_strategy", "num_shards"):
        return sharding_row(option, "jax-tpu-embedding", "sharded_variables() in model.py")
    if name == "pipeline_execution_with_tensor_core":
        if not value:
            return make_row(option, EXACT, "(lookups see every update)")
        return make_row(
            option,
            IMPOSSIBLE,
            how="lookups would see the previous step's update; TF's pipelined lookups were one step stale "
            "(jax-tpu-embedding's lib/auto_pipelining overlaps steps, but what it makes stale was not checked)",
        )
    if name == "gradient_multiplier_fn":
        return multiplier_row(
            option, "multiply the activation gradients by fn(step) before tpu_sparse_dense_matmul_grad"
        )
    if name == "profile_data_directory":
        return make_row(
            option,
            CONVERTED,
            "fdo.file_fdo_client.NPZFileFDOClient(base_dir=...)",
            "record() the statistics preprocess_sparse_dense_matmul_input returns (ids per partition, per table) "
            "and publish() them as .npz files; TF's profile files are not written",
        )
    raise KeyError(f"{NAME}: no rule for spec option {name!r}")


def sharding_row(option: Option, library: str, where: str) -> Row:
    """partition_strategy / num_shards: the target shards mod by its own device count; the weights are whole."""
    if option.name == "partition_strategy" and option.value == "mod":
        return make_row(option, EXACT, "MOD sharding (the only strategy)")
    target = "MOD sharding" if option.name == "partition_strategy" else "one shard per SparseCore"
    return make_row(
        option,
        CONVERTED,
        target,
        f"{library} shards each table MOD over every SparseCore, whatever TF did; the weights are whole tables in "
        f"id order, which {where} lays out: lookups and updates do not depend on it, a checkpoint's layout does",
    )


def multiplier_row(option: Option, how: str) -> Row:
    """experimental_gradient_multiplier_fn: the caller scales the activation gradients."""
    reference = importable_name(option.value)
    where = (
        f"model.py imports it ({reference[0]}.{reference[1]})"
        if reference
        else "a local function: model.py cannot import it, pass it yourself"
    )
    return make_row(option, CONVERTED, "your training step", f"{how}; {where}")


def feature_row(option: Option, source: Source, inputs: str) -> Row:
    """A feature's option: the ids and weights are the caller's inputs (`inputs` names where they go)."""
    name, value = option.name, option.value
    feature = next(f for f in source.features if f.name == option.feature)
    if name == "table":
        return make_row(option, EXACT, "the feature's table (shared config object)")
    if name == "id_source":
        if value == "identity":
            return make_row(option, EXACT, "integer ids")
        return make_row(option, CONVERTED, "your input pipeline", PREPROCESS)
    if name == "default_value":
        if feature.id_source != "identity":
            unknown = "are dropped (TF's -1)" if value in (None, -1) else f"get id {value}"
            return make_row(option, CONVERTED, "your input pipeline", f"unknown tokens {unknown} when making the ids")
        if value is None:
            return make_row(option, EXACT, "(not set: ids outside the vocabulary are the input's error)")
        return make_row(
            option, CONVERTED, "your input pipeline", f"replace ids outside [0, {feature.num_buckets}) by {value}"
        )
    if name == "num_oov_buckets":
        if not value:
            return make_row(option, EXACT, "(none)")
        return make_row(option, CONVERTED, "your input pipeline", OOV)
    if name == "weight_key":
        if value is None:
            return make_row(option, EXACT, "(no weights)")
        return make_row(
            option,
            CONVERTED,
            inputs,
            f"pass features[{value!r}] as the weights of {feature.name!r}; pooled as TF: sum w*e, mean sum(w*e) / "
            "sum(w), sqrtn sum(w*e) / sqrt(sum(w^2))",
        )
    if name == "max_sequence_length":
        if not value:
            return make_row(option, EXACT, "a pooled feature")
        return make_row(
            option,
            IMPOSSIBLE,
            "a pooled feature",
            f"every feature is pooled to [batch, dim] by the table's combiner; TF returns [batch, {value}, dim], "
            "one row per position (padded or truncated)",
        )
    if name == "safe_lookup":
        if not value:
            return make_row(option, EXACT, "ids as given (no pruning)")
        return make_row(option, CONVERTED, "your input pipeline", SAFE)
    if name == "dense_zero_is_padding":
        if not value:
            return make_row(option, EXACT, "ids as given")
        return make_row(
            option,
            CONVERTED,
            "your input pipeline",
            "TPUEstimator read 0 in a dense integer input as padding; here every dense entry is an id: give the "
            "zeros weight 0, or pass ragged ids without them",
        )
    raise KeyError(f"{NAME}: no rule for feature option {name!r}")


def table_row(
    option: Option,
    source: Source,
    class_of: Callable[[OptimizerSpec | None], str | None],
    initializer_code: Callable[[Any, int], str | None],
) -> Row:
    """vocabulary_size, dim, initializer, combiner, features, optimizer and its fields of a table: `class_of`
    names the target's optimizer class, `initializer_code` writes an initializer of the same distribution."""
    name, value = option.name, option.value
    table = source.table(option.table or "")
    if name in ("vocabulary_size", "dim", "combiner"):
        return make_row(option, EXACT, {"dim": "embedding_dim"}.get(name, name))
    if name == "features":
        return make_row(option, EXACT, "one spec per feature, sharing the table's")
    if name == "initializer":
        if initializer_code(value, table.dim) is None:
            return make_row(
                option,
                CONVERTED,
                "the weights' values",
                "the weights carry the table; this initializer has no equivalent written (zeros), which only "
                "matters for a fresh start",
            )
        return make_row(option, EXACT, "the same distribution (the table starts from the weights' values)")
    optimizer = source.optimizer_for(table.name)
    if name == "optimizer":
        return optimizer_kind_row(option, optimizer, class_of)
    return optimizer_field_row(option, optimizer, source, class_of)


def argument(optimizer: Any, field: str) -> str:
    """jax-tpu-embedding's (and Keras') argument for a spec field of `optimizer`."""
    return _RENAMES.get(optimizer.kind, {}).get(field, field)


def _class_of(optimizer: OptimizerSpec | None) -> str | None:
    """jax-tpu-embedding's spec class for `optimizer`, None when it has none."""
    return None if optimizer is None else _SPECS.get(optimizer.kind, (None,))[0]


def optimizer_kind_row(
    option: Option, optimizer: OptimizerSpec | None, class_of: Callable[[OptimizerSpec | None], str | None]
) -> Row:
    if optimizer is None:
        return make_row(option, EXACT, "SGD with learning rate 0 (no training: an inference-only spec)")
    target = class_of(optimizer)
    if target is None:
        return make_row(
            option,
            IMPOSSIBLE,
            "SGD at TF's learning rate",
            f"the target has no {optimizer.kind}: the table would train with SGD instead, and its slots "
            f"({', '.join(optimizer.slot_initial_values())}) are not carried over",
        )
    if optimizer.kind == "adam":
        return make_row(option, CONVERTED, f"{target}(learning_rate=adam_learning_rate(...))", ADAM)
    if optimizer.kind == "adagrad_momentum":
        return make_row(
            option,
            EXACT,
            f"{target}(initial_accumulator_value=0.0, initial_momentum_value=0.0)",
            "TF's slots start at 0; jax-tpu-embedding's defaults are 0.1 (and momentum 0.9): set explicitly",
        )
    return make_row(option, EXACT, target)


def optimizer_field_row(
    option: Option,
    optimizer: OptimizerSpec | None,
    source: Source,
    class_of: Callable[[OptimizerSpec | None], str | None],
) -> Row:
    """One hyper-parameter, as jax-tpu-embedding's SparseCore kernels apply it (keras-rs on JAX runs them too)."""
    field = option.name.removeprefix("optimizer.")
    value = option.value
    target = class_of(optimizer)
    if target is None:  # the table falls back to SGD: the shared options still apply, the optimizer's own do not
        if field not in SHARED_FIELDS:
            return make_row(
                option, IMPOSSIBLE, how=f"the optimizer ({getattr(optimizer, 'kind', None)}) has no equivalent"
            )
        target = class_of(SGDSpec(learning_rate=0.0))
        assert target is not None
    if field == "learning_rate":
        return learning_rate_row(option, target, source)
    if field == "use_gradient_accumulation":
        return make_row(option, EXACT, "(SparseCore sums a row's gradients before one update, as this project does)")
    if field in ("clip_weight_min", "clip_weight_max"):
        return make_row(
            option,
            CONVERTED,
            "tpu_sparse_dense_matmul_grad(embedding_var_limits=EMBEDDING_VAR_LIMITS)",
            "pass model.py's EMBEDDING_VAR_LIMITS (every table, keyed by its name: tables not stacked): the kernels "
            "clamp the updated rows, as TF does after the update",
        )
    if field == "weight_decay_factor":
        return make_row(option, IMPOSSIBLE, how="jax-tpu-embedding has no weight decay: rows would not decay")
    if field == "multiply_weight_decay_factor_by_learning_rate":
        if not optimizer.weight_decay_factor:  # type: ignore[union-attr]
            return make_row(option, EXACT, "(no weight decay)")
        return make_row(option, IMPOSSIBLE, how="no weight decay (see weight_decay_factor)")
    if field in ("clip_gradient_min", "clip_gradient_max"):
        return make_row(
            option,
            IMPOSSIBLE,
            how="jax-tpu-embedding has no gradient clipping: the summed row gradients would not be clipped",
        )
    if field == "epsilon" and optimizer.kind == "adam":  # type: ignore[union-attr]
        return make_row(
            option,
            IMPOSSIBLE,
            f"{target}(epsilon={value!r})",
            "the kernel adds epsilon * sqrt(1 - beta_2^t) (its epsilon_hat) to sqrt(v), TF adds epsilon: the "
            "denominators differ (most in the first 1 / (1 - beta_2) steps) where sqrt(v) is near epsilon",
        )
    if field == "lazy_adam":
        if value:
            return make_row(option, EXACT, "(SparseCore updates only the rows in the batch)")
        return make_row(
            option,
            IMPOSSIBLE,
            how="SparseCore updates only the rows in the batch; TF's non-lazy Adam decays every row's moments and "
            "moves every row every step",
        )
    if field == "sum_inside_sqrt":
        if not value:
            return make_row(option, EXACT, "m / (sqrt(v) + epsilon_hat)")
        return make_row(
            option,
            IMPOSSIBLE,
            how="the kernel divides by sqrt(v) + epsilon_hat; TF by sqrt(v + epsilon^2)",
        )
    if field == "allow_zero_accumulator":
        return make_row(option, EXACT, "(no numeric effect: zero accumulators are handled)")
    return make_row(option, EXACT, f"{target}({argument(optimizer, field)}={value!r})")


def learning_rate_row(option: Option, target: str, source: Source, steps: str = "") -> Row:
    """A number is exact; a function of the step is imported by the code when it can be, else impossible.
    `steps` says which step counter calls it."""
    value = option.value
    if not callable(value):
        return make_row(option, EXACT, f"{target}(learning_rate={value!r})")
    reference = importable_name(value)
    if reference is None:
        return make_row(
            option,
            IMPOSSIBLE,
            f"{target}(learning_rate=<a constant>)",
            "a local function of the step: the generated code cannot import it and uses its value at the "
            f"checkpoint's step ({value(source.step)!r}) as a constant (the built config calls the function)",
        )
    return make_row(
        option,
        CONVERTED,
        f"{target}(learning_rate={reference[1]})",
        f"model.py imports {reference[0]}.{reference[1]}; "
        + (steps or "it is called with the step given to tpu_sparse_dense_matmul_grad")
        + f": continue from the checkpoint's step ({source.step}), as TF's global step did",
    )


# The weights ---------------------------------------------------------------------------------------


def slot_arrays(source: Source, table: str, slots: dict[str, tuple[tuple[str, str], ...]]) -> dict[str, np.ndarray]:
    """`<table>/<slot>` -> TF's slot values, for an optimizer the target takes (else nothing)."""
    optimizer = source.optimizer_for(table)
    pairs = slots.get(optimizer.kind, ()) if optimizer is not None else ()
    return {f"{table}/{slot}": source.state[table][tf_slot] for tf_slot, slot in pairs}


def weights(source: Source) -> dict[str, np.ndarray]:
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


def adam_code(source: Source) -> list[str]:
    """`adam_learning_rate`'s definition when a table trains with Adam (its learning rate calls it), else nothing."""
    if not any((o := source.optimizer_for(t.name)) is not None and o.kind == "adam" for t in source.spec.tables):
        return []
    return ["", "", *inspect.getsource(adam_learning_rate).rstrip().splitlines()]


def learning_rates(source: Source) -> dict[str, Any]:
    """table -> TF's learning rate (a number or the function itself), for tables with an optimizer."""
    out = {}
    for table in source.spec.tables:
        optimizer = source.optimizer_for(table.name)
        if optimizer is not None:
            out[table.name] = optimizer.learning_rate
    return out


def learning_rates_code(source: Source, imports: list[str]) -> list[str]:
    """`LEARNING_RATES = {...}`: numbers, imported functions, or a local function's value at the checkpoint's step."""
    lines = ["LEARNING_RATES = {"]
    for table, rate in learning_rates(source).items():
        if not callable(rate):
            lines.append(f"    {table!r}: {literal(float(rate))},")
            continue
        reference = importable_name(rate)
        if reference is None:
            lines.append(
                f"    {table!r}: {literal(float(rate(source.step)))},  # TF: a local function of the step: its value "
                f"at step {source.step} (report.md)"
            )
        else:
            imports.append(f"from {reference[0]} import {reference[1]}")
            lines.append(f"    {table!r}: {reference[1]},  # a function of the step")
    lines.append("}")
    return lines


def _optimizer_code(optimizer: OptimizerSpec | None, table: str) -> str:
    """The optimizer spec's source, then a comment when it is not TF's optimizer."""
    if optimizer is None:
        return "embedding_spec.SGDOptimizerSpec(learning_rate=0.0),  # inference only"
    rate = f"learning_rates[{table!r}]"
    cls = _class_of(optimizer)
    if cls is None:
        return f"embedding_spec.SGDOptimizerSpec(learning_rate={rate}),  # TF: {optimizer.kind} (report.md)"
    arguments = [f"learning_rate={rate}"]
    if isinstance(optimizer, AdamSpec):
        arguments = [f"learning_rate=adam_learning_rate({rate}, {optimizer.beta1!r}, {optimizer.beta2!r})"]
    for field in dataclasses.fields(optimizer):
        if field.name in SHARED_FIELDS or field.name in ("lazy_adam", "sum_inside_sqrt", "allow_zero_accumulator"):
            continue
        arguments.append(f"{argument(optimizer, field.name)}={literal(getattr(optimizer, field.name))}")
    if optimizer.kind == "adagrad_momentum":
        arguments += ["initial_accumulator_value=0.0", "initial_momentum_value=0.0"]
    return f"embedding_spec.{cls}({', '.join(arguments)}),"


def code(source: Source) -> str:
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
        argument = f"optimizer={_optimizer_code(source.optimizer_for(table.name), table.name)}"
        lines += sparsecore_table_lines(variables[table.name], "embedding_spec.TableSpec", table, initializer, argument)
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


def vocabularies_code(source: Source) -> list[str]:
    """`VOCABULARIES = {feature: tokens in id order}` for the features whose ids came from a vocabulary."""
    vocabularies = {f.name: f.vocabulary or () for f in source.features if f.id_source != "identity"}
    if not vocabularies:
        return []
    lines = [
        "",
        "# Tokens in TF's id order: map tokens to ids before the lookup (report.md, id_source).",
        "VOCABULARIES = {",
    ]
    lines += [f"    {name!r}: {literal(tuple(tokens))}," for name, tokens in vocabularies.items()]
    return lines + ["}"]


def run_code(source: Source, text: str) -> dict[str, Any]:
    """Executes generated code (not written anywhere) and returns its namespace."""
    namespace: dict[str, Any] = {"__name__": f"migrated_{NAME}", "__file__": "model.py"}
    exec(compile(text, "model.py", "exec"), namespace)
    return namespace


def build(source: Source) -> dict[str, Any]:
    """The generated code's objects, made in-process (the functions themselves as learning rates):
    {'feature_specs': {feature: FeatureSpec}, 'variables': {table: EmbeddingVariables}, 'tensor_core': {...}}."""
    if importlib.util.find_spec("jax_tpu_embedding") is None:
        raise ImportError("No module named 'jax_tpu_embedding'")
    namespace = run_code(source, code(source))
    arrays = weights(source)
    return {
        "feature_specs": namespace["feature_specs"](learning_rates(source)),
        "variables": namespace["embedding_variables"](arrays),
        "tensor_core": namespace["tensor_core_tables"](arrays),
    }


def notes(source: Source) -> list[str]:
    out = [
        "Weights: weights.npz, `<table>` (the table) and `<table>/<slot>` (jax-tpu-embedding's slot names, TF's "
        f"values, global step {source.step}); model.py's embedding_variables() reads them.",
        "Lookups and updates need a SparseCore TPU (v5p, v6e): on a CPU the specs construct and validate, and the "
        "variables are laid out with jax-tpu-embedding's own stacking.",
        f"Pass tpu_sparse_dense_matmul_grad step=STEP + the updates since (STEP = {source.step}): learning-rate "
        "functions and Adam's correction read it, as TF's read the global step.",
    ]
    if source.batch_size is None:
        out.append(
            "No global batch size was given: FeatureSpec shapes hold None, which preparing them for training "
            "refuses; convert with batch_size=... (CLI --batch-size) or set GLOBAL_BATCH_SIZE in model.py."
        )
    return out


TARGET = Target(name=NAME, title=TITLE, map_option=map_option, weights=weights, code=code, build=build, notes=notes)
