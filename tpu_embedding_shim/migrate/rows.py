"""Report rows: `make_row` writes one; each target keeps a table of option -> `Rule` built from the rules below."""

from __future__ import annotations

from .options import Option
from .report import Row

__all__ = ["make_row"]


def make_row(option: Option, status: str, target: str = "", how: str = "") -> Row:
    """The report row of `option`."""
    return Row(option.where, option.name, option.text, status, target, how)
