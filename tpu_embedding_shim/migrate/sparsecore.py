"""What jax-tpu-embedding and keras-rs share: both run jax-tpu-embedding's SparseCore kernels.

keras-rs on JAX turns a Keras optimizer into jax-tpu-embedding's and its
kernels apply the update, so the two targets take the same slots (TF's
`accumulators` -> `accumulator`, ...), the same learning rates (numbers, or
functions of the step the kernels are given), and report the same rows for
features, sharding and most optimizer options. Each target passes its own
names: its optimizer class (`class_of`), its initializer code, where the
inputs go.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ..spec import AdamSpec, OptimizerSpec, SGDSpec
from .codegen import importable_name, literal
from .options import Option
from .report import CONVERTED, EXACT, IMPOSSIBLE, Row
from .rows import Rule, converted, exact, follows_weight_decay, from_tokens, impossible, make_row, when_on
from .source import MigrationInput

__all__ = [
    "SLOTS",
    "SHARED_FIELDS",
    "adam_learning_rate",
    "argument",
    "FIELD_ROWS",
    "sharding",
    "multiplier",
    "feature_rows",
    "table_row",
    "learning_rate_row",
    "slot_arrays",
    "learning_rates",
    "learning_rates_code",
    "vocabularies_code",
    "adam_code",
    "batch_size_notes",
    "optimizer_code",
    "run_code",
]

SLOTS: dict[str, tuple[tuple[str, str], ...]] = {
    "sgd": (),
    "adagrad": (("accumulators", "accumulator"),),
    "adagrad_momentum": (("accumulators", "accumulator"), ("momenta", "momentum")),
    "adam": (("momenta", "momentum"), ("velocities", "velocity")),
    "ftrl": (("accumulators", "accumulator"), ("linears", "linear")),
}
"""Optimizer kind -> (TF's slot name, jax-tpu-embedding's slot field) in the slot tuple's order."""

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
POOLED = "pooled as TF: sum w*e, mean sum(w*e) / sum(w), sqrtn sum(w*e) / sqrt(sum(w^2))"
DENSE_ZERO = (
    "TPUEstimator read 0 in a dense integer input as padding; here every dense entry is an id: give the zeros "
    "weight 0, or pass ragged ids without them"
)
LIMITS_TARGET = "tpu_sparse_dense_matmul_grad(embedding_var_limits=EMBEDDING_VAR_LIMITS)"
LIMITS = (
    "pass model.py's EMBEDDING_VAR_LIMITS (every table, keyed by its name: tables not stacked): the kernels clamp "
    "the updated rows, as TF does after the update"
)
NO_GRADIENT_CLIPPING = "jax-tpu-embedding has no gradient clipping: the summed row gradients would not be clipped"
NOT_LAZY = (
    "SparseCore updates only the rows in the batch; TF's non-lazy Adam decays every row's moments and moves every "
    "row every step"
)
ADAM_EPSILON = (
    "the kernel adds epsilon * sqrt(1 - beta_2^t) (its epsilon_hat) to sqrt(v), TF adds epsilon: the denominators "
    "differ (most in the first 1 / (1 - beta_2) steps) where sqrt(v) is near epsilon"
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


def sharding(library: str, where: str) -> Rule:
    """partition_strategy / num_shards: the target shards mod by its own device count; the weights are whole."""

    def rule(option: Option, source: MigrationInput) -> Row:
        if option.name == "partition_strategy" and option.value == "mod":
            return make_row(option, EXACT, "MOD sharding (the only strategy)")
        target = "MOD sharding" if option.name == "partition_strategy" else "one shard per SparseCore"
        how = (
            f"{library} shards each table MOD over every SparseCore, whatever TF did; the weights are whole tables "
            f"in id order, which {where} lays out: lookups and updates do not depend on it, a checkpoint's layout does"
        )
        return make_row(option, CONVERTED, target, how)

    return rule


def multiplier(how: str) -> Rule:
    """experimental_gradient_multiplier_fn: the caller scales the activation gradients (`how` says where)."""

    def where(option: Option) -> str:
        reference = importable_name(option.value)
        if reference is None:
            return f"{how}; a local function: model.py cannot import it, pass it yourself"
        return f"{how}; model.py imports it ({reference[0]}.{reference[1]})"

    return converted("your training step", where)


def _default_value_row(option: Option, source: MigrationInput) -> Row:
    feature = source.feature(option.feature or "")
    if feature.id_source != "identity":
        unknown = "are dropped (TF's -1)" if option.value == -1 else f"get id {option.value}"
        return make_row(option, CONVERTED, "your input pipeline", f"unknown tokens {unknown} when making the ids")
    how = f"replace ids outside [0, {feature.num_buckets}) by {option.value}"
    return make_row(option, CONVERTED, "your input pipeline", how)


def feature_rows(inputs: str) -> dict[str, Rule]:
    """A feature's options: the ids and weights are the caller's inputs (`inputs` names where they go)."""
    return {
        "table": exact("the feature's table (shared config object)"),
        "id_source": when_on("integer ids", CONVERTED, "your input pipeline", PREPROCESS, on=from_tokens),
        "default_value": _default_value_row,
        "num_oov_buckets": converted("your input pipeline", OOV),
        "weight_key": when_on(
            "(no weights)",
            CONVERTED,
            inputs,
            lambda option: f"pass features[{option.value!r}] as the weights of {option.feature!r}; {POOLED}",
        ),
        "max_sequence_length": when_on(
            "a pooled feature",
            IMPOSSIBLE,
            "a pooled feature",
            lambda option: (
                f"every feature is pooled to [batch, dim] by the table's combiner; TF returns [batch, "
                f"{option.value}, dim], one row per position (padded or truncated)"
            ),
        ),
        "safe_lookup": when_on("ids as given (no pruning)", CONVERTED, "your input pipeline", SAFE),
        "dense_zero_is_padding": when_on("ids as given", CONVERTED, "your input pipeline", DENSE_ZERO),
    }


def table_row(
    option: Option,
    source: MigrationInput,
    class_of: Callable[[OptimizerSpec | None], str | None],
    initializer_code: Callable[[Any, int], str | None],
    steps: str = "",
) -> Row:
    """vocabulary_size, dim, initializer, combiner, features, optimizer and its fields of a table: `class_of`
    names the target's optimizer class, `initializer_code` writes an initializer of the same distribution, `steps`
    says which step counter calls a learning-rate function."""
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
    return optimizer_field_row(option, optimizer, source, class_of, steps)


def argument(optimizer: Any, field: str) -> str:
    """jax-tpu-embedding's (and Keras') argument for a spec field of `optimizer`."""
    return _RENAMES.get(optimizer.kind, {}).get(field, field)


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


FIELD_ROWS: dict[str, Rule] = {
    "use_gradient_accumulation": exact("(SparseCore sums a row's gradients before one update, as this project does)"),
    "clip_weight_min": converted(LIMITS_TARGET, LIMITS),
    "clip_weight_max": converted(LIMITS_TARGET, LIMITS),
    "weight_decay_factor": impossible("jax-tpu-embedding has no weight decay: rows would not decay"),
    "multiply_weight_decay_factor_by_learning_rate": follows_weight_decay("no weight decay (see weight_decay_factor)"),
    "clip_gradient_min": impossible(NO_GRADIENT_CLIPPING),
    "clip_gradient_max": impossible(NO_GRADIENT_CLIPPING),
    "lazy_adam": when_on("(SparseCore updates only the rows in the batch)", IMPOSSIBLE, "", NOT_LAZY, on=operator.not_),
    "sum_inside_sqrt": when_on(
        "m / (sqrt(v) + epsilon_hat)",
        IMPOSSIBLE,
        "",
        "the kernel divides by sqrt(v) + epsilon_hat; TF by sqrt(v + epsilon^2)",
    ),
    "allow_zero_accumulator": exact("(no numeric effect: zero accumulators are handled)"),
}
"""Optimizer field -> its row where it does not depend on the target's class (the other fields: an argument of
the optimizer class)."""


def optimizer_field_row(
    option: Option,
    optimizer: OptimizerSpec | None,
    source: MigrationInput,
    class_of: Callable[[OptimizerSpec | None], str | None],
    steps: str = "",
) -> Row:
    """One hyper-parameter, as jax-tpu-embedding's SparseCore kernels apply it (keras-rs on JAX runs them too);
    `steps` says which step counter calls a learning-rate function."""
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
        return learning_rate_row(option, target, source, steps)
    if field == "epsilon" and optimizer.kind == "adam":  # type: ignore[union-attr]
        return make_row(option, IMPOSSIBLE, f"{target}(epsilon={value!r})", ADAM_EPSILON)
    if field in FIELD_ROWS:
        return FIELD_ROWS[field](option, source)
    return make_row(option, EXACT, f"{target}({argument(optimizer, field)}={value!r})")


def learning_rate_row(option: Option, target: str, source: MigrationInput, steps: str = "") -> Row:
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


def slot_arrays(
    source: MigrationInput, table: str, slots: dict[str, tuple[tuple[str, str], ...]]
) -> dict[str, np.ndarray]:
    """`<table>/<slot>` -> TF's slot values, for an optimizer the target takes (else nothing)."""
    optimizer = source.optimizer_for(table)
    pairs = slots.get(optimizer.kind, ()) if optimizer is not None else ()
    return {f"{table}/{slot}": source.state[table][tf_slot] for tf_slot, slot in pairs}


def adam_code(source: MigrationInput) -> list[str]:
    """`adam_learning_rate`'s definition when a table trains with Adam (its learning rate calls it), else nothing."""
    if not any((o := source.optimizer_for(t.name)) is not None and o.kind == "adam" for t in source.spec.tables):
        return []
    return ["", "", *inspect.getsource(adam_learning_rate).rstrip().splitlines()]


def learning_rates(source: MigrationInput) -> dict[str, Any]:
    """table -> TF's learning rate (a number or the function itself), for tables with an optimizer."""
    out = {}
    for table in source.spec.tables:
        optimizer = source.optimizer_for(table.name)
        if optimizer is not None:
            out[table.name] = optimizer.learning_rate
    return out


def learning_rates_code(source: MigrationInput, imports: list[str]) -> list[str]:
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


def vocabularies_code(source: MigrationInput) -> list[str]:
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


def optimizer_code(
    optimizer: OptimizerSpec | None,
    table: str,
    sgd: str,
    class_of: Callable[[OptimizerSpec | None], str | None],
    arguments: Callable[[OptimizerSpec], list[str]],
) -> str:
    """The table's optimizer in `feature_specs()`, `<class>(learning_rate=learning_rates[table], <arguments>)`:
    `sgd` (the target's SGD class) at rate 0 without one (inference only), or at TF's rate, with a comment, for a
    kind the target lacks; Adam's rate through `adam_learning_rate`, which cancels the bias correction."""
    if optimizer is None:
        return f"{sgd}(learning_rate=0.0),  # inference only"
    rate = f"learning_rates[{table!r}]"
    cls = class_of(optimizer)
    if cls is None:
        return f"{sgd}(learning_rate={rate}),  # TF: {optimizer.kind} (report.md)"
    if isinstance(optimizer, AdamSpec):
        rate = f"adam_learning_rate({rate}, {optimizer.beta1!r}, {optimizer.beta2!r})"
    return f"{cls}({', '.join([f'learning_rate={rate}', *arguments(optimizer)])}),"


def batch_size_notes(source: MigrationInput, shapes: str) -> list[str]:
    """The note of a conversion without a global batch size, which SparseCore's fixed shapes need (`shapes` says
    what holds None in the target's configs and who takes it); nothing when it was given."""
    if source.batch_size is not None:
        return []
    return [
        f"No global batch size was given: {shapes}; convert with batch_size=... (CLI --batch-size) or set "
        "GLOBAL_BATCH_SIZE in model.py."
    ]


def run_code(text: str, target: str) -> dict[str, Any]:
    """Executes `target`'s generated code (not written anywhere) and returns its namespace."""
    namespace: dict[str, Any] = {"__name__": f"migrated_{target}", "__file__": "model.py"}
    exec(compile(text, "model.py", "exec"), namespace)
    return namespace
