"""The implementations a benchmark runs side by side, behind one small interface.

Each implementation is built from the same initial tables and does, per
`step(batch)`: pooled (or sequence) lookup, backward from the given
activation gradients, duplicate ids summed, one optimizer update per touched
row. `forward(batch)` is the lookup alone; `rows(ids)` reads rows back for
the agreement check.

- `EngineImpl`: the project's `Engine`, through its public API (spec,
  forward, apply_gradients); `kernels='auto'` (numba when installed) or
  'numpy' (the reference kernels: the specification, used as the truth).
- `TorchImpl`: torch.nn.EmbeddingBag(sparse=True) + torch.optim.Adagrad /
  SGD / SparseAdam (nn.Embedding for sequence features); non-lazy Adam is
  a dense EmbeddingBag + torch.optim.Adam. torch has no optimizer that does
  the spec's FTRL, momentum, RMSProp, proximal Adagrad or Adagrad with
  momentum on the touched rows only: `UnsupportedError`, with the reason.
- `FbgemmImpl`: FBGEMM's table-batched embedding (TBE) on the CPU, fused
  EXACT_SGD / EXACT_ADAGRAD (no exact match for the other optimizers).
- `NumpyImpl`: plain numpy (fancy indexing, reduceat, unique, add.at), every
  optimizer.

Sharding (`Workload.num_shards`) is the engine's storage only: the numbers
never change, so the peers ignore it.
"""

from __future__ import annotations

import numpy as np

from .workload import (
    ADAGRAD_INITIAL,
    ADAGRAD_MOMENTUM_EPS,
    ADAM_EPS,
    BETA1,
    BETA2,
    L1,
    L2,
    LR,
    MOMENTUM,
    RMSPROP_EPS,
    RMSPROP_LR,
    RMSPROP_MOMENTUM,
    RMSPROP_RHO,
    Batch,
    Workload,
    engine_spec,
    optimizer_spec,
)

__all__ = ["EngineImpl", "TorchImpl", "FbgemmImpl", "NumpyImpl", "PEERS", "missing_reason"]


class UnsupportedError(Exception):
    """This implementation can't run this workload: the report says why, and the run goes on."""


class _RaggedInput:
    """A RaggedTensor-like input (`values`, `row_splits`): the engine's public ragged form."""

    def __init__(self, values, row_splits):
        self.values, self.row_splits = values, row_splits


class EngineImpl:
    def __init__(self, w: Workload, tables: list[np.ndarray], kernels: str = "auto", table_files=None):
        import dataclasses

        from tpu_embedding_shim.engine.engine import Engine

        self.name = "engine" if kernels != "numpy" else "engine (numpy reference)"
        spec = engine_spec(w)
        # The initial values come in through the public initializer hook: init(shape, dtype) -> array.
        spec = dataclasses.replace(
            spec,
            tables=tuple(dataclasses.replace(t, initializer=_Fixed(table)) for t, table in zip(spec.tables, tables)),
        )
        self.w = w
        self.engine = Engine(spec, seed=0, kernels=kernels, table_files=table_files)
        self.kernels = [line.strip() for line in self.engine.describe() if "kernels:" in line]

    def _features(self, step: list[Batch]):
        features, weights = {}, {}
        for t, b in enumerate(step):
            features[f"f{t}"] = _RaggedInput(b.values, b.offsets)
            if b.weights is not None:
                weights[f"f{t}"] = _RaggedInput(b.weights, b.offsets)
        return features, (weights or None)

    def forward(self, step: list[Batch]):
        features, weights = self._features(step)
        result = self.engine.forward(features, weights, training=False)
        return [result.activations[f"f{t}"] for t in range(len(step))]

    def step(self, step: list[Batch]):
        features, weights = self._features(step)
        result = self.engine.forward(features, weights)
        self.engine.apply_gradients(result, {f"f{t}": b.grad for t, b in enumerate(step)})
        return [result.activations[f"f{t}"] for t in range(len(step))]

    def rows(self, ids: list[np.ndarray]) -> list[np.ndarray]:
        return [self.engine.table(f"t{t}")[i] for t, i in enumerate(ids)]


