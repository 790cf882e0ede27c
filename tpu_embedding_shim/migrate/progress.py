"""The progress line of `migrate` and `checkpoint convert`: what is being done, n of total, time left.

One line on stderr, redrawn in place: `migrate: writing weights.npz 3/8:
tbl_user/accumulators, 4 s, about 6 s left`. It appears only once the
command has run for `delay` seconds (quick work prints nothing) and only
where `runner.progress.progress_enabled` allows it (a terminal, not CI,
not `TPU_EMBEDDING_SHIM_PROGRESS=0`). The time left is estimated from the
sizes of the items done so far; `close()` erases the line, so the
command's final lines stand alone.

>>> import io
>>> ticks = iter(range(0, 100, 3))
>>> out = io.StringIO()
>>> line = ProgressLine("migrate", enabled=True, stream=out, clock=lambda: next(ticks))
>>> [name for name in line.items("writing weights.npz", [("a", 1), ("b", 1), ("c", 2)])]
['a', 'b', 'c']
>>> out.getvalue().split("\\r")[-1].strip()
'migrate: writing weights.npz 3/3: c, 12 s, about 9 s left'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO

from ..runner.progress import progress_enabled

__all__ = ["ProgressLine"]


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
        import sys

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
