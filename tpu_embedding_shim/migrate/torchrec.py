"""To TorchRec: `EmbeddingBagCollection` / `EmbeddingCollection` configs, FBGEMM's fused optimizers, their state.

The target is TorchRec 1.9.2 with FBGEMM (fbgemm-gpu 1.8.0; `fbgemm-gpu-cpu`
on a CPU): pooled features become `EmbeddingBagConfig`s of one
`EmbeddingBagCollection` (`ebc`); a table read by a sequence feature becomes
an `EmbeddingConfig` of an `EmbeddingCollection` (`ec`), which returns one row
per id (the generated `lookup()` pads or truncates them, and pools the pooled
features of such a table itself). Training runs in FBGEMM's fused kernels
(the optimizer runs inside the backward): `torchrec.optim.SGD` / `Adagrad`
attached with `_apply_optimizer_in_backward` become `EmbOptimType.EXACT_SGD` /
`EXACT_ADAGRAD` once the model is sharded (`shard()`: table-wise, the fused
compute kernel; tensor-core tables data-parallel, trained by the model's own
optimizer).

The conversions (each in the report):

- TorchRec pools with SUM or unweighted MEAN only: `sqrtn` and a weighted
  `mean` become SUM with per-id coefficient weights (`w/sum(w)`,
  `w/sqrt(sum(w^2))`, after TF's safe-rule pruning), and then the whole
  collection is weighted (`is_weighted=True`), so every pooled feature gets
  coefficients (`coefficients()` in the generated code computes them);
- FBGEMM's EXACT_ADAGRAD starts its state at 0 and adds `eps` (1e-8) to the
  root: the converter sets `eps=0` and ships TF's accumulators (which hold
  the initial value), written into the fused state by `shard()`;
- FBGEMM's kernels need `dim % 4 == 0`: other tables are zero-padded to the
  next multiple of 4 and `lookup()` returns the first `dim` columns.

Weights (`weights.npz`, float32, rows in id order, whole tables):

- `embedding_bags.<table>.weight` (`[V, D4]`, D4 = dim rounded up to a
  multiple of 4) for the tables of `ebc`, `embeddings.<table>.weight` for
  those of `ec`: the collections' `state_dict` keys;
- `<that key>/<table>.momentum1`: EXACT_ADAGRAD's state (TF's
  `accumulators`; padding columns hold the initial value), the key TorchRec's
  fused optimizer gives it in `state_dict()['state'][<key>]`. A stand-in ADAM
  (`allow_lossy`) gets `<table>.momentum1` and `<table>.exp_avg_sq` (TF's
  `momenta` and `velocities`).

Load them with the generated `model.py`: `build()` makes the collections
with the tables loaded; `shard(build())` (inside a torch.distributed process
group) makes the `DistributedModelParallel` and writes the tables and the
fused optimizers' state shard by shard; `lookup(model, batch)` gives TF's
activations.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np

from ..spec import AdamSpec, TableSpec
from ..spec import initializers as spec_initializers
from .codegen import header, importable_name, literal
from .convert import Target
from .options import Option
from .report import CONVERTED, EXACT, IMPOSSIBLE, Row
from .rows import Rule, converted, exact, from_tokens, impossible, make_row, row_of, when_on
from .runtime import embedded
from .source import MigrationInput

NAME = "torchrec"
TITLE = "TorchRec 1.9.2 + FBGEMM (fbgemm-gpu 1.8.0)"

_FBGEMM_HAS = (
    "FBGEMM's fused optimizers are SGD, EXACT_SGD, EXACT_ADAGRAD, (EXACT_)ROWWISE_ADAGRAD, ADAM, "
    "PARTIAL_ROWWISE_ADAM, LAMB, PARTIAL_ROWWISE_LAMB, LARS_SGD, MADGRAD"
)
_MODEL_OPTIMIZER = "the model's (tensor core)"
_ANY_PLAN = (
    "the numbers never depend on it: the tables are shipped whole in id order and load into any TorchRec plan "
    "(TorchRec has no mod layout; its row_wise blocks of ceil(V/W) rows are TF's div sizes only when W divides V)"
)


# Every attribute of a torch.nn.ModuleDict (torch 2.13): a ModuleDict cannot hold a module under one of them.
MODULE_DICT_NAMES = frozenset(
    """
    T_destination __annotations__ __call__ __class__ __contains__ __delattr__ __delitem__ __dict__ __dir__ __doc__
    __eq__ __format__ __ge__ __getattr__ __getattribute__ __getitem__ __getstate__ __gt__ __hash__ __init__
    __init_subclass__ __iter__ __le__ __len__ __lt__ __module__ __ne__ __new__ __reduce__ __reduce_ex__ __repr__
    __setattr__ __setitem__ __setstate__ __sizeof__ __str__ __subclasshook__ __weakref__ _apply _backward_hooks
    _backward_pre_hooks _buffers _call_impl _compiled_call_impl _forward_hooks _forward_hooks_always_called
    _forward_hooks_with_kwargs _forward_pre_hooks _forward_pre_hooks_with_kwargs _get_backward_hooks
    _get_backward_pre_hooks _get_name _is_full_backward_hook _load_from_state_dict _load_state_dict_post_hooks
    _load_state_dict_pre_hooks _maybe_warn_non_full_backward_hook _modules _named_members
    _non_persistent_buffers_set _parameters _register_load_state_dict_pre_hook _register_state_dict_hook
    _replicate_for_data_parallel _save_to_state_dict _slow_forward _state_dict_hooks _state_dict_pre_hooks
    _version _wrapped_call_impl add_module apply bfloat16 buffers call_super_init children clear compile cpu cuda
    double dump_patches eval extra_repr float forward get_buffer get_extra_state get_parameter get_submodule half
    ipu items keys load_state_dict modules mtia named_buffers named_children named_modules named_parameters
    parameters pop register_backward_hook register_buffer register_forward_hook register_forward_pre_hook
    register_full_backward_hook register_full_backward_pre_hook register_load_state_dict_post_hook
    register_load_state_dict_pre_hook register_module register_parameter register_state_dict_post_hook
    register_state_dict_pre_hook requires_grad_ set_extra_state set_submodule share_memory state_dict to to_empty
    train training type update values xpu zero_grad
    """.split()  # noqa: SIM905 (a word list reads better than 129 quoted strings)
)

# Layout: where each table goes and how it is trained -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fused:
    """A table's fused optimizer: FBGEMM's EmbOptimType, the torchrec.optim class TorchRec maps to it, its keyword
    arguments, and TF's slot -> FBGEMM's state name. `exact` is False for a stand-in."""

    kind: str
    cls: str
    kwargs: dict[str, float]
    states: tuple[tuple[str, str], ...]
    exact: bool


def in_ec(source: MigrationInput, table: str) -> bool:
    """True when a sequence feature reads `table`: it goes to the EmbeddingCollection."""
    return any(f.is_sequence for f in source.features_of(table))


def is_weighted(source: MigrationInput) -> bool:
    """True when a pooled table of the EmbeddingBagCollection needs per-id weights (weights given, or sqrtn)."""
    return any(
        f.weight_key is not None or source.table(f.table).combiner == "sqrtn"
        for f in source.features
        if not in_ec(source, f.table)
    )


def padded_dim(dim: int) -> int:
    """`dim` rounded up to a multiple of 4 (FBGEMM's kernels need it)."""
    return -(-dim // 4) * 4


def pooling(source: MigrationInput, table: str) -> str:
    """The PoolingType of a table of the EmbeddingBagCollection: MEAN for an unweighted mean, else SUM."""
    if source.table(table).combiner == "mean" and not is_weighted(source):
        return "MEAN"
    return "SUM"


def torchrec_names(source: MigrationInput) -> dict[str, str]:
    """TF's table name -> its name in TorchRec: the same, unless a torch.nn.ModuleDict cannot hold it.

    TorchRec's collections keep their tables in a ModuleDict keyed by name, which refuses a name with a '.' or one
    of its own attributes ('items', 'keys', 'forward', ...): such a table gets '_' for each '.' and a '_' appended
    until the name is free (the report's notes list each rename).
    """
    taken = {t.name for t in source.tables}
    out: dict[str, str] = {}
    for table in source.tables:
        name = table.name
        if not name or "." in name or name in MODULE_DICT_NAMES:
            name = name.replace(".", "_") or "table"
            while name in MODULE_DICT_NAMES or name in taken:
                name += "_"
            taken.add(name)
        out[table.name] = name
    return out


def torchrec_name(source: MigrationInput, table: str) -> str:
    """The table's name in TorchRec (see `torchrec_names`)."""
    return torchrec_names(source)[table]


def weight_key(source: MigrationInput, table: str) -> str:
    """The table's key in its collection's state_dict (and in weights.npz)."""
    name = torchrec_name(source, table)
    return f"embeddings.{name}.weight" if in_ec(source, table) else f"embedding_bags.{name}.weight"


def fused(source: MigrationInput, table: str) -> Fused | None:
    """The table's fused optimizer (None: a tensor-core table, or no optimizer)."""
    optimizer = source.optimizer_for(table)
    if optimizer is None:
        return None
    lr = optimizer.learning_rate_at(source.step)  # a function's value at the weights' step: see LEARNING_RATE_FNS
    if optimizer.kind == "sgd":
        return Fused("EXACT_SGD", "SGD", {"lr": lr}, (), True)
    if optimizer.kind == "adagrad":
        return Fused("EXACT_ADAGRAD", "Adagrad", {"lr": lr, "eps": 0.0}, (("accumulators", "momentum1"),), True)
    if isinstance(optimizer, AdamSpec):
        kwargs = {"lr": lr, "beta1": optimizer.beta1, "beta2": optimizer.beta2, "eps": optimizer.epsilon}
        return Fused("ADAM", "Adam", kwargs, (("momenta", "momentum1"), ("velocities", "exp_avg_sq")), False)
    return Fused("EXACT_SGD", "SGD", {"lr": lr}, (), False)


# The report ------------------------------------------------------------------------------------------------


def map_option(option: Option, source: MigrationInput) -> Row:
    if option.where == "spec":
        return row_of(_SPEC_ROWS, option, source, NAME)
    if option.feature is not None:
        return row_of(_FEATURE_ROWS, option, source, NAME)
    if option.name.startswith("optimizer."):
        return _optimizer_field_row(option, source)
    return _TABLE_ROWS[option.name](option, source)


_SPEC_ROWS: dict[str, Rule] = {
    "partition_strategy": exact("the sharding plan (shard(plan=...))", _ANY_PLAN),
    "num_shards": exact("the sharding plan (shard(plan=...))", _ANY_PLAN),
    "pipeline_execution_with_tensor_core": impossible(
        "no TorchRec setting gives TF's one-step-stale lookups (TrainPipelineSemiSync's staleness was not checked "
        "against it): every lookup will see the latest tables"
    ),
    "gradient_multiplier_fn": converted(
        "lookup(..., gradient_multiplier=fn(step))",
        lambda option: (
            "TorchRec has no gradient multiplier: lookup() scales the gradient of every activation by the "
            f"number it is given; call it with fn(global_step) ({_callable_note(option.value)})"
        ),
    ),
    "profile_data_directory": impossible(
        "TorchRec writes no lookup statistics: none will be written (the numbers stay)"
    ),
}


def _callable_note(function: Any) -> str:
    reference = importable_name(function)
    if reference is None:
        return f"{getattr(function, '__qualname__', function)!s} is not importable: copy it into model.py"
    return f"model.py imports {reference[0]}.{reference[1]}"


def _table_row_shape(option: Option, source: MigrationInput) -> Row:
    target = "num_embeddings" if option.name == "vocabulary_size" else "embedding_dim"
    table = source.table(option.table or "")
    if option.name == "dim" and table.dim % 4:
        return make_row(
            option,
            CONVERTED,
            f"embedding_dim={padded_dim(table.dim)}",
            f"FBGEMM's kernels need a multiple of 4: the table is zero-padded to {padded_dim(table.dim)} columns "
            f"(and its optimizer state too); lookup() returns the first {table.dim} (the padding gets no gradient)",
        )
    return make_row(option, EXACT, target)


def _table_row_initializer(option: Option, source: MigrationInput) -> Row:
    table = source.table(option.table or "")
    drawn = "TF's initializer's draws" if source.origin.startswith("fresh") else "the checkpoint's values"
    if _init_fn_code(table) is None:
        return make_row(
            option,
            CONVERTED,
            "the shipped weights",
            f"the table starts from {drawn} (weights.npz); no init_fn is written ({option.text} has no torch "
            "equivalent), so a re-initialized table would get TorchRec's default (uniform +-sqrt(1/V))",
        )
    return make_row(
        option,
        CONVERTED,
        "the shipped weights; init_fn",
        f"the table starts from {drawn} (weights.npz); init_fn draws from the same distribution with torch's "
        "random numbers (not the same numbers) if it is re-initialized",
    )


def _table_row_combiner(option: Option, source: MigrationInput) -> Row:
    table = option.table or ""
    combiner = option.value
    pooled = [f for f in source.features_of(table) if not f.is_sequence]
    if not pooled:
        return make_row(option, EXACT, "(not used)", "only sequence features read the table: nothing is pooled")
    if in_ec(source, table):
        return make_row(
            option,
            CONVERTED,
            "lookup(): SUM of the EmbeddingCollection's rows with coefficients",
            "a sequence feature reads the table too, so it is in the EmbeddingCollection (one row per id); "
            f"lookup() pools the rows of {', '.join(f.name for f in pooled)} with coefficients() ({combiner})",
        )
    if combiner == "sum":
        return make_row(option, EXACT, "PoolingType.SUM")
    if pooling(source, table) == "MEAN":
        return make_row(option, EXACT, "PoolingType.MEAN")
    formula = "w/sum(w)" if combiner == "mean" else "w/sqrt(sum(w^2))"
    return make_row(
        option,
        CONVERTED,
        "PoolingType.SUM, per-id weights",
        f"TorchRec pools with SUM or unweighted MEAN only: SUM with per-id weights c = {formula} (w = the "
        "feature's weights, else 1), which lookup() computes with coefficients() (is_weighted=True)",
    )


def _table_row_placement(option: Option, source: MigrationInput) -> Row:
    if option.value == "tensor_core":
        return make_row(
            option,
            CONVERTED,
            "data_parallel, dense kernel",
            "shard() replicates it (data_parallel) with no fused optimizer: train it with the model's optimizer",
        )
    return make_row(option, EXACT, "table_wise, FBGEMM's fused kernel")


def _table_row_features(option: Option, source: MigrationInput) -> Row:
    return make_row(option, EXACT, "feature_names")


def _table_row_optimizer(option: Option, source: MigrationInput) -> Row:
    table = option.table or ""
    if option.value == _MODEL_OPTIMIZER:
        return make_row(option, CONVERTED, "the model's optimizer", "a tensor-core table: no fused optimizer")
    setting = fused(source, table)
    if setting is None:
        return make_row(option, EXACT, "(none)", "no optimizer: attach one before training")
    target = f"EmbOptimType.{setting.kind} (torchrec.optim.{setting.cls})"
    if option.value == "sgd":
        return make_row(option, EXACT, target)
    if option.value == "adagrad":
        return make_row(
            option,
            CONVERTED,
            target,
            "eps=0 (FBGEMM adds eps, default 1e-8, to the root; TF adds nothing); FBGEMM starts its state "
            "(momentum1) at 0: shard() writes TF's accumulators, which hold the initial value",
        )
    if option.value == "adam":
        return make_row(
            option,
            IMPOSSIBLE,
            target,
            "FBGEMM's ADAM bias-corrects (m/(1-beta1^t), v/(1-beta2^t), t = the kernel's iteration count or a "
            "per-row counter) and adds eps to the corrected root; a TPU's Adam has no bias correction (and by "
            "default eps inside the root, sum_inside_sqrt); FBGEMM's CPU kernels have no ADAM (GPU only). ADAM "
            "stands in, with TF's momenta / velocities as its state",
        )
    slots = sorted(source.spec.optimizer_for(table).slot_initial_values())  # type: ignore[union-attr]
    return make_row(
        option,
        IMPOSSIBLE,
        "EmbOptimType.EXACT_SGD (a stand-in)",
        f"no {option.value} in FBGEMM ({_FBGEMM_HAS}): EXACT_SGD at TF's learning rate stands in, and TF's "
        f"slots {slots} are not shipped",
    )


_TABLE_ROWS = {
    "vocabulary_size": _table_row_shape,
    "dim": _table_row_shape,
    "initializer": _table_row_initializer,
    "combiner": _table_row_combiner,
    "quantization": impossible(
        "TorchRec has no simulated quantization: its training modules look the float rows up unrounded, so the "
        "activations (and the gradients that follow) would differ. Its quantized modules (torchrec.quant's "
        "EmbeddingBagCollection on FBGEMM's IntNBitTableBatchedEmbeddingBagsCodegen, made by from_float) store "
        "int8 / int4 rows with a scale and bias per row for inference: another rounding, and no training"
    ),
    "placement": _table_row_placement,
    "features": _table_row_features,
    "optimizer": _table_row_optimizer,
}


def _optimizer_field_row(option: Option, source: MigrationInput) -> Row:
    field = option.name.removeprefix("optimizer.")
    table = option.table or ""
    value = option.value
    setting = fused(source, table)
    assert setting is not None  # only tables with an optimizer have optimizer.* options
    if field == "learning_rate":
        if callable(value):
            return make_row(
                option,
                CONVERTED,
                "set_learning_rates(model, {table: fn(step)})",
                "FBGEMM's rate is a number: call set_learning_rates() with fn(global_step) before each backward "
                f"(LEARNING_RATE_FNS in model.py: {_callable_note(value)}); the fused rate starts at "
                f"fn({source.step}) = {setting.kwargs['lr']!r}",
            )
        return make_row(option, EXACT, "lr")
    if field == "use_gradient_accumulation":
        return make_row(
            option, EXACT, "(always)", "FBGEMM sums a step's gradients per row in fp32 before one update, as the engine"
        )
    if field in ("clip_weight_min", "clip_weight_max"):
        return make_row(
            option,
            IMPOSSIBLE,
            how="FBGEMM has no weight clipping (max_norm rescales a row's norm, another operation): rows will "
            "not be clipped",
        )
    if field == "weight_decay_factor":
        return make_row(
            option,
            IMPOSSIBLE,
            how="FBGEMM's EXACT_SGD and EXACT_ADAGRAD take no weight decay: rows will not decay",
        )
    if field == "multiply_weight_decay_factor_by_learning_rate":
        optimizer = source.optimizer_for(table)
        if not getattr(optimizer, "weight_decay_factor", None):
            return make_row(option, EXACT, "(no weight decay)")
        return make_row(option, IMPOSSIBLE, how="goes with weight_decay_factor, which FBGEMM does not do")
    if field in ("clip_gradient_min", "clip_gradient_max"):
        return make_row(
            option,
            IMPOSSIBLE,
            "(gradient_clipping=True, max_gradient=m would differ)",
            "FBGEMM's gradient_clipping clamps each entry's gradient before a row's duplicates are summed "
            "(checked on its CPU kernel), symmetrically; TF clamps the summed row gradient: gradients will not "
            "be clipped",
        )
    if not setting.exact:
        return make_row(
            option,
            IMPOSSIBLE,
            _stand_in_argument(setting, field),
            f"{source.optimizer_for(table).kind} has no FBGEMM equivalent (see `optimizer`)",  # type: ignore[union-attr]
        )
    if field == "initial_accumulator":
        return make_row(
            option,
            CONVERTED,
            "momentum1 (written by shard())",
            "FBGEMM starts momentum1 at 0: the shipped state is TF's accumulators, which start at this value",
        )
    raise KeyError(f"{NAME}: no rule for optimizer field {field!r}")


def _stand_in_argument(setting: Fused, field: str) -> str:
    renames = {"beta1": "beta1", "beta2": "beta2", "epsilon": "eps"}
    if setting.kind == "ADAM" and field in renames:
        return f"ADAM {renames[field]}"
    return ""


# Feature rows ----------------------------------------------------------------------------------------------


def _default_value_row(option: Option, source: MigrationInput) -> Row:
    feature = source.feature(option.feature or "")
    value = option.value
    if feature.id_source == "identity":
        how = f"lookup() maps ids outside [0, {feature.num_buckets}) to {value}, as TF's identity column"
        return make_row(option, CONVERTED, "lookup()", how)
    if feature.num_oov_buckets:
        return make_row(option, EXACT, "(not used)", "the OOV buckets take the unknown tokens")
    if value == -1:
        return make_row(
            option, CONVERTED, "token_ids(), lookup()", "token_ids() gives unknown tokens -1; lookup() drops them"
        )
    return make_row(option, CONVERTED, "token_ids()", f"token_ids() maps unknown tokens to {value}, as TF")


def _safe_lookup_row(option: Option, source: MigrationInput) -> Row:
    feature = source.feature(option.feature or "")
    weighted_pool = (
        not feature.is_sequence and feature.weight_key is not None and source.table(feature.table).combiner != "sum"
    )
    if not weighted_pool:
        return make_row(
            option,
            EXACT,
            "(nothing to prune)",
            "unweighted or sum: no entry is pruned; negative ids are dropped by lookup() either way, and "
            "empty bags give zeros",
        )
    rule = "drops entries with weight <= 0" if option.value else "keeps entries with weight <= 0"
    return make_row(option, CONVERTED, "coefficients(..., safe=...)", f"coefficients() {rule}, as TF")


def _weight_key_row(option: Option, source: MigrationInput) -> Row:
    feature = source.feature(option.feature or "")
    combiner = source.table(feature.table).combiner
    if feature.is_sequence:
        how = "" if feature.weight_key is None else "TF ignores a sequence feature's weights, and so does lookup()"
        return make_row(option, EXACT, "(no weights)", how)
    if in_ec(source, feature.table):
        if feature.weight_key is None and combiner != "sqrtn":
            return make_row(option, EXACT, "(no weights)")
        return make_row(option, CONVERTED, "coefficients()", "folded into the coefficients lookup() pools with")
    if feature.weight_key is None:
        if not is_weighted(source):
            return make_row(option, EXACT, "(no weights)")
        return make_row(
            option,
            CONVERTED,
            "KeyedJaggedTensor weights (is_weighted=True)",
            "the collection is weighted (is_weighted applies to all its features): lookup() passes "
            "coefficients() as this feature's weights",
        )
    if combiner == "sum":
        return make_row(option, EXACT, "KeyedJaggedTensor weights (is_weighted=True)")
    return make_row(
        option,
        CONVERTED,
        "KeyedJaggedTensor weights (is_weighted=True)",
        "the weights are folded into the coefficients (coefficients()) that SUM pools with",
    )


_FEATURE_ROWS: dict[str, Rule] = {
    "table": exact(lambda option: f"feature_names of {option.table!r}"),
    "id_source": when_on(
        "KeyedJaggedTensor values (the ids)",
        CONVERTED,
        "token_ids() in model.py",
        "TorchRec takes integer ids: token_ids() maps tokens with the shipped vocabulary (id = index), as TF's "
        "vocabulary table",
        on=from_tokens,
    ),
    "default_value": _default_value_row,
    "num_oov_buckets": converted(
        "token_ids(..., hash_bucket=...)",
        lambda option: (
            "token_ids() puts an unknown token in len(vocabulary) + hash_bucket(token, "
            f"{option.value}); pass TF's FarmHash Fingerprint64 bucket (tf.strings.to_hash_bucket_fast, or "
            "tpu_embedding_shim.engine.farmhash.hash_bucket): TorchRec has no hashing of its own"
        ),
    ),
    "weight_key": _weight_key_row,
    "max_sequence_length": when_on(
        "pooled",
        CONVERTED,
        "EmbeddingConfig in an EmbeddingCollection",
        lambda option: (
            f"the EmbeddingCollection returns one row per id (jagged): lookup() truncates the ids to "
            f"{option.value} before the lookup (dropped ids get no gradient, as TF) and pads to [B, {option.value}, "
            "dim]; ids sit at consecutive positions (TorchRec has no positions: a gap inside a sequence closes up)"
        ),
    ),
    "safe_lookup": _safe_lookup_row,
    "dense_zero_is_padding": when_on(
        "(ids as given)",
        CONVERTED,
        "from_dense() in model.py",
        "TPUEstimator read 0 in a dense integer input as padding: from_dense() drops zeros and negative entries "
        "when it makes (ids, lengths); ragged and sparse inputs are not affected",
    ),
}


def notes(source: MigrationInput) -> list[str]:
    out = [
        "Train through shard(build()) (a DistributedModelParallel, inside a torch.distributed process group): "
        "the fused optimizers run there, inside the backward; build() alone only looks up.",
        "FBGEMM's CPU kernels have no ADAM: a model with an ADAM stand-in shards on a GPU only (build() and "
        "lookups run anywhere).",
    ]
    padded = [t.name for t in source.tables if t.dim % 4]
    if padded:
        out.append(f"Padded to a multiple of 4 columns (FBGEMM's kernels need it): {', '.join(padded)}.")
    renamed = [f"{old!r} -> {new!r}" for old, new in torchrec_names(source).items() if old != new]
    if renamed:
        out.append(
            "Renamed (TorchRec keeps tables in a torch.nn.ModuleDict, which refuses a '.' or one of its attribute "
            f"names): {', '.join(renamed)}; model.py and weights.npz use the new names."
        )
    return out


# Weights ---------------------------------------------------------------------------------------------------


def _padded(values: np.ndarray, dim: int, fill: float) -> np.ndarray:
    values = np.asarray(values, dtype=np.float32)
    if values.shape[1] == dim:
        return values.copy()
    out = np.full((values.shape[0], dim), fill, dtype=np.float32)
    out[:, : values.shape[1]] = values
    return out


def weights(source: MigrationInput) -> dict[str, np.ndarray]:
    """Tables under their state_dict keys and fused optimizer states under `<key>/<table>.<state>`, padded to D4."""
    out: dict[str, np.ndarray] = {}
    for table in source.tables:
        key = weight_key(source, table.name)
        arrays = source.state[table.name]
        dim = padded_dim(table.dim)
        out[key] = _padded(arrays["embedding"], dim, 0.0)
        setting = fused(source, table.name)
        if setting is None:
            continue
        initial = source.optimizer_for(table.name).slot_initial_values()  # type: ignore[union-attr]
        for slot, state in setting.states:
            # Padding columns never get a gradient; a positive accumulator there keeps Adagrad's 0 / sqrt(a) at 0.
            name = torchrec_name(source, table.name)
            out[f"{key}/{name}.{state}"] = _padded(arrays[slot], dim, initial.get(slot, 0.0))
    return out


# Code ------------------------------------------------------------------------------------------------------

_INIT_FNS = {
    spec_initializers.TruncatedNormal: "trunc_normal_",
    spec_initializers.RandomNormal: "normal_",
    spec_initializers.RandomUniform: "uniform_",
    spec_initializers.Zeros: "zeros_",
    spec_initializers.Ones: "ones_",
}


def _init_fn_code(table: TableSpec) -> str | None:
    """A torch `init_fn` drawing from the table's distribution (None when torch has none for it)."""
    init = table.effective_initializer()
    function = _INIT_FNS.get(type(init))
    if function is None:
        return None
    if isinstance(init, spec_initializers.TruncatedNormal):  # TF truncates at two standard deviations
        mean, std = float(init.mean), float(init.stddev)
        arguments = f"mean={mean!r}, std={std!r}, a={mean - 2 * std!r}, b={mean + 2 * std!r}"
    elif isinstance(init, spec_initializers.RandomNormal):
        arguments = f"mean={float(init.mean)!r}, std={float(init.stddev)!r}"
    elif isinstance(init, spec_initializers.RandomUniform):
        arguments = f"a={float(init.minval)!r}, b={float(init.maxval)!r}"
    else:
        return f"torch.nn.init.{function}"
    return f"functools.partial(torch.nn.init.{function}, {arguments})"


def _config_line(source: MigrationInput, table: TableSpec, sequence: bool) -> str:
    features = [f.name for f in source.features_of(table.name)]
    arguments = [
        f"name={torchrec_name(source, table.name)!r}",
        f"num_embeddings={table.vocabulary_size}",
        f"embedding_dim={padded_dim(table.dim)}",
        f"feature_names={literal(features)}",
    ]
    if not sequence:
        arguments.append(f"pooling=PoolingType.{pooling(source, table.name)}")
    init_fn = _init_fn_code(table)
    if init_fn is not None:
        arguments.append(f"init_fn={init_fn}")
    cls = "EmbeddingConfig" if sequence else "EmbeddingBagConfig"
    return f"    {cls}({', '.join(arguments)}),"


def _feature_entry(source: MigrationInput, name: str) -> str:
    feature = source.feature(name)
    table = source.table(feature.table)
    entry = {
        "table": torchrec_name(source, table.name),
        "collection": "ec" if in_ec(source, table.name) else "ebc",
        "combiner": table.combiner,
        "safe": feature.safe_lookup,
        "dim": table.dim,
        "max_sequence_length": feature.max_sequence_length,
        "num_buckets": feature.num_buckets,
        "out_of_range_id": feature.default_value if feature.id_source == "identity" else None,
        "dense_zero_is_padding": feature.dense_zero_is_padding,
    }
    return f"    {name!r}: {{{', '.join(f'{k!r}: {literal(v)}' for k, v in entry.items())}}},"


def _optimizer_lines(source: MigrationInput) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(FUSED_OPTIMIZERS entries, LEARNING_RATE_FNS entries, (module, name) of the learning-rate functions)."""
    fused_lines: list[str] = []
    rate_lines: list[str] = []
    imports: list[tuple[str, str]] = []
    for table in source.tables:
        setting = fused(source, table.name)
        if setting is None:
            continue
        name = torchrec_name(source, table.name)
        kind = setting.kind if setting.exact else f"{setting.kind}, a stand-in: see report.md"
        kwargs = ", ".join(f"{k!r}: {literal(float(v))}" for k, v in setting.kwargs.items())
        fused_lines.append(f"    {name!r}: (torchrec.optim.{setting.cls}, {{{kwargs}}}),  # EmbOptimType.{kind}")
        rate = source.optimizer_for(table.name).learning_rate  # type: ignore[union-attr]
        if callable(rate):
            reference = importable_name(rate)
            if reference is None:
                rate_lines.append(
                    f"    # {name!r}: TF's learning rate is {getattr(rate, '__qualname__', rate)!s}, a "
                    "function that cannot be written here: put it in"
                )
            else:
                imports.append(reference)
                rate_lines.append(f"    {name!r}: {reference[1]},")
    return fused_lines, rate_lines, imports


def _import_lines(references: list[tuple[str, str]]) -> list[str]:
    """`from module import a, b` per module of TF's functions of the step, as a block of their own."""
    modules: dict[str, list[str]] = {}
    for module, name in references:
        if name not in modules.setdefault(module, []):
            modules[module].append(name)
    if not modules:
        return []
    lines = ["# TF's functions of the global step, from the source model's code."]
    return [*lines, *(f"from {module} import {', '.join(names)}" for module, names in modules.items()), ""]


def _token(token: Any) -> str | int:
    """A vocabulary token as TF compares it: text (bytes decoded as UTF-8) or an int."""
    if isinstance(token, bytes):
        return token.decode("utf-8", "surrogateescape")
    return str(token) if isinstance(token, str) else int(token)


def code(source: MigrationInput) -> str:
    """model.py: the configs, the fused optimizers, and the functions that load, shard and look up."""
    ebc_tables = [t for t in source.tables if not in_ec(source, t.name)]
    ec_tables = [t for t in source.tables if in_ec(source, t.name)]
    fused_lines, rate_lines, rate_imports = _optimizer_lines(source)
    multiplier_imports, multiplier_lines = _function_lines(
        source.spec.gradient_multiplier_fn, "GRADIENT_MULTIPLIER_FN", "gradient multiplier"
    )
    configs = "\n".join(_config_line(source, t, sequence=in_ec(source, t.name)) for t in source.tables)
    lines = header(
        "TorchRec embeddings converted from a TensorFlow TPU embedding model (TorchRec 1.9.2 + FBGEMM).",
        source.origin,
        [
            "    module = build()              # the collections, TF's tables loaded (weights.npz beside this file)",
            "    model = shard(module)         # inside a torch.distributed process group: FBGEMM's fused kernels",
            "    out = lookup(model, batch)    # {feature: TF's activations}; backward() trains the tables",
        ],
    )
    lines += [
        *(["import functools"] if "functools.partial" in configs else []),
        "import os",
        "",
        "import numpy as np",
        "import torch",
        "import torchrec.optim",
        "from torch.distributed.optim import _apply_optimizer_in_backward",
        "from torchrec import (",
        "    EmbeddingBagCollection,",
        "    EmbeddingBagConfig,",
        "    EmbeddingCollection,",
        *(["    EmbeddingConfig,"] if ec_tables else []),
        "    KeyedJaggedTensor,",
        "    PoolingType,",
        ")",
        "",
        *_import_lines(rate_imports + multiplier_imports),
        "# Pooled tables (EmbeddingBagCollection). embedding_dim is TF's dim rounded up to a multiple of 4.",
        "TABLES = [",
        *[_config_line(source, t, sequence=False) for t in ebc_tables],
        "]",
        "# Tables a sequence feature reads (EmbeddingCollection: one row per id).",
        "SEQUENCE_TABLES = [",
        *[_config_line(source, t, sequence=True) for t in ec_tables],
        "]",
        "# True when a pooled table needs per-id weights (TF's weights, or sqrtn / weighted mean as coefficients):",
        "# every feature of the EmbeddingBagCollection then gets coefficients() as its weights.",
        f"IS_WEIGHTED = {is_weighted(source)!r}",
        "# Tensor-core tables: replicated (data_parallel), trained by the model's own optimizer.",
        f"DATA_PARALLEL = {literal([torchrec_name(source, t.name) for t in source.tensor_core_tables])}",
        "# table -> (torchrec.optim class, kwargs): FBGEMM's fused optimizer once sharded (lr: TF's learning rate).",
        "FUSED_OPTIMIZERS = {",
        *fused_lines,
        "}",
        "# table -> TF's learning rate as a function of the global step: call set_learning_rates() every step.",
        "LEARNING_RATE_FNS = {",
        *rate_lines,
        "}",
        "# TF's gradient multiplier, a function of the global step: lookup(..., gradient_multiplier=fn(step)).",
        *multiplier_lines,
        "# feature -> how TF looked it up (combiner, safe rule, sequence length, id range).",
        "FEATURES = {",
        *[_feature_entry(source, f.name) for f in source.features],
        "}",
        "# vocabulary feature -> its tokens (id = index), default_value and OOV buckets: see token_ids().",
        "VOCABULARIES = {",
        *[
            f"    {f.name!r}: {{'tokens': {literal([_token(t) for t in f.vocabulary])}, "
            f"'default_value': {literal(f.default_value)}, "
            f"'num_oov_buckets': {f.num_oov_buckets}}},"
            for f in source.features
            if f.vocabulary is not None
        ],
        "}",
    ]
    return "\n".join(lines) + "\n\n\n" + embedded("torchrec_model")


def _function_lines(function: Any, name: str, what: str) -> tuple[list[tuple[str, str]], list[str]]:
    """((module, name) to import, lines) that bind `name` to `function` in the generated code: imported when it has
    an importable name, else None with a comment saying it must be put in by hand."""
    if function is None:
        return [], [f"{name} = None"]
    reference = importable_name(function)
    if reference is None:
        label = getattr(function, "__qualname__", type(function).__name__)
        return [], [f"# TF's {what} is {label}, which cannot be written here: put it in.", f"{name} = None"]
    return [reference], [f"{name} = {reference[1]}"]


def build(source: MigrationInput) -> types.ModuleType:
    """The generated model.py run in-process (TorchRec imported), its `embeddings` built with the weights loaded.

    The module's attributes are the configs (`TABLES`, `SEQUENCE_TABLES`, `FUSED_OPTIMIZERS`, ...) and the
    functions (`build`, `shard`, `lookup`, ...); `embeddings` is `build(weights)`.
    Raises ImportError when torch or torchrec is missing.
    """
    import torch  # noqa: F401  (ImportError here when torch is missing)
    import torchrec  # noqa: F401

    module = types.ModuleType("torchrec_model")
    module.__file__ = "model.py"
    exec(compile(code(source), "<torchrec model.py>", "exec"), module.__dict__)
    namespace = vars(module)
    namespace["WEIGHTS"] = weights(source)
    namespace["embeddings"] = namespace["build"](namespace["WEIGHTS"])
    return module


TARGET = Target(name=NAME, title=TITLE, map_option=map_option, weights=weights, code=code, build=build, notes=notes)
