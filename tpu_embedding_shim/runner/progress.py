"""A one-line progress bar for train / evaluate / predict: steps, steps/s and the loss.

Shown on a terminal only: off when stderr is not a TTY, when the `CI`
environment variable is set to a true value, when
`TPU_EMBEDDING_SHIM_PROGRESS=0`, or when the call says `progress=False`
(`progress=True` forces it on). It redraws at most ten times a second, so it
costs nothing measurable per step.

>>> import io
>>> out = io.StringIO()
>>> bar = Progress("train", total=4, enabled=True, stream=out, min_interval=0.0)
>>> for _ in range(4):
...     bar.update(loss=0.25)
>>> bar.close()
>>> last = out.getvalue().strip().split("\\r")[-1]
>>> last.startswith("train 4/4") and "loss=0.2500" in last
True
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


def progress_enabled(requested: bool | None = None, stream: TextIO | None = None) -> bool:
    """Whether to draw: `requested` if given, else a TTY outside CI and not disabled by the environment."""
    if requested is not None:
        return bool(requested)
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        return False
    if os.environ.get("TPU_EMBEDDING_SHIM_PROGRESS", "").strip() == "0":
        return False
    stream = stream or sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Progress:
    """`update()` once per step; `close()` at the end (also a context manager)."""

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        min_interval: float = 0.1,
        unit: str = "steps",
    ):
        self.desc, self.total, self.enabled, self.unit = desc, total, enabled, unit
        self.stream = stream or sys.stderr
        self.min_interval = min_interval
        self.count = 0
        self.loss: float | None = None
        self._start = time.perf_counter()
        self._last_draw = -1.0
        self._width = 0

    def update(self, n: int = 1, loss: float | None = None) -> None:
        self.count += n
        if loss is not None:
            self.loss = float(loss)
        if self.enabled:
            now = time.perf_counter()
            if now - self._last_draw >= self.min_interval or (self.total is not None and self.count >= self.total):
                self._draw(now)

    @property
    def rate(self) -> float:
        elapsed = time.perf_counter() - self._start
        return self.count / elapsed if elapsed > 0 else 0.0

    def _draw(self, now: float) -> None:
        self._last_draw = now
        elapsed = now - self._start
        rate = self.count / elapsed if elapsed > 0 else 0.0
        if self.total:
            frac = min(self.count / self.total, 1.0)
            filled = int(frac * 20)
            bar = "#" * filled + "-" * (20 - filled)
            text = f"{self.desc} {self.count}/{self.total} [{bar}] {elapsed:.1f}s, {rate:.1f} {self.unit}/s"
        else:
            text = f"{self.desc} {self.count} {self.unit} {elapsed:.1f}s, {rate:.1f} {self.unit}/s"
        if self.loss is not None:
            text += f", loss={self.loss:.4f}"
        pad = max(self._width - len(text), 0)
        self._width = len(text)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.count:
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
