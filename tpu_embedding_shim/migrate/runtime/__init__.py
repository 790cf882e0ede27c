"""The code the generated programs run, kept as modules so that ruff and mypy check it; each model.py embeds it.

A runtime module is the part of a target's `model.py` that is the same for
every converted model. It opens with the imports and the names that the
generated part of `model.py` defines (the configs), so that it reads as a
module on its own; the generator embeds its text from the `MARKER` line on,
and the written program stays one self-contained file. The modules import
the targets' libraries (torch, TorchRec, JAX): the package never imports
them, it reads them as text.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["MARKER", "embedded"]

MARKER = "# model.py's text from here on."
"""The line after which a runtime module is embedded in the generated program."""


def embedded(module: str) -> str:
    """The text of the runtime module `module` (its file name without `.py`) after its `MARKER` line, without the
    blank lines around it, ending in one newline."""
    text = resources.files(__name__).joinpath(f"{module}.py").read_text(encoding="utf-8")
    _, marker, body = text.partition(f"\n{MARKER}\n")
    if not marker:
        raise ValueError(f"The runtime module {module!r} has no line {MARKER!r}: nothing of it would be embedded.")
    return body.strip("\n") + "\n"
