"""The part of a TorchRec `model.py` that is the same for every converted model: load, build, shard, look up.

`torchrec.code()` writes the model's configs and appends this module's text
from the marker line on. The names above that line stand for what the
generated part defines (the configs of the converted model); they are empty
here.
"""

import os
from typing import Any

import numpy as np
import torch
from torch.distributed.optim import _apply_optimizer_in_backward
from torchrec import EmbeddingBagCollection, EmbeddingCollection, KeyedJaggedTensor

TABLES: list[Any] = []
SEQUENCE_TABLES: list[Any] = []
IS_WEIGHTED = False
DATA_PARALLEL: list[str] = []
FUSED_OPTIMIZERS: dict[str, tuple[Any, dict[str, float]]] = {}
FEATURES: dict[str, dict[str, Any]] = {}
VOCABULARIES: dict[str, dict[str, Any]] = {}

# model.py's text from here on.

# What follows is the same for every converted model. ------------------------------------------------------


def load_weights(path=None):
    """The tables and fused optimizer states: weights.npz beside this file (or `path`)."""
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights.npz")
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


class Embeddings(torch.nn.Module):
    """`ebc` (the pooled tables) and `ec` (the tables of sequence features); either is None when it has no table."""

    def __init__(self, device=None):
        super().__init__()
        self.ebc = EmbeddingBagCollection(tables=TABLES, is_weighted=IS_WEIGHTED, device=device) if TABLES else None
        self.ec = EmbeddingCollection(tables=SEQUENCE_TABLES, device=device) if SEQUENCE_TABLES else None

    def forward(self, pooled, sequence):
        """(the KeyedTensor of `pooled` or None, the {feature: JaggedTensor} of `sequence` or None)."""
        return (
            self.ebc(pooled) if pooled is not None else None,
            self.ec(sequence) if sequence is not None else None,
        )


def build(weights=None, device=None):
    """The Embeddings with TF's tables loaded and the fused optimizers attached (they train once sharded)."""
    module = Embeddings(device)
    load_state(module, load_weights() if weights is None else weights)
    for table, (optimizer, kwargs) in FUSED_OPTIMIZERS.items():
        _apply_optimizer_in_backward(optimizer, [_parameter(module, table)], dict(kwargs))
    return module


def _parameter(module, table):
    if module.ebc is not None and table in module.ebc.embedding_bags:
        return module.ebc.embedding_bags[table].weight
    return module.ec.embeddings[table].weight


def shard(module, weights=None, device=None, plan=None):
    """`module` (from build()) as a DistributedModelParallel over the default process group, with TF's tables and
    the fused optimizers' state (Adagrad's accumulators) written shard by shard.

    The default plan puts table i whole on rank i % world_size with FBGEMM's fused kernel (table_wise);
    tensor-core tables are replicated (data_parallel).
    """
    import torch.distributed as dist
    from torchrec.distributed.embedding import EmbeddingCollectionSharder
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, data_parallel, table_wise
    from torchrec.distributed.types import ShardingPlan

    device = device or torch.device("cpu")
    sharders = {"ebc": EmbeddingBagCollectionSharder(), "ec": EmbeddingCollectionSharder()}
    if plan is None:
        world = dist.get_world_size()
        plans = {}
        for name, configs in (("ebc", TABLES), ("ec", SEQUENCE_TABLES)):
            if not configs:
                continue
            per_table = {}
            for i, config in enumerate(configs):
                fused = table_wise(rank=i % world, compute_kernel="fused")
                per_table[config.name] = data_parallel() if config.name in DATA_PARALLEL else fused
            plans[name] = construct_module_sharding_plan(
                getattr(module, name),
                per_param_sharding=per_table,
                local_size=int(os.environ.get("LOCAL_WORLD_SIZE", world)),
                world_size=world,
                device_type=device.type,
                sharder=sharders[name],
            )
        plan = ShardingPlan(plans)
    model = DistributedModelParallel(module, device=device, plan=plan, sharders=list(sharders.values()))
    load_state(model, load_weights() if weights is None else weights)
    return model


def load_state(model, weights):
    """Writes the tables and the fused optimizers' state of `weights` into `model` (built or sharded)."""
    with torch.no_grad():
        for key, value in model.state_dict().items():
            _write(value, weights, key.split(".", 1)[1])
        optimizer = getattr(model, "fused_optimizer", None)
        if optimizer is not None:
            for key, states in optimizer.state_dict()["state"].items():
                for name, value in states.items():
                    _write(value, weights, key.split(".", 1)[1] + "/" + name)


