"""Worker of `python -m benchmarks programs`: a program's model in TorchRec, in the TorchRec venv.

The tables are an `EmbeddingBagCollection` sharded by DistributedModelParallel in a one-process gloo group,
table-wise with FBGEMM's fused kernel and fused EXACT_ADAGRAD (TorchRec's production path on a CPU: the update is
applied inside the backward, row by row; an unsharded EBC with a torch optimizer would update every row of
every table each step); the MLP is torch's, with the program's optimizer. Batches are built as
KeyedJaggedTensors before the clock starts (TF's side gets tensors from tf.data too). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from .programs import PROGRAMS, Program, batches, quick, rate


class Model(torch.nn.Module):
    """The EBC's pooled activations, in the program's order, then the dense features, through the MLP."""

    def __init__(self, ebc, widths: list[int]):
        super().__init__()
        self.ebc = ebc
        layers: list[torch.nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        self.mlp = torch.nn.Sequential(*layers[:-1])  # no ReLU after the logits

    def forward(self, kjt, dense):
        x = self.ebc(kjt).values()
        if dense is not None:
            x = torch.cat([x, dense], 1)
        return self.mlp(x).squeeze(-1)


def tables(program: Program):
    """(EmbeddingBagConfigs, keys in batch order): the migration program's shared item / history table pools by
    MEAN (an item is one id, so its mean is its row; a history of full length is averaged as the program does)."""
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType

    if program.kind == "migration":
        v, d = program.vocab[0], program.dim
        return [
            EmbeddingBagConfig(name="user", embedding_dim=d, num_embeddings=v, feature_names=["user"]),
            EmbeddingBagConfig(
                name="item_history",
                embedding_dim=d,
                num_embeddings=v,
                feature_names=["item", "history"],
                pooling=PoolingType.MEAN,
            ),
        ], ["user", "item", "history"]
    keys = [f"c{i}" for i in range(len(program.vocab))]
    return [
        EmbeddingBagConfig(name=f"t{i}", embedding_dim=program.dim, num_embeddings=v, feature_names=[keys[i]])
        for i, v in enumerate(program.vocab)
    ], keys


def build(program: Program):
    """(the DistributedModelParallel, the dense optimizer)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, table_wise
    from torchrec.distributed.types import ShardingPlan
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    configs, keys = tables(program)
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("cpu"))
    pooled = program.dim * len(keys)
    model = Model(ebc, [pooled + program.dense_features, *program.hidden, 1])
    table_lr = 0.3 if program.kind == "migration" else program.learning_rate
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType.EXACT_ADAGRAD, "learning_rate": table_lr, "eps": 1e-8}
    )
    plan = construct_module_sharding_plan(
        ebc,
        per_param_sharding={c.name: table_wise(rank=0, compute_kernel="fused") for c in configs},
        local_size=1,
        world_size=1,
        device_type="cpu",
        sharder=sharder,
    )
    dmp = DistributedModelParallel(
        model, device=torch.device("cpu"), plan=ShardingPlan({"ebc": plan}), sharders=[sharder]
    )
    dense = [p for name, p in dmp.named_parameters() if "mlp" in name]
    if program.kind == "migration":
        return dmp, torch.optim.SGD(dense, lr=0.5)
    return dmp, torch.optim.Adagrad(dense, lr=program.learning_rate)


def as_torch(program: Program, features, labels):
    """The numpy batches as (KeyedJaggedTensor, dense features or None, labels) per step."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    _, keys = tables(program)
    out = []
    for step in range(labels.shape[0]):
        values = [features[k][step].reshape(-1) for k in keys]
        lengths = [np.full(program.batch, features[k].shape[-1], np.int32) for k in keys]
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=keys,
            values=torch.from_numpy(np.concatenate(values)),
            lengths=torch.from_numpy(np.concatenate(lengths)),
        )
        dense = torch.from_numpy(features["dense"][step]) if "dense" in features else None
        out.append((kjt, dense, torch.from_numpy(labels[step])))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=("torchrec",), default="torchrec")
    parser.add_argument("--program", choices=tuple(PROGRAMS), required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    program = quick(PROGRAMS[args.program]) if args.quick else PROGRAMS[args.program]
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    model, optimizer = build(program)
    data = as_torch(program, *batches(program, count=8))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    stamps = []
    for step in range(program.warmup + program.steps + 2):
        stamps.append(time.perf_counter())
        kjt, dense, y = data[step % len(data)]
        loss = loss_fn(model(kjt, dense), y)
        optimizer.zero_grad()
        loss.backward()  # the tables' fused Adagrad runs here
        optimizer.step()
    dist.destroy_process_group()
    import fbgemm_gpu
    import torchrec

    versions = {
        "torch": torch.__version__,
        "torchrec": torchrec.__version__,
        "fbgemm_gpu": fbgemm_gpu.__version__,
        "torch threads": torch.get_num_threads(),
    }
    print(json.dumps({"examples_per_s": rate(stamps, program), "loss": float(loss.detach()), "versions": versions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