class _Fixed:
    """An initializer that returns a copy of a given table."""

    def __init__(self, table):
        self.table = table

    def __call__(self, shape, dtype=np.float32):
        assert tuple(shape) == self.table.shape
        return self.table.copy()


def _coefficients(b: Batch, combiner: str) -> np.ndarray:
    """Per-entry coefficient (float32) for the combiner and weights, numpy side."""
    lengths = np.diff(b.offsets)
    w = b.weights if b.weights is not None else np.ones(b.values.shape[0], np.float32)
    if combiner == "sum":
        return w.astype(np.float32)
    row = np.repeat(np.arange(lengths.shape[0]), lengths)
    if combiner == "mean":
        den = np.bincount(row, weights=w, minlength=lengths.shape[0])
    else:
        den = np.sqrt(np.bincount(row, weights=w.astype(np.float64) ** 2, minlength=lengths.shape[0]))
    scale = np.divide(1.0, den, out=np.zeros_like(den), where=den != 0)
    return (scale[row] * w).astype(np.float32)


class NumpyImpl:
    """Plain numpy: what a first implementation looks like."""

    name = "numpy"

    def __init__(self, w: Workload, tables: list[np.ndarray]):
        self.w = w
        self.t = [t.copy() for t in tables]
        # The slots TensorFlow names, at their initial values (from the spec: names and starting values only).
        initial = optimizer_spec(w).slot_initial_values()
        self.slots: list[dict[str, np.ndarray]] = [
            {name: np.full_like(t, value) for name, value in initial.items()} for t in self.t
        ]
        self.steps = 0

    def _lookup(self, table, b: Batch):
        rows = table[b.values]
        if self.w.sequence:
            out = np.zeros((self.w.batch, self.w.sequence, self.w.dim), np.float32)
            out[np.repeat(np.arange(self.w.batch), np.diff(b.offsets)), b.positions] = rows
            return out
        if not (self.w.combiner == "sum" and b.weights is None):
            rows = rows * _coefficients(b, self.w.combiner)[:, None]
        out = np.zeros((self.w.batch, self.w.dim), np.float32)
        nonempty = np.diff(b.offsets) > 0
        out[nonempty] = np.add.reduceat(rows, b.offsets[:-1][nonempty], axis=0)
        return out

    def forward(self, step):
        return [self._lookup(t, b) for t, b in zip(self.t, step)]

    def step(self, step):
        outs = self.forward(step)
        self.steps += 1
        for table, slots, b in zip(self.t, self.slots, step):
            row = np.repeat(np.arange(self.w.batch), np.diff(b.offsets))
            if self.w.sequence:
                entry = b.grad[row, b.positions]
            else:
                entry = b.grad[row]
                if not (self.w.combiner == "sum" and b.weights is None):
                    entry = entry * _coefficients(b, self.w.combiner)[:, None]
            unique, inverse = np.unique(b.values, return_inverse=True)
            g = np.zeros((unique.shape[0], self.w.dim), np.float32)
            np.add.at(g, inverse, entry)
            if self.w.optimizer == "adam-nonlazy":
                # Every row moves every step: the whole table, a zero gradient for the rows not in the step.
                dense = np.zeros_like(table)
                dense[unique] = g
                table[:], new_slots = self._update(table, slots, dense)
                for name, values in new_slots.items():
                    slots[name][:] = values
                continue
            new_rows, new_slots = self._update(table[unique], {k: v[unique] for k, v in slots.items()}, g)
            table[unique] = new_rows
            for name, values in new_slots.items():
                slots[name][unique] = values
        return outs

    def _update(self, w, s, g):
        """New rows and slots for rows `w`, slots `s` and summed gradients `g` (float32 throughout)."""
        f32 = np.float32
        lr = f32(LR)
        opt = self.w.optimizer
        if opt == "sgd":
            return w - lr * g, {}
        if opt == "adagrad":
            a = s["accumulators"] + g * g
            return w - lr * g / np.sqrt(a), {"accumulators": a}
        if opt in ("adam", "adam-nonlazy"):
            m = f32(BETA1) * s["momenta"] + f32(1 - BETA1) * g
            v = f32(BETA2) * s["velocities"] + f32(1 - BETA2) * g * g
            step_size = LR * np.sqrt(1 - BETA2**self.steps) / (1 - BETA1**self.steps)
            return w - f32(step_size) * m / (np.sqrt(v) + f32(ADAM_EPS)), {"momenta": m, "velocities": v}
        if opt == "momentum":
            m = f32(MOMENTUM) * s["momenta"] + g
            return w - lr * m, {"momenta": m}
        if opt == "rmsprop":
            ms = f32(RMSPROP_RHO) * s["ms"] + f32(1 - RMSPROP_RHO) * g * g
            mom = f32(RMSPROP_MOMENTUM) * s["mom"] + f32(RMSPROP_LR) * g / np.sqrt(ms + f32(RMSPROP_EPS))
            return w - mom, {"ms": ms, "mom": mom}
        if opt == "adagrad-momentum":
            a = s["accumulators"] + g * g
            m = f32(MOMENTUM) * s["momenta"] + g / np.sqrt(a + f32(ADAGRAD_MOMENTUM_EPS))
            return w - lr * m, {"accumulators": a, "momenta": m}
        if opt == "proximal-adagrad":
            a = s["accumulators"] + g * g
            rate = lr / np.sqrt(a)
            v = w - rate * g
            shrunk = np.maximum(np.abs(v) - rate * f32(L1), f32(0))
            return np.sign(v) * shrunk / (f32(1) + rate * f32(L2)), {"accumulators": a}
        if opt == "ftrl":  # FTRL-proximal, learning_rate_power -0.5, linear as in the paper
            a = s["accumulators"] + g * g
            root = np.sqrt(a)
            linear = s["linears"] + g - (root - np.sqrt(s["accumulators"])) / lr * w
            new = (np.sign(linear) * f32(L1) - linear) / (root / lr + f32(2 * L2))
            return np.where(np.abs(linear) > f32(L1), new, f32(0)), {"accumulators": a, "linears": linear}
        raise UnsupportedError(f"no numpy update for {opt}")

    def rows(self, ids):
        return [t[i] for t, i in zip(self.t, ids)]