def _write(target, weights, key):
    if key not in weights:
        raise KeyError(f"The weights have no {key!r} (they have {sorted(weights)}).")
    full = torch.from_numpy(np.asarray(weights[key]))
    if not hasattr(target, "local_shards"):
        target.copy_(full)
        return
    for shard in target.local_shards():
        (row, column), (rows, columns) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
        shard.tensor.copy_(full[row : row + rows, column : column + columns])


def set_learning_rates(model, rates):
    """Sets the fused learning rate of each table in `rates` (table -> number) for the next backward.

    FBGEMM runs tables with equal settings in one kernel with one rate: giving the tables of one kernel different
    rates (or a rate to only some of them) is an error.
    """
    for _, optimizer in model.fused_optimizer.optimizers:
        for group in optimizer.param_groups:
            tables = [key.split(".")[-2] for key, p in optimizer.params.items() if any(p is q for q in group["params"])]
            given = [table for table in tables if table in rates]
            if not given:
                continue
            if len(given) < len(tables) or len({rates[table] for table in given}) > 1:
                raise ValueError(f"Tables {tables} share one fused kernel and one learning rate; received {rates}.")
            group["lr"] = float(rates[given[0]])
    model.fused_optimizer.zero_grad()  # hands each kernel its rate


def coefficients(lengths, weights, combiner, safe=True):
    """(keep, c): the entries TF keeps and their coefficients, so that SUM pooling with weights c is TF's combiner.

    Over the kept entries of an example (w: the weights, else 1): sum c = w; mean c = w / sum(w);
    sqrtn c = w / sqrt(sum(w^2)); c = 0 when the sum is 0. TF's safe rule drops entries with w <= 0 for mean and
    sqrtn (not for sum).
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    example = np.repeat(np.arange(lengths.size), lengths)
    w = np.ones(example.size) if weights is None else np.asarray(weights, dtype=np.float32).astype(np.float64)
    keep = w > 0 if safe and combiner != "sum" else np.ones(w.size, dtype=bool)
    if combiner == "sum":
        return keep, w.astype(np.float32)
    kept = np.where(keep, w, 0.0)
    if combiner == "mean":
        total = np.bincount(example, weights=kept, minlength=lengths.size)
    else:
        total = np.sqrt(np.bincount(example, weights=kept * kept, minlength=lengths.size))
    scale = np.divide(1.0, total, out=np.zeros(lengths.size), where=total != 0)
    return keep, (scale[example] * w).astype(np.float32)


def from_dense(feature, dense):
    """(ids, lengths) of a dense int array [B, n]: negative entries are padding, and 0 too where TPUEstimator read
    it so (dense_zero_is_padding)."""
    dense = np.asarray(dense)
    dense = dense.reshape(dense.shape[0], -1)
    padding = dense < 0
    if FEATURES[feature]["dense_zero_is_padding"]:
        padding |= dense == 0
    return dense[~padding].astype(np.int64), (~padding).sum(axis=1)


def token_ids(feature, tokens, hash_bucket=None):
    """The ids of a vocabulary feature's tokens, as TF's vocabulary table gives them: the token's index; an unknown
    token gets len(vocabulary) + hash_bucket(token, num_oov_buckets) with OOV buckets (pass TF's FarmHash
    Fingerprint64 bucket: tf.strings.to_hash_bucket_fast, tpu_embedding_shim.engine.farmhash.hash_bucket), else
    default_value (-1: lookup() drops it)."""
    vocabulary = VOCABULARIES[feature]
    index = {token: i for i, token in enumerate(vocabulary["tokens"])}
    ids = []
    for token in tokens:
        key = token.decode("utf-8", "surrogateescape") if isinstance(token, bytes) else token
        key = str(key) if isinstance(key, str) else int(key)
        if key in index:
            ids.append(index[key])
        elif vocabulary["num_oov_buckets"]:
            if hash_bucket is None:
                raise ValueError(f"Feature {feature!r}: token {token!r} is unknown; pass hash_bucket= (TF's hash).")
            ids.append(len(index) + int(hash_bucket(token, vocabulary["num_oov_buckets"])))
        else:
            ids.append(-1 if vocabulary["default_value"] is None else vocabulary["default_value"])
    return np.asarray(ids, dtype=np.int64)


class _ScaleGradient(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient by `factor` (TF's gradient multiplier)."""

    @staticmethod
    def forward(ctx, values, factor):
        ctx.factor = factor
        return values.view_as(values)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


