"""Random specs and global batches for the distributed tests, rebuilt identically in every process.

A case is a *recipe*: a JSON-able dict (drawn by `strategies.py`) that
`build_spec` and `global_steps` turn into the same spec and the same data
in the pytest process (which runs the one-process `Engine`) and in every
MPI rank (`worker.py`, which runs `DistributedEngine` on its slice). Learning
rate and gradient multiplier functions are named, so they cross processes
by name. No hypothesis here: the ranks import this module alone.
"""

from __future__ import annotations

import numpy as np

from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, QuantizationSpec, TableSpec
from tpu_embedding_shim.spec.embedding import optimizer_from_dict


def schedule(step):
    """A learning rate that falls with the step."""
    return 0.3 / (1 + step)


def multiplier(step):
    """A gradient multiplier that changes with the step."""
    return 1.5 - 0.25 * step


def optimizer(recipe: dict | None):
    """The OptimizerSpec of an optimizer recipe {'kind': ..., **fields} ('schedule' names `schedule`)."""
    if recipe is None:
        return None
    fields = dict(recipe)
    if fields.get("learning_rate") == "schedule":
        fields["learning_rate"] = schedule
    return optimizer_from_dict(fields)


def quantization(num_buckets: int, lower: float, upper: float) -> QuantizationSpec:
    return QuantizationSpec(num_buckets=num_buckets, lower=lower, upper=upper)


def build_spec(recipe: dict, world_size: int) -> EmbeddingSpec:
    """The recipe's EmbeddingSpec for `world_size` ranks (num_shards = world_size * shards_per_rank)."""
    tables = tuple(
        TableSpec(
            name=t["name"],
            vocabulary_size=t["vocab"],
            dim=t["dim"],
            combiner=t["combiner"],
            optimizer=optimizer(t.get("optimizer")),
            quantization=None if t.get("quantization") is None else quantization(*t["quantization"]),
        )
        for t in recipe["tables"]
    )
    vocab = {t["name"]: t["vocab"] for t in recipe["tables"]}
    features = tuple(
        FeatureSpec(
            name=f["name"],
            table=f["table"],
            num_buckets=vocab[f["table"]],
            weight_key=f"{f['name']}_w" if f["weighted"] else None,
            max_sequence_length=f["sequence_length"],
            safe_lookup=f["safe"],
        )
        for f in recipe["features"]
    )
    return EmbeddingSpec(
        tables=tables,
        features=features,
        optimizer=optimizer(recipe["optimizer"]),
        partition_strategy=recipe["strategy"],
        num_shards=world_size * recipe["shards_per_rank"],
        pipeline_execution_with_tensor_core=recipe["pipelining"],
        gradient_multiplier_fn=multiplier if recipe["multiplier"] else None,
    )


def global_steps(recipe: dict, spec: EmbeddingSpec) -> list[tuple[dict, dict]]:
    """Per step, (features, gradients) of the global batch: ragged id lists (repeats, empty examples),
    weights (some <= 0) under each weighted feature's weight key, float32 activation gradients (None for
    the features the recipe leaves without one)."""
    rng = np.random.default_rng(recipe["data_seed"])
    batch = sum(recipe["batch_sizes"])
    steps = []
    for _ in range(recipe["steps"]):
        features, gradients = {}, {}
        for f in spec.features:
            table = spec.table(f.table)
            ids = [
                rng.integers(0, table.vocabulary_size, rng.integers(0, recipe["max_ids"] + 1)).tolist()
                for _ in range(batch)
            ]
            features[f.name] = ids
            if f.weight_key:
                features[f.weight_key] = [rng.uniform(-0.5, 2.0, len(row)).astype(np.float32).tolist() for row in ids]
            shape = (batch, f.max_sequence_length, table.dim) if f.is_sequence else (batch, table.dim)
            grad = rng.standard_normal(shape).astype(np.float32)
            gradients[f.name] = None if f.name in recipe["no_gradient"] else grad
        steps.append((features, gradients))
    return steps