TORCH_UNSUPPORTED = {
    "ftrl": "torch.optim has no FTRL",
    "momentum": "torch.optim.SGD's momentum is not lazy (rows of earlier steps keep moving as their momentum "
    "decays); the spec's updates only the step's rows",
    "rmsprop": "torch.optim.RMSprop takes no sparse gradient, and with a dense one updates every row every step "
    "(not lazy) with epsilon outside the root",
    "proximal-adagrad": "torch.optim has no proximal Adagrad (l1 / l2 shrinkage)",
    "adagrad-momentum": "torch.optim has no Adagrad with momentum",
}

_FBGEMM_HAS = "EmbOptimType has SGD, Adagrad and row-wise variants, Adam, LAMB, LARS, Shampoo, MADGRAD"
FBGEMM_UNSUPPORTED = {
    "adam": "no exact adam in FBGEMM's CPU TBE that matches the spec",
    "adam-nonlazy": "FBGEMM's TBE updates only the rows in the step (fused into the backward): no non-lazy Adam",
    "ftrl": f"no FTRL in FBGEMM ({_FBGEMM_HAS})",
    "momentum": f"no momentum in FBGEMM ({_FBGEMM_HAS})",
    "rmsprop": f"no RMSProp in FBGEMM ({_FBGEMM_HAS})",
    "proximal-adagrad": f"no proximal Adagrad in FBGEMM ({_FBGEMM_HAS})",
    "adagrad-momentum": f"no Adagrad with momentum in FBGEMM ({_FBGEMM_HAS})",
}


