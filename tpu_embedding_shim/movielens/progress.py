"""The job's progress lines: epoch and step out of their totals, the loss, steps/s and an ETA.

One line every `interval` seconds (not one per step), plain lines that read
the same on a terminal and in a CI log. Before the first step, a line says
when numba will compile the engine's kernels (its on-disk cache does not
hold them yet: a first run on this machine), which takes seconds with
nothing else printed; the first step's time is then reported, and the ETA
counts only the steps after it.

>>> lines, losses = [], []
>>> ticks = iter([0.0, 4.0, 5.0, 6.0, 7.0])   # the clock: the first step takes 4 s, the others 1 s
>>> progress = JobProgress(2, 2, lines.append, losses=losses, interval=1.5, clock=lambda: next(ticks))
>>> progress.announce_compile(True)
>>> for loss in (0.7, 0.6, 0.5, 0.4):
...     losses.append(loss)
...     progress.step()
>>> print("\\n".join(lines))
numba compiles the engine's kernels before the first step (a first run: none is cached yet).
first step: 4.0 s (numba compiling the engine's kernels)
epoch 2/2  step 3/4  loss 0.5000  1.0 steps/s  ETA 1 s
epoch 2/2  step 4/4  loss 0.4000  1.0 steps/s  ETA 0 s
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Sequence

FAST_MODULES = ("forward", "owner", "coefficients", "kernels", "fused")
"""The modules of `engine/fast` whose kernels numba compiles on a first run and caches on disk."""


def kernels_uncompiled() -> bool:
    """True when the engine will run numba's kernels and numba's cache holds none of them yet: a first run, whose
    first step waits for numba to compile them (False: the numpy kernels, or a cache from an earlier run).

    It asks numba where each cached kernel of `engine/fast` keeps its index
    (numba's own locator: `__pycache__` beside the source, `NUMBA_CACHE_DIR`,
    or the user-wide cache) and looks for those files.
    """
    from ..engine import fast

    if not fast.available():
        return False
    from numba.core.registry import CPUDispatcher

    for name in FAST_MODULES:
        module = importlib.import_module(f"{fast.__name__}.{name}")
        for value in vars(module).values():
            cache_file = getattr(getattr(value, "_cache", None), "_cache_file", None)
            if isinstance(value, CPUDispatcher) and cache_file is not None and os.path.exists(cache_file._index_path):
                return False
    return True


class JobProgress:
    """`step()` after each training step; prints through `echo` at most every `interval` seconds.

    Args:
      steps_per_epoch: training steps in one epoch.
      epochs: epochs the job runs.
      echo: where lines go (the job's `echo`).
      losses: the training losses so far (the last one is printed).
      interval: seconds between lines (the last step always has one).
      clock: the time source (seconds), for tests.
    """

    def __init__(
        self,
        steps_per_epoch: int,
        epochs: int,
        echo: Callable[[str], object],
        *,
        losses: Sequence[float] = (),
        interval: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.steps_per_epoch, self.epochs, self.total = steps_per_epoch, epochs, steps_per_epoch * epochs
        self.echo, self.losses, self.interval, self.clock = echo, losses, interval, clock
        self.done = 0
        self.compiling = False
        self._start = clock()
        self._after_first: float | None = None  # when the first step ended: the rate counts the steps after it
        self._last_line = self._start

    def announce_compile(self, uncompiled: bool) -> None:
        """Says that numba compiles before the first step, when `uncompiled` (`kernels_uncompiled()`)."""
        if uncompiled:
            self.compiling = True
            self.echo("numba compiles the engine's kernels before the first step (a first run: none is cached yet).")

    def step(self) -> None:
        now = self.clock()
        self.done += 1
        if self.done == 1:
            self._after_first = now
            if self.compiling:
                self.echo(f"first step: {now - self._start:.1f} s (numba compiling the engine's kernels)")
            self._last_line = now
            return
        if now - self._last_line >= self.interval or self.done == self.total:
            self._last_line = now
            self.echo(self.line(now))

    def line(self, now: float) -> str:
        """`epoch e/E  step s/S  loss L  R steps/s  ETA T s`."""
        epoch = min((self.done - 1) // self.steps_per_epoch + 1, self.epochs)
        text = f"epoch {epoch}/{self.epochs}  step {self.done}/{self.total}"
        if self.losses:
            text += f"  loss {float(self.losses[-1]):.4f}"
        rate = self.rate(now)
        if rate:
            text += f"  {rate:.1f} steps/s  ETA {(self.total - self.done) / rate:.0f} s"
        return text

    def rate(self, now: float | None = None) -> float | None:
        """Steps per second since the first step ended (evaluations included), None before there is one."""
        if self._after_first is None or self.done < 2:
            return None
        elapsed = (self.clock() if now is None else now) - self._after_first
        return (self.done - 1) / elapsed if elapsed > 0 else None

    def eta(self) -> str:
        """`ETA n s` for the steps left, at `rate()`; empty when it is not known yet or nothing is left."""
        rate = self.rate()
        return f"ETA {(self.total - self.done) / rate:.0f} s" if rate and self.done < self.total else ""