def offsets(recipe: dict) -> list[int]:
    """Where each rank's slice of the global batch starts (and, last, the global batch size)."""
    return np.concatenate([[0], np.cumsum(recipe["batch_sizes"])]).astype(int).tolist()


def rank_slice(step: tuple[dict, dict], lo: int, hi: int) -> tuple[dict, dict]:
    """Examples [lo, hi) of a global step."""
    features, gradients = step
    return (
        {name: rows[lo:hi] for name, rows in features.items()},
        {name: None if grad is None else grad[lo:hi] for name, grad in gradients.items()},
    )


FAULTS = ("bad_id", "nan_gradient", "bad_shape", "stale_result")


def attempt(engine, fault: dict, step: tuple[dict, dict], lo: int, hi: int, recipe: dict, spec) -> str:
    """Makes a call that must fail: `fault['kind']` in the first example of rank `fault['rank']` (global
    example `offsets[rank]`, changed only where this process holds it: [lo, hi)). Returns the error as
    "TypeName: message"."""
    bad = offsets(recipe)[fault["rank"]] - lo
    mine = 0 <= bad < hi - lo
    features, gradients = rank_slice(step, lo, hi)
    trained = [f for f in spec.features if gradients[f.name] is not None]
    try:
        if fault["kind"] == "bad_id":
            first = spec.features[0]
            if mine:
                features[first.name] = [list(row) for row in features[first.name]]
                features[first.name][bad] = [spec.table(first.table).vocabulary_size]  # one past the last row
            engine.forward(features)
        elif fault["kind"] in ("nan_gradient", "bad_shape"):
            result = engine.forward(features)
            name = trained[0].name
            if mine and fault["kind"] == "nan_gradient":
                gradients[name] = gradients[name].copy()
                gradients[name][bad] = np.nan
            elif mine:
                gradients[name] = gradients[name][..., :-1]  # one column short
            engine.apply_gradients(result, gradients)
        else:  # every rank applies the same lookup twice
            result = engine.forward(features)
            engine.apply_gradients(result, gradients)
            engine.apply_gradients(result, gradients)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "no error"


def run(engine, recipe: dict, spec: EmbeddingSpec, rank: int | None = None, gather=None) -> tuple[dict, list]:
    """Runs the recipe's steps (and faults) on `engine`: the global batch (`rank` None) or rank `rank`'s
    slice, with `gather(arrays) -> arrays of the global batch` joining the ranks' activations.

    Returns (record, errors): activations of the global batch (and of an inference lookup after the steps
    listed in `recipe['inference']`), the full tables and slots after each step (without pipelining:
    reading a table flushes the deferred update) and at the end, the global step; and each fault's error
    text.
    """
    lo, hi = (0, offsets(recipe)[-1]) if rank is None else offsets(recipe)[rank : rank + 2]
    gather = gather or (lambda arrays: arrays)
    record, errors = {}, []
    for i, step in enumerate(global_steps(recipe, spec)):
        for fault in recipe.get("faults", []):
            if fault["step"] == i:
                errors.append(attempt(engine, fault, step, lo, hi, recipe, spec))
        features, gradients = rank_slice(step, lo, hi)
        result = engine.forward(features)
        for name, value in gather(result.activations).items():
            record[f"step{i}/activation/{name}"] = value
        for name, value in gather(result.sequence_lengths).items():
            record[f"step{i}/length/{name}"] = value
        engine.apply_gradients(result, gradients)
        if i in recipe.get("inference", []):  # with pipelining, an inference lookup writes the deferred update first
            for name, value in gather(engine.forward(features, training=False).activations).items():
                record[f"step{i}/inference/{name}"] = value
        if not spec.pipeline_execution_with_tensor_core:
            record.update(flatten_state(f"step{i}", engine.state()))
    record.update(flatten_state("final", engine.state()))
    record["global_step"] = np.array(engine.global_step)
    return record, errors


def flatten_state(prefix: str, state: dict) -> dict[str, np.ndarray]:
    return {f"{prefix}/{table}/{key}": value for table, arrays in state.items() for key, value in arrays.items()}