class TorchImpl:
    """torch.nn.EmbeddingBag(sparse=True) + a torch.optim optimizer, one per table."""

    name = "torch"

    def __init__(self, w: Workload, tables: list[np.ndarray]):
        import torch

        if w.optimizer in TORCH_UNSUPPORTED:
            raise UnsupportedError(TORCH_UNSUPPORTED[w.optimizer])
        self.torch, self.w = torch, w
        self.mods, self.opts = [], []
        self.steps = 0
        # Non-lazy Adam moves every row every step: a dense gradient and torch.optim.Adam.
        sparse = w.optimizer != "adam-nonlazy"
        for table in tables:
            if w.sequence:
                mod = torch.nn.Embedding(table.shape[0], w.dim, sparse=sparse)
            else:
                mode = "mean" if (w.combiner == "mean" and not w.weighted) else "sum"
                mod = torch.nn.EmbeddingBag(table.shape[0], w.dim, mode=mode, sparse=sparse)
            with torch.no_grad():
                mod.weight.copy_(torch.from_numpy(table))
            params = [mod.weight]
            if w.optimizer == "sgd":
                opt = torch.optim.SGD(params, lr=LR)
            elif w.optimizer == "adagrad":
                opt = torch.optim.Adagrad(params, lr=LR, initial_accumulator_value=ADAGRAD_INITIAL, eps=0.0)
            elif w.optimizer == "adam":
                opt = torch.optim.SparseAdam(params, lr=LR, betas=(BETA1, BETA2), eps=ADAM_EPS)
            elif w.optimizer == "adam-nonlazy":
                opt = torch.optim.Adam(params, lr=LR, betas=(BETA1, BETA2), eps=ADAM_EPS)
            else:
                raise UnsupportedError(f"no torch optimizer for {w.optimizer} here")
            self.mods.append(mod)
            self.opts.append(opt)
        self.mode_sum = w.sequence == 0 and not (w.combiner == "mean" and not w.weighted)

    def _lookup(self, mod, b: Batch):
        torch = self.torch
        values = torch.from_numpy(b.values)
        if self.w.sequence:
            rows = mod(values)
            lengths = torch.from_numpy(np.diff(b.offsets))
            row = torch.repeat_interleave(torch.arange(self.w.batch), lengths)
            out = torch.zeros(self.w.batch, self.w.sequence, self.w.dim)
            return out.index_put((row, torch.from_numpy(b.positions)), rows)
        offsets = torch.from_numpy(b.offsets[:-1])
        psw = None
        if self.mode_sum and (self.w.combiner != "sum" or b.weights is not None):
            w = torch.from_numpy(b.weights) if b.weights is not None else torch.ones(b.values.shape[0])
            if self.w.combiner == "sum":
                psw = w
            else:
                lengths = torch.from_numpy(np.diff(b.offsets))
                row = torch.repeat_interleave(torch.arange(self.w.batch), lengths)
                den = torch.zeros(self.w.batch, dtype=torch.float64).index_add_(
                    0, row, w.double() if self.w.combiner == "mean" else w.double() ** 2
                )
                if self.w.combiner == "sqrtn":
                    den = den.sqrt()
                psw = (w.double() / den[row]).float()
        return mod(values, offsets, per_sample_weights=psw)

    def forward(self, step):
        with self.torch.no_grad():
            return [self._lookup(m, b).numpy() for m, b in zip(self.mods, step)]

    def step(self, step):
        outs = []
        self.steps += 1
        for mod, opt, b in zip(self.mods, self.opts, step):
            if self.w.optimizer == "adam-nonlazy":
                # torch.optim.Adam adds epsilon to sqrt(v / (1 - beta2**t)); the spec adds it to sqrt(v) (the
                # paper's "epsilon hat", as SparseAdam does): the same update with epsilon / sqrt(1 - beta2**t).
                opt.param_groups[0]["eps"] = ADAM_EPS / np.sqrt(1 - BETA2**self.steps)
            opt.zero_grad(set_to_none=True)
            out = self._lookup(mod, b)
            out.backward(self.torch.from_numpy(b.grad))
            opt.step()
            outs.append(out.detach().numpy())
        return outs

    def rows(self, ids):
        return [m.weight.detach().numpy()[i] for m, i in zip(self.mods, ids)]


