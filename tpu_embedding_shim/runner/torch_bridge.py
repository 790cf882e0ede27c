"""The optional PyTorch bridge: a torch module as the dense part of a model_fn.

torch is an optional extra (`pip install torch==2.13.0`); this
module is imported only when used. The contract:

1. `x = torch_bridge.to_torch(net)` turns a feature-layer output into a
   float32 tensor. In TRAIN mode it is a leaf with `requires_grad=True`,
   remembered for this step.
2. The model_fn returns the torch loss as the spec's `loss` (do not call
   `loss.backward()` yourself) and `train_op=torch_bridge.train_op(optimizer)`.
3. The runner calls `loss.backward()`, reads each leaf's `.grad` as
   d(loss)/d(net), splits it per feature and applies it to the embedding
   tables with the EmbeddingConfigSpec's optimizer; then it calls
   `train_op()`, i.e. `optimizer.step(); optimizer.zero_grad()`.

Predictions and metric tensors may be torch tensors; the runner converts
them to numpy. EVAL and PREDICT steps run under `torch.no_grad()`. To save
the module and optimizer with the checkpoints, put them in
`params['dense_state']` (`params['dense_state'].setdefault('model', module)`):
their `state_dict()` is saved, and loaded back on resume.

    def model_fn(features, labels, mode, params):
        state = params['dense_state']
        module = state.setdefault('module', make_module())     # restored on resume
        optimizer = state.setdefault('optimizer', torch.optim.Adam(module.parameters(), 1e-2))
        net = torch_bridge.to_torch(tf.keras.layers.DenseFeatures(columns)(features))
        logits = module(net).squeeze(-1)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={'p': torch.sigmoid(logits)})
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.as_tensor(labels))
        return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=torch_bridge.train_op(optimizer))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..api import replicas
from ..api.lookup_scope import LookupScope, current_scope

__all__ = ["to_torch", "train_op", "backward"]


def to_torch(activations: Any) -> torch.Tensor:
    """A float32 tensor of a feature-layer output; a gradient leaf in a training step."""
    tensor = torch.from_numpy(np.array(activations, dtype=np.float32, copy=True))
    scope = current_scope()
    if scope is not None and scope.training and scope.owns(activations):
        tensor.requires_grad_(True)
        scope.leaves.append((activations, tensor))
    return tensor


def train_op(optimizer: Any, reduction: str = "mean") -> Callable[[], None]:
    """The spec's train_op for a torch optimizer: `optimizer.step(); optimizer.zero_grad()`.

    Under `mpiexec -n N` the parameters' gradients are first summed over the
    replicas and, with `reduction="mean"` (TensorFlow's
    `CrossShardOptimizer` default), divided by N; `"sum"` keeps the sum (for
    a loss already divided by the global batch). One process: no change.
    """
    if not callable(getattr(optimizer, "step", None)):
        raise TypeError(f"torch_bridge.train_op needs a torch optimizer. Received: {type(optimizer).__name__}.")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"Argument `reduction` must be 'mean' or 'sum'. Received: {reduction!r}.")

    def step() -> None:
        if replicas.num_replicas() > 1:
            _reduce_gradients(optimizer, reduction)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _reduce_gradients(optimizer: Any, reduction: str) -> None:
    """Every parameter's gradient summed (and averaged) over the replicas, in place (collective)."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    grads = [p.grad.detach().cpu().numpy() for p in params]
    reduced = replicas.cross_replica_sum(grads) if reduction == "sum" else replicas.cross_replica_mean(grads)
    for param, value in zip(params, reduced):
        param.grad.copy_(torch.from_numpy(np.ascontiguousarray(value)))


def backward(loss: torch.Tensor, scope: LookupScope) -> dict[str, np.ndarray]:
    """Runs `loss.backward()` and returns d(loss)/d(activation) per feature from the registered leaves."""
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"The loss must be a torch tensor for the torch bridge. Received: {type(loss).__name__}.")
    if loss.requires_grad:
        loss.backward()
    grads: dict[str, np.ndarray] = {}
    for output, leaf in scope.leaves:
        if leaf.grad is None:
            continue
        for key, grad in scope.split_gradients({output: leaf.grad.detach().cpu().numpy()}).items():
            grads[key] = grads[key] + grad if key in grads else grad
    return grads
