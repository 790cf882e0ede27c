"""An optimizer added from outside the package, as docs/contributing_optimizer.md adds one: a spec
class, a formula with its hyper-parameters, and a registry row (Lion, Chen et al. 2023, without weight
decay of its own: the shared options give that)."""

import dataclasses
from typing import ClassVar

import numpy as np

from tpu_embedding_shim.engine.optimizers.formulas import sign
from tpu_embedding_shim.engine.optimizers.registry import Optimizer
from tpu_embedding_shim.spec import OptimizerSpec

_ONE = np.float32(1.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LionSpec(OptimizerSpec):
    kind: ClassVar[str] = "lion"
    beta1: float = 0.9
    beta2: float = 0.99

    def slot_initial_values(self):
        return {"momenta": 0.0}


def lion(w, g, m, hp):
    """`w <- w - lr * sign(beta1 m + (1 - beta1) g); m <- beta2 m + (1 - beta2) g`."""
    lr, beta1, beta2 = hp
    step = sign(beta1 * m + (_ONE - beta1) * g)
    return w - lr * step, beta2 * m + (_ONE - beta2) * g


def lion_hyperparameters(optimizer: LionSpec, lr: float):
    return (np.float32(lr), np.float32(optimizer.beta1), np.float32(optimizer.beta2))


LION = Optimizer(LionSpec, lion, ("momenta",), lion_hyperparameters)
