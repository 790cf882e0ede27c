"""The whole embedding specification: what the engine is built from.

`EmbeddingSpec` gathers the tables, the features that look them up, the
default optimizer and the run-wide options (sharding, pipelining, gradient
multiplier, profiling). It is validated once, here, so the engine can trust
it. Every TensorFlow-shaped configuration (EmbeddingConfigSpec, feature
columns, v1 or v2 TableConfig / FeatureConfig) is lowered into one of these.

>>> from tpu_embedding_shim.spec import TableSpec, FeatureSpec, AdagradSpec
>>> spec = EmbeddingSpec(
...     tables=(TableSpec(name="t", vocabulary_size=10, dim=4),),
...     features=(FeatureSpec(name="f", table="t", num_buckets=10),),
...     optimizer=AdagradSpec(learning_rate=0.1))
>>> spec.optimizer_for("t").kind, spec.features_of("t")[0].name
('adagrad', 'f')
>>> EmbeddingSpec.from_dict(spec.to_dict()) == spec
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any

from .checks import check_bool, check_callable, check_int, check_real, fail, parse_partition_strategy
from .optimizers import OPTIMIZER_SPECS, OptimizerSpec
from .tables import FeatureSpec, QuantizationSpec, TableSpec


@dataclasses.dataclass(frozen=True, kw_only=True)
class EmbeddingSpec:
    """Tables, features, optimizer and run-wide options.

    Attributes:
      tables: the tables, names unique.
      features: the features, names unique, each naming a table of `tables`;
        every table is used by at least one feature. Both may be empty (an
        EmbeddingConfigSpec whose columns all use 'tpu_tensor_core' leaves
        the engine nothing to do).
      optimizer: the optimizer of every table without one of its own; None
        for an inference-only spec.
      partition_strategy: 'div' (contiguous row ranges per shard) or 'mod'
        (row r on shard r % num_shards). Numbers never depend on it.
      num_shards: how many shards each table is split into, >= 1.
      pipeline_execution_with_tensor_core: step N+1's lookup sees the tables
        before step N's update (one-step-stale lookups), as on a TPU.
      gradient_multiplier_fn: `step -> float`; every activation gradient is
        multiplied by it before the update.
      clipping_limit: stored, never applied (as in TensorFlow).
      profile_data_directory: where lookup statistics are written, or None.
    """

    tables: tuple[TableSpec, ...]
    features: tuple[FeatureSpec, ...]
    optimizer: OptimizerSpec | None = None
    partition_strategy: str = "div"
    num_shards: int = 1
    pipeline_execution_with_tensor_core: bool = False
    gradient_multiplier_fn: Callable[[int], float] | None = None
    clipping_limit: float | None = None
    profile_data_directory: str | None = None

    def __post_init__(self) -> None:
        owner = "EmbeddingSpec"
        object.__setattr__(self, "tables", tuple(self.tables))
        object.__setattr__(self, "features", tuple(self.features))
        for table in self.tables:
            if not isinstance(table, TableSpec):
                raise fail("tables", "a sequence of TableSpec", table, error=TypeError, owner=owner)
        for feature in self.features:
            if not isinstance(feature, FeatureSpec):
                raise fail("features", "a sequence of FeatureSpec", feature, error=TypeError, owner=owner)
        if self.optimizer is not None and not isinstance(self.optimizer, OptimizerSpec):
            raise fail("optimizer", "an OptimizerSpec or None", self.optimizer, error=TypeError, owner=owner)
        parse_partition_strategy(self.partition_strategy, owner=owner)
        check_int("num_shards", self.num_shards, minimum=1, owner=owner)
        check_bool("pipeline_execution_with_tensor_core", self.pipeline_execution_with_tensor_core, owner=owner)
        check_callable("gradient_multiplier_fn", self.gradient_multiplier_fn, owner=owner)
        if self.clipping_limit is not None:
            check_real("clipping_limit", self.clipping_limit, owner=owner)
        if self.profile_data_directory is not None and not isinstance(self.profile_data_directory, str):
            raise fail(
                "profile_data_directory", "a str or None", self.profile_data_directory, error=TypeError, owner=owner
            )
        self._check_names()

    def _check_names(self) -> None:
        tables: dict[str, TableSpec] = {}
        for spec_table in self.tables:
            if spec_table.name in tables:
                raise ValueError(
                    f"EmbeddingSpec: two tables are named {spec_table.name!r}; table names must be unique."
                )
            tables[spec_table.name] = spec_table
        seen = set()
        used = set()
        for feature in self.features:
            if feature.name in seen:
                raise ValueError(
                    f"EmbeddingSpec: two features are named {feature.name!r}; feature names must be unique."
                )
            seen.add(feature.name)
            table = tables.get(feature.table)
            if table is None:
                raise ValueError(
                    f"EmbeddingSpec: feature {feature.name!r} refers to table {feature.table!r}, "
                    f"which is not among the tables {sorted(tables)}."
                )
            if feature.num_buckets != table.vocabulary_size:
                raise ValueError(
                    f"EmbeddingSpec: feature {feature.name!r} produces ids in [0, {feature.num_buckets}) "
                    f"but table {table.name!r} has vocabulary_size={table.vocabulary_size}; they must be equal."
                )
            used.add(feature.table)
        unused = [t.name for t in self.tables if t.name not in used]
        if unused:
            raise ValueError(f"EmbeddingSpec: tables {unused} are not used by any feature.")
        if self.features and any(f.weight_key in seen for f in self.features if f.weight_key):
            clash = [f.weight_key for f in self.features if f.weight_key in seen]
            raise ValueError(f"EmbeddingSpec: weight keys {clash} are also feature names.")

    # Queries -----------------------------------------------------------------

    def table(self, name: str) -> TableSpec:
        """The table called `name` (KeyError naming the known tables otherwise)."""
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(f"No table named {name!r}; tables are {[t.name for t in self.tables]}.")

    def feature(self, name: str) -> FeatureSpec:
        """The feature called `name`."""
        for feature in self.features:
            if feature.name == name:
                return feature
        raise KeyError(f"No feature named {name!r}; features are {[f.name for f in self.features]}.")

    def features_of(self, table: str) -> tuple[FeatureSpec, ...]:
        """The features that look up `table`, in spec order."""
        return tuple(f for f in self.features if f.table == table)

    def optimizer_for(self, table: str) -> OptimizerSpec | None:
        """The table's own optimizer, else the spec's (None: inference only)."""
        own = self.table(table).optimizer
        return own if own is not None else self.optimizer

    # Serialisation -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A plain-dict form; callables (initializers, learning-rate functions) are kept as objects."""
        return {
            "tables": [_table_to_dict(t) for t in self.tables],
            "features": [dataclasses.asdict(f) for f in self.features],
            "optimizer": optimizer_to_dict(self.optimizer),
            "partition_strategy": self.partition_strategy,
            "num_shards": self.num_shards,
            "pipeline_execution_with_tensor_core": self.pipeline_execution_with_tensor_core,
            "gradient_multiplier_fn": self.gradient_multiplier_fn,
            "clipping_limit": self.clipping_limit,
            "profile_data_directory": self.profile_data_directory,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbeddingSpec:
        """Inverse of `to_dict`."""
        data = dict(data)
        tables = tuple(
            TableSpec(
                **{
                    **t,
                    "optimizer": optimizer_from_dict(t.get("optimizer")),
                    "quantization": None if t.get("quantization") is None else QuantizationSpec(**t["quantization"]),
                }
            )
            for t in data.pop("tables")
        )
        features = tuple(
            FeatureSpec(**{**f, "vocabulary": None if f.get("vocabulary") is None else tuple(f["vocabulary"])})
            for f in data.pop("features")
        )
        return cls(tables=tables, features=features, optimizer=optimizer_from_dict(data.pop("optimizer")), **data)

    def structure(self) -> dict[str, dict[str, Any]]:
        """What a checkpoint must agree on: per table its shape and slot names."""
        out = {}
        for table in self.tables:
            optimizer = self.optimizer_for(table.name)
            slots = sorted(optimizer.slot_initial_values()) if optimizer else []
            out[table.name] = {"vocabulary_size": table.vocabulary_size, "dim": table.dim, "slots": slots}
        return out

    def fingerprint(self) -> str:
        """A short hash of `structure()`; equal for specs whose checkpoints are interchangeable."""
        text = json.dumps(self.structure(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _table_to_dict(table: TableSpec) -> dict[str, Any]:
    return {
        "name": table.name,
        "vocabulary_size": table.vocabulary_size,
        "dim": table.dim,
        "initializer": table.initializer,
        "combiner": table.combiner,
        "optimizer": optimizer_to_dict(table.optimizer),
        "quantization": None if table.quantization is None else dataclasses.asdict(table.quantization),
    }


def optimizer_to_dict(optimizer: OptimizerSpec | None) -> dict[str, Any] | None:
    """`{'kind': ..., **hyper-parameters}`, or None."""
    if optimizer is None:
        return None
    fields = {f.name: getattr(optimizer, f.name) for f in dataclasses.fields(optimizer)}
    return {"kind": optimizer.kind, **fields}


def optimizer_from_dict(data: dict[str, Any] | None) -> OptimizerSpec | None:
    """Inverse of `optimizer_to_dict`."""
    if data is None:
        return None
    data = dict(data)
    kind = data.pop("kind")
    if kind not in OPTIMIZER_SPECS:
        raise fail("kind", f"one of {sorted(OPTIMIZER_SPECS)}", kind)
    return OPTIMIZER_SPECS[kind](**data)
