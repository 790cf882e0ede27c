"""The job's progress lines: epoch and step out of their totals, the loss, steps/s and an ETA.

One line every `interval` seconds (not one per step), plain lines that read
the same on a terminal and in a CI log. numba compiles the engine's kernels
during the first step of a first run on a machine (later runs load them from
its on-disk cache), which takes seconds with nothing else printed: when the
first step is still running after `compile_notice` seconds, a line says so
(the first step is timed, not guessed); its time is printed when it ends,
and the ETA counts only the steps after it.

>>> lines, losses = [], []
>>> ticks = iter([0.0, 4.0, 5.0, 6.0, 7.0])   # the clock: the first step takes 4 s, the others 1 s
>>> progress = JobProgress(2, 2, lines.append, losses=losses, interval=1.5, clock=lambda: next(ticks))
>>> progress.first_step_is_slow()   # what the timer started by `start()` calls when the first step runs long
>>> for loss in (0.7, 0.6, 0.5, 0.4):
...     losses.append(loss)
...     progress.step()
>>> print("\\n".join(lines))
the first step is still running: numba compiles the engine's kernels on a first run (later runs use its cache).
first step: 4.0 s
epoch 2/2  step 3/4  loss 0.5000  1.0 steps/s  ETA 1 s
epoch 2/2  step 4/4  loss 0.4000  1.0 steps/s  ETA 0 s
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Callable, Sequence


def numba_kernels() -> bool:
    """Whether the engine runs numba's kernels: numba is installed and `TPU_EMBEDDING_SHIM_KERNELS` is not numpy."""
    return (
        importlib.util.find_spec("numba") is not None
        and os.environ.get("TPU_EMBEDDING_SHIM_KERNELS", "").strip().lower() != "numpy"
    )


class JobProgress:
    """`step()` after each training step; prints through `echo` at most every `interval` seconds.

    Args:
      steps_per_epoch: training steps in one epoch.
      epochs: epochs the job runs.
      echo: where lines go (the job's `echo`).
      losses: the training losses so far (the last one is printed).
      interval: seconds between lines (the last step always has one).
      compile_notice: seconds of a first step after which a line says numba is compiling.
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
        compile_notice: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.steps_per_epoch, self.epochs, self.total = steps_per_epoch, epochs, steps_per_epoch * epochs
        self.echo, self.losses, self.interval, self.clock = echo, losses, interval, clock
        self.done = 0
        self.compile_notice = compile_notice
        self.slow_first_step = False
        self._timer: threading.Timer | None = None
        self._start = clock()
        self._after_first: float | None = None  # when the first step ended: the rate counts the steps after it
        self._last_line = self._start

    def start(self) -> None:
        """Starts timing the first step: past `compile_notice` seconds (with numba's kernels), a line says why."""
        self._start = self.clock()
        if numba_kernels():
            self._timer = threading.Timer(self.compile_notice, self.first_step_is_slow)
            self._timer.daemon = True
            self._timer.start()

    def first_step_is_slow(self) -> None:
        if self.done == 0:
            self.slow_first_step = True
            self.echo(
                "the first step is still running: numba compiles the engine's kernels on a first run "
                "(later runs use its cache)."
            )

    def close(self) -> None:
        """Stops the first step's timer (when the job ends before the first step does)."""
        if self._timer is not None:
            self._timer.cancel()

    def step(self) -> None:
        now = self.clock()
        self.done += 1
        if self.done == 1:
            self.close()
            self._after_first = now
            if self.slow_first_step:
                self.echo(f"first step: {now - self._start:.1f} s")
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
