"""Progress on the terminal: the step bar of train / evaluate / predict, and the line of `migrate` and
`checkpoint convert`; one rule for where they draw (`progress_enabled`).

Shown on a terminal only: off when stderr is not a TTY, when the `CI`
environment variable is set to a true value, when
`TPU_EMBEDDING_SHIM_PROGRESS=0`, or when the call says `progress=False`
(`progress=True` forces it on). The step bar redraws at most ten times a
second, so it costs nothing measurable per step:

>>> import io
>>> out = io.StringIO()
>>> bar = Progress("train", total=4, enabled=True, stream=out, min_interval=0.0)
>>> for _ in range(4):
...     bar.update(loss=0.25)
>>> bar.close()
>>> last = out.getvalue().strip().split("\\r")[-1]
>>> last.startswith("train 4/4") and "loss=0.2500" in last
True

The line of a command is one line on stderr, redrawn in place: `migrate:
writing weights.npz 3/8: tbl_user/accumulators, 4 s, about 6 s left`. It
appears only once the command has run for `delay` seconds (quick work
prints nothing). The time left is estimated from the sizes of the items
done so far; `close()` erases the line, so the command's final lines stand
alone:

>>> ticks = iter(range(0, 100, 3))
>>> out = io.StringIO()
>>> line = ProgressLine("migrate", enabled=True, stream=out, clock=lambda: next(ticks))
>>> [name for name in line.items("writing weights.npz", [("a", 1), ("b", 1), ("c", 2)])]
['a', 'b', 'c']
>>> out.getvalue().split("\\r")[-1].strip()
'migrate: writing weights.npz 3/3: c, 12 s, about 9 s left'
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO

__all__ = ["Progress", "ProgressLine", "progress_enabled"]


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


class ProgressLine:
    """`status(text)` for a step of unknown length, `items(what, [(name, size), ...])` for a counted one."""

    def __init__(
        self,
        command: str,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        delay: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.command = command
        self.stream = stream or sys.stderr
        self.enabled = progress_enabled(enabled, self.stream)
        self.delay = delay
        self._clock = clock
        self._start = clock()
        self._width = 0

    def status(self, text: str) -> None:
        """Shows `text` (the step now running) when the command has run for `delay` seconds."""
        self._draw(text)

    def items(self, what: str, items: Iterable[tuple[str, int]]) -> Iterator[str]:
        """Yields each item's name; before each, shows `what i/n: name` and the time left (from the sizes done)."""
        items = list(items)
        total_size = sum(max(size, 0) for _, size in items) or 1
        begin, done = self._clock(), 0
        for index, (name, size) in enumerate(items, start=1):
            now = self._clock()
            remaining = (now - begin) / done * (total_size - done) if done else 0.0
            left = f", about {remaining:.0f} s left" if remaining >= 1 else ""
            self._draw(f"{what} {index}/{len(items)}: {name}, {now - self._start:.0f} s{left}", now)
            yield name
            done += max(size, 0)

    def _draw(self, text: str, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        if not self.enabled or now - self._start < self.delay:
            return
        text = f"{self.command}: {text}"
        self.stream.write("\r" + text + " " * max(self._width - len(text), 0))
        self.stream.flush()
        self._width = len(text)

    def close(self) -> None:
        """Erases the line (when one was drawn)."""
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