class FbgemmImpl:
    """FBGEMM TBE on the CPU: all tables in one fused module, exact SGD / Adagrad."""

    name = "fbgemm"

    def __init__(self, w: Workload, tables: list[np.ndarray]):
        import torch
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            EmbeddingLocation,
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        if w.sequence:
            raise UnsupportedError("sequence features are not run on FBGEMM here (pooled TBE only)")
        kinds = {"sgd": EmbOptimType.EXACT_SGD, "adagrad": EmbOptimType.EXACT_ADAGRAD}
        if w.optimizer not in kinds:
            raise UnsupportedError(
                FBGEMM_UNSUPPORTED.get(w.optimizer, f"no exact {w.optimizer} in FBGEMM's CPU TBE that matches the spec")
            )
        self.torch, self.w = torch, w
        pooling = PoolingMode.MEAN if (w.combiner == "mean" and not w.weighted) else PoolingMode.SUM
        self.weighted = pooling == PoolingMode.SUM and (w.combiner != "sum" or w.weighted)
        self.emb = SplitTableBatchedEmbeddingBagsCodegen(
            [(t.shape[0], w.dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for t in tables],
            optimizer=kinds[w.optimizer],
            learning_rate=LR,
            eps=0.0,
            pooling_mode=pooling,
            weights_precision=SparseType.FP32,
        )
        with torch.no_grad():
            for view, table in zip(self.emb.split_embedding_weights(), tables):
                view.copy_(torch.from_numpy(table))
            if w.optimizer == "adagrad":
                for states in self.emb.split_optimizer_states():
                    states[0].fill_(ADAGRAD_INITIAL)

    def _inputs(self, step):
        torch = self.torch
        values = torch.from_numpy(np.concatenate([b.values for b in step]))
        offsets, base = [np.zeros(1, np.int64)], 0
        for b in step:
            offsets.append(b.offsets[1:] + base)
            base += b.offsets[-1]
        offsets = torch.from_numpy(np.concatenate(offsets))
        psw = None
        if self.weighted:
            psw = torch.from_numpy(np.concatenate([_coefficients(b, self.w.combiner) for b in step]))
        return values, offsets, psw

    def _split(self, out):
        return [out[:, t * self.w.dim : (t + 1) * self.w.dim] for t in range(self.w.num_tables)]

    def forward(self, step):
        values, offsets, psw = self._inputs(step)
        with self.torch.no_grad():
            return [o.numpy() for o in self._split(self.emb(values, offsets, per_sample_weights=psw))]

    def step(self, step):
        values, offsets, psw = self._inputs(step)
        out = self.emb(values, offsets, per_sample_weights=psw)  # [B, T * D]
        grad = np.concatenate([b.grad for b in step], axis=1)
        out.backward(self.torch.from_numpy(grad))  # the optimizer runs fused inside backward
        return [o.detach().numpy() for o in self._split(out)]

    def rows(self, ids):
        return [v.detach().numpy()[i] for v, i in zip(self.emb.split_embedding_weights(), ids)]


def missing_reason(name: str) -> str | None:
    """None when the peer can be imported, else why not."""
    try:
        if name == "torch":
            import torch
        elif name == "fbgemm":
            import fbgemm_gpu  # noqa: F401
            import torch  # noqa: F401
        elif name == "numba":
            import numba  # noqa: F401
    except Exception as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None


PEERS = {"torch": TorchImpl, "fbgemm": FbgemmImpl, "numpy": NumpyImpl}
