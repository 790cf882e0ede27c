"""Optimizer updates: each optimizer's formula written once, run by numpy and by the fused kernels.

- `formulas.py`: one element-wise function per optimizer (the single source
  of its arithmetic) and the packing of its hyper-parameters;
- `registry.py`: spec class -> formula, slot order, hyper-parameters: the one
  list of optimizers, read by both engines;
- `reference.py`: the numpy updates, the executable specification
  (`apply_update`: the options every optimizer shares around a formula), and
  the oracles built on it (`apply_sparse_update`, `apply_sequentially`).

The fused numba kernels (`engine/fast/fused.py`) inline the same formulas
into one row loop and give the same bits.
"""

from ...spec.optimizers import bias_corrected_learning_rate
from ..lookup import sum_duplicates
from . import formulas, reference
from .reference import *  # noqa: F403 (re-exports reference.__all__)
from .registry import OPTIMIZERS, Optimizer, Powers, optimizer_for, register

__all__ = [
    *reference.__all__,
    "sum_duplicates",
    "bias_corrected_learning_rate",
    "OPTIMIZERS",
    "Optimizer",
    "Powers",
    "optimizer_for",
    "register",
    "formulas",
]
