"""Fast CPU kernels (numba) for the engine's hot path; optional.

The numpy kernels in `lookup.py` and `optimizers/` are the executable
specification. The kernels here compute the same numbers, in the same
float32 arithmetic, faster: they are used by `Engine` when numba imports
(`pip install numba`, the `fast` extra), and the engine falls back to the
numpy kernels otherwise. `tests/engine/test_fast_kernels.py` checks that
both agree.

One idea per module:

- `forward.py`: parallel gather-pool (one thread per block of examples,
  each example's rows summed in order into a register-sized accumulator).
- `owner.py`: the owner-computes backward. With P partitions, partition p
  owns the ids with `id % P == p`; it sums the gradients of its duplicate
  ids through a persistent id -> slot map (reset after the step), in one
  pass, into its own region of persistent scratch as long as the number of
  entries it owns (an exact bound). No sort, no atomics.
- `prefetch.py`: software prefetch (`llvm.prefetch`) of rows a few ids
  ahead, used by the gather and the update.
- `fused.py`: every optimizer's update applied in place to the rows a
  partition owns (non-lazy Adam: to every row), with the options every
  optimizer shares (gradient clipping, weight decay, weight clipping, the
  step's learning rate), giving the reference's bits: the generic row loops
  that inline each optimizer's formula (`optimizers/formulas.py`).
- `batched.py`: a small step table-batched: every feature's ids checked,
  every lookup, every table's entries and sums, each in one call.
- `threads.py`: which thread runs what: small calls on the calling
  thread alone, small independent calls (features, tables) side by side
  on Python threads.
- `kernels.py`: `FastKernels`, the engine's `Kernels` (`engine/kernels.py`)
  on these kernels (tables as one storage array of any sharding).
- `exchange.py`: the index work of `DistributedEngine`'s exchange (bucketing
  entries by owner, distinct rows, runs of examples), integers only.

Compiled kernels are cached on disk (`cache=True`): only the first run on a
machine pays the compile time.
"""

from __future__ import annotations

import os
import sys

__all__ = ["available", "unavailable_reason", "forked_after_parallel_use", "ENV_VAR"]

ENV_VAR = "TPU_EMBEDDING_SHIM_KERNELS"
"""Set to 'numpy' to turn the fast kernels off process-wide."""

# numba runs its parallel kernels on OpenMP threads, which by default spin
# for a while after each parallel region: on a small machine they take the
# cores from the model's own work between the engine's kernels (the
# MovieLens job, numpy MLP + engine on 2 cores: 29 s of training with
# spinning threads, 6.7-8.5 s with OMP_WAIT_POLICY=PASSIVE, 10.5 s on the
# numpy kernels). So the threads sleep when idle, unless the user chose a
# policy. It must be set before the OpenMP runtime loads: a process that
# imported torch first has already loaded it (set the variable yourself).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_reason: str | None = None
_checked = False


def unavailable_reason() -> str | None:
    """None when the fast kernels can be used, else why not (one line)."""
    global _checked, _reason
    if not _checked:
        _checked = True
        if os.environ.get(ENV_VAR, "").strip().lower() == "numpy":
            _reason = f"{ENV_VAR}=numpy"
        else:
            try:
                import numba  # noqa: F401
            except Exception as error:  # ImportError, or a numba that fails to load
                _reason = f"numba is not importable ({type(error).__name__}: {error})"
    return _reason


def available() -> bool:
    """True when numba imports and the fast kernels are not turned off."""
    return unavailable_reason() is None


# numba's parallel kernels run on a threading layer (GNU OpenMP here) that is
# not fork-safe: a child forked after the layer started is stopped by numba
# ("fork() called from a process already using GNU OpenMP") the moment it
# launches a kernel, and a multiprocessing.Pool of such children hangs. So a
# forked child notes it, and engines made before the fork run the numpy
# kernels in it (the same numbers, bit for bit; slower).
_forked_after_parallel_use = False


def _note_fork_in_child() -> None:
    global _forked_after_parallel_use
    numba = sys.modules.get("numba")
    if numba is None or _forked_after_parallel_use:
        return
    try:
        layer = numba.threading_layer()  # ValueError until a parallel kernel has run in this process
    except ValueError:
        return
    if layer != "workqueue":  # numba's own layer keeps no threads across a fork
        _forked_after_parallel_use = True


def forked_after_parallel_use() -> bool:
    """True in a process forked after its parent ran parallel kernels: they can't run here."""
    return _forked_after_parallel_use


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_note_fork_in_child)
