"""Every option of a `MigrationInput`, one `Option` each: what each target must say something about.

The spec-wide options first, then each table (its shape, initializer,
combiner, simulated quantization, placement, the features sharing it, its optimizer and every
hyper-parameter of it), then each feature (id source, weights, sequence,
the safe rule, padding). A target maps each one to a report row; the tests
check that no option goes without one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from .source import MigrationInput

__all__ = ["Option", "options", "NotInConfig", "SPEC_OPTIONS", "TABLE_OPTIONS", "FEATURE_OPTIONS", "UNSET", "describe"]

SPEC_OPTIONS = (
    "partition_strategy",
    "num_shards",
    "pipeline_execution_with_tensor_core",
    "gradient_multiplier_fn",
    "clipping_limit",
    "profile_data_directory",
)
TABLE_OPTIONS = (
    "vocabulary_size",
    "dim",
    "initializer",
    "combiner",
    "quantization",
    "placement",
    "features",
    "optimizer",
)
FEATURE_OPTIONS = (
    "table",
    "id_source",
    "default_value",
    "num_oov_buckets",
    "weight_key",
    "max_sequence_length",
    "safe_lookup",
    "dense_zero_is_padding",
)

UNSET: dict[str, tuple[Any, ...]] = {
    "pipeline_execution_with_tensor_core": (False,),
    "gradient_multiplier_fn": (None,),
    "profile_data_directory": (None,),
    "optimizer.clip_weight_min": (None,),
    "optimizer.clip_weight_max": (None,),
    "optimizer.weight_decay_factor": (None, 0),
    "optimizer.clip_gradient_min": (None,),
    "optimizer.clip_gradient_max": (None,),
    "quantization": (None,),
    "default_value": (None,),
    "num_oov_buckets": (0,),
}
"""Option -> the values that leave it unset, so that it changes nothing anywhere (every target maps it exactly)."""


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: where it is ('spec', 'table <name>', 'feature <name>'), its name and value.

    `name` is an optimizer hyper-parameter's 'optimizer.<field>'; `table` and
    `feature` name the table or feature the option belongs to (None for the
    spec's).
    """

    where: str
    name: str
    value: Any
    table: str | None = None
    feature: str | None = None

    @property
    def text(self) -> str:
        return describe(self.value)

    @property
    def unset(self) -> bool:
        """True when the option is at a value that changes nothing (see `UNSET`)."""
        return any(self.value is v or (v is not None and self.value == v) for v in UNSET.get(self.name, ()))


def describe(value: Any) -> str:
    """A value as the report prints it: functions by their name, long tuples cut short."""
    if callable(value) and not isinstance(value, type):
        name = getattr(value, "__qualname__", None) or type(value).__name__
        if dataclasses.is_dataclass(value):
            return repr(value)
        return f"<function {name}>"
    if isinstance(value, tuple) and len(value) > 6:
        return f"({', '.join(repr(v) for v in value[:5])}, ... {len(value)} in all)"
    return repr(value)


class NotInConfig:
    """The value of an option the source's config does not hold (an EmbeddingConfigSpec's shard count)."""

    def __init__(self, holder: str):
        self.holder = holder

    def __repr__(self) -> str:
        return f"not in the EmbeddingConfigSpec ({self.holder} sets it)"


def options(source: MigrationInput) -> Iterator[Option]:
    spec = source.spec
    for name in SPEC_OPTIONS:
        value: Any = getattr(spec, name)
        if name == "num_shards" and not source.num_shards_known:
            value = NotInConfig("the TPUEstimator's TPUConfig(num_shards=...)")
        yield Option("spec", name, value)
    for table in source.tables:
        where = f"table {table.name}"
        tensor_core = source.is_tensor_core(table.name)
        for name in TABLE_OPTIONS:
            if name == "placement":
                value = "tensor_core" if tensor_core else "tpu_embedding"
            elif name == "features":
                value = tuple(f.name for f in source.features_of(table.name))
            elif name == "optimizer":
                optimizer = source.optimizer_for(table.name)
                value = "the model's (tensor core)" if tensor_core else (optimizer.kind if optimizer else None)
            else:
                value = getattr(table, name)
            yield Option(where, name, value, table=table.name)
        optimizer = source.optimizer_for(table.name)
        if optimizer is not None:
            for field in dataclasses.fields(optimizer):
                yield Option(where, f"optimizer.{field.name}", getattr(optimizer, field.name), table=table.name)
    for feature in source.features:
        where = f"feature {feature.name}"
        for name in FEATURE_OPTIONS:
            yield Option(where, name, getattr(feature, name), table=feature.table, feature=feature.name)