def lookup(model, batch, gradient_multiplier=None):
    """TF's activations of one batch: {feature: [B, dim] (pooled) or [B, L, dim] (sequence)}.

    `batch[feature]` is (ids, lengths) or (ids, lengths, weights): the ids of B examples one after the other
    (ints, [N]), lengths [B], weights [N]. Negative ids are dropped (an identity feature with a default_value
    maps them, and ids >= num_buckets, to it); sequences are truncated to max_sequence_length before the lookup
    and padded after; pooled features get coefficients() (TF's combiner and safe rule). `gradient_multiplier`
    scales the gradient that flows back into the tables.
    """
    pooled, sequence, sizes = {}, {}, set()
    for name, spec in FEATURES.items():
        if name not in batch:
            raise KeyError(f"The batch has no feature {name!r}; it needs {sorted(FEATURES)}.")
        ids, lengths, weights = _clean(name, spec, *batch[name])
        sizes.add(lengths.size)
        if spec["max_sequence_length"]:
            position = np.arange(ids.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            ids, lengths, _ = _kept(ids, lengths, position < spec["max_sequence_length"], None)
            sequence[name] = (ids, lengths, None)
            continue
        keep, coefficient = coefficients(lengths, weights, spec["combiner"], spec["safe"])
        ids, lengths, coefficient = _kept(ids, lengths, keep, coefficient)
        if spec["collection"] == "ec":
            sequence[name] = (ids, lengths, coefficient)
        else:
            pooled[name] = (ids, lengths, coefficient if IS_WEIGHTED else None)
    if len(sizes) > 1:
        raise ValueError(f"Every feature of a batch needs the same number of examples; received {sorted(sizes)}.")
    pooled_out, sequence_out = model(_jagged(TABLES, pooled, IS_WEIGHTED), _jagged(SEQUENCE_TABLES, sequence, False))
    out = {}
    if pooled_out is not None:
        for name, values in pooled_out.to_dict().items():
            out[name] = values[:, : FEATURES[name]["dim"]]
    for name, (ids, lengths, coefficient) in sequence.items():
        spec = FEATURES[name]
        rows = sequence_out[name].values()[:, : spec["dim"]]
        example = torch.from_numpy(np.repeat(np.arange(lengths.size), lengths))
        if spec["max_sequence_length"]:
            position = torch.arange(ids.size) - torch.repeat_interleave(
                torch.from_numpy(np.cumsum(lengths) - lengths), torch.from_numpy(lengths)
            )
            shape = (lengths.size, spec["max_sequence_length"], spec["dim"])
            out[name] = torch.zeros(shape, dtype=rows.dtype).index_put((example, position), rows)
        else:
            pooled_rows = rows * torch.from_numpy(coefficient)[:, None]
            out[name] = torch.zeros(lengths.size, spec["dim"], dtype=rows.dtype).index_add(0, example, pooled_rows)
    if gradient_multiplier is not None:
        out = {name: _ScaleGradient.apply(values, float(gradient_multiplier)) for name, values in out.items()}
    return out


def _clean(name, spec, ids, lengths, weights=None):
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if lengths.sum() != ids.size or (lengths < 0).any():
        raise ValueError(f"Feature {name!r}: lengths {lengths.tolist()} do not split {ids.size} ids.")
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float32).reshape(-1)
        if weights.size != ids.size:
            raise ValueError(f"Feature {name!r}: {weights.size} weights for {ids.size} ids.")
    limit = spec["num_buckets"]
    if spec["out_of_range_id"] is not None:
        ids = np.where((ids < 0) | (ids >= limit), spec["out_of_range_id"], ids)
    elif (ids >= limit).any():
        raise ValueError(f"Feature {name!r}: id {int(ids.max())} is out of range; ids must be in [0, {limit}).")
    return _kept(ids, lengths, ids >= 0, weights)


def _kept(ids, lengths, keep, values):
    example = np.repeat(np.arange(lengths.size), lengths)
    kept_lengths = np.bincount(example[keep], minlength=lengths.size).astype(np.int64)
    return ids[keep], kept_lengths, None if values is None else values[keep]


def _jagged(configs, inputs, weighted):
    """One KeyedJaggedTensor of `inputs` in the collection's feature order (None when it has no table)."""
    if not configs:
        return None
    keys = [name for config in configs for name in config.feature_names]
    values = torch.from_numpy(np.concatenate([inputs[k][0] for k in keys]))
    lengths = torch.from_numpy(np.concatenate([inputs[k][1] for k in keys]))
    weights = torch.from_numpy(np.concatenate([inputs[k][2] for k in keys])) if weighted else None
    return KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, weights=weights)
