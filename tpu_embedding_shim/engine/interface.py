"""What every engine offers the layers above: `Engine` in one process, `DistributedEngine` across ranks.

`EmbeddingEngine` is the interface both implement (a `typing.Protocol`:
callers annotate with it and never ask which one they hold). The words both
use to describe themselves and the one warning both give are here too, so
that one process and N ranks say the same things the same way.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..spec import EmbeddingSpec
from .kernels import Kernels
from .statistics import LookupStatistics

__all__ = ["EmbeddingEngine", "describe_spec", "warn_clipping_limit"]


@runtime_checkable
class EmbeddingEngine(Protocol):
    """The tables and slots of an `EmbeddingSpec` and the steps that use them.

    `forward` looks up a batch (and, with pipelining, applies the pending
    update); `apply_gradients` queues or applies the update of that lookup;
    `flush` applies anything queued. `table`, `slots` and `state` are full
    arrays in id order; `load_state` replaces them all, checked first.
    """

    spec: EmbeddingSpec
    global_step: int
    check_numerics: bool
    statistics: LookupStatistics | None

    @property
    def kernels(self) -> Kernels: ...

    def describe(self) -> list[str]: ...

    def forward(
        self, features: Mapping[str, Any], weights: Mapping | None = None, *, training=True, same_batch_size=True
    ) -> Any: ...

    def apply_gradients(self, result: Any, gradients: Mapping[str, Any]) -> None: ...

    def flush(self) -> None: ...

    def table(self, name: str) -> np.ndarray: ...

    def slots(self, name: str) -> dict[str, np.ndarray]: ...

    def state(self) -> dict[str, dict[str, np.ndarray]]: ...

    def load_state(self, state: Mapping[str, Mapping[str, np.ndarray]], *, step: int | None = None) -> None: ...


def describe_spec(spec: EmbeddingSpec, engine: str, placements: Mapping[str, str], sharding: str = "") -> list[str]:
    """An engine's description: which engine, the spec's size and sharding (and `sharding`, what the engine
    adds to it), one line per table (with where its rows are, `placements`), then the TPU behaviours it
    emulates. The engine adds its own lines (kernels, files, pooling) after these."""
    lines = [
        f"{engine}: {len(spec.tables)} table(s), {len(spec.features)} feature(s), "
        f"{spec.num_shards} shard(s) per table by '{spec.partition_strategy}'{sharding}."
    ]
    for table in spec.tables:
        optimizer = spec.optimizer_for(table.name)
        kind = optimizer.kind if optimizer else "none (inference only)"
        users = ", ".join(f.name for f in spec.features_of(table.name))
        lines.append(
            f"  table {table.name}: {table.vocabulary_size} x {table.dim}, combiner {table.combiner}, "
            f"optimizer {kind}, {placements[table.name]}, features {users}."
        )
    for table in spec.tables:
        if table.quantization is not None:
            q = table.quantization
            lines.append(
                f"  emulating simulated quantization of table {table.name}: looked-up values clipped to "
                f"[{q.lower}, {q.upper}] and rounded to {q.num_buckets} levels before the combiner "
                "(forward only; the table stays float32)."
            )
    if spec.pipeline_execution_with_tensor_core:
        lines.append(
            "  emulating pipeline_execution_with_tensor_core: each lookup sees the tables "
            "before the previous step's update (one step stale)."
        )
    if spec.gradient_multiplier_fn is not None:
        lines.append(
            "  emulating experimental_gradient_multiplier_fn: activation gradients are scaled by it at every step."
        )
    if spec.clipping_limit is not None:
        lines.append(f"  clipping_limit={spec.clipping_limit} is ignored, as in TensorFlow.")
    return lines


def warn_clipping_limit(spec: EmbeddingSpec) -> None:
    """Says that clipping_limit has no effect. Python's warning filters decide how often: by default once
    per line that builds an engine, every time under `warnings.simplefilter("always")`."""
    if spec.clipping_limit is not None:
        warnings.warn(
            f"clipping_limit={spec.clipping_limit} has no effect: TensorFlow stores it and never applies "
            "it, on a TPU too. To clip gradients use the optimizer's clip_gradient_min / clip_gradient_max "
            "(v2: clipvalue).",
            UserWarning,
            stacklevel=3,
        )
