"""One migration, whatever the target: read the source, map every option, refuse a lossy one, convert.

A target is a module of this package that ends with `TARGET = Target(...)`:
what each target supplies (its names, its report rows, its weights, its code,
its config objects), typed, so that mypy checks every target against it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..progress import ProgressLine
from .migration import Migration, write_npz_weights
from .options import Option, options
from .report import EXACT, Report, Row
from .rows import make_row
from .source import MigrationInput, load_source

__all__ = ["Target", "convert", "common_row", "report_for"]


def _no_notes(source: MigrationInput) -> list[str]:
    return []


@dataclasses.dataclass(frozen=True, kw_only=True)
class Target:
    """What converts a `MigrationInput` to one library; each target module ends with `TARGET = Target(...)`."""

    name: str
    """The CLI's `--to` value."""
    title: str
    """The library and version the mapping was written against."""
    map_option: Callable[[Option, MigrationInput], Row]
    """One report row for every `Option` but those that change nothing anywhere (`common_row`: an unset option,
    and `clipping_limit`, which TensorFlow never applies)."""
    weights: Callable[[MigrationInput], dict[str, np.ndarray]]
    """Tables and optimizer state under the target's names and in its layout."""
    code: Callable[[MigrationInput], str]
    """Python source that builds the target's config and loads the weights."""
    build: Callable[[MigrationInput], Any]
    """The target's config objects, made with its library (ImportError when it is not installed)."""
    notes: Callable[[MigrationInput], list[str]] = _no_notes
    """Notes for the report, after the source's."""
    write_weights: Callable[..., list[str]] = write_npz_weights
    """`(migration, directory, progress) -> names written`: `weights.npz`, or a format of the target's own."""


def common_row(option: Option) -> Row | None:
    """The row of an option every target maps the same way (exactly: it changes nothing), else None."""
    if option.name == "clipping_limit":
        return make_row(option, EXACT, "(nothing)", "" if option.value is None else "TF stores it and never applies it")
    if option.unset:
        return make_row(option, EXACT, "(not set)")
    return None


def report_for(target: Target, source: MigrationInput) -> Report:
    """Every option of `source` mapped by `target`, as a report."""
    rows = []
    for option in options(source):
        row = common_row(option) or target.map_option(option, source)
        if (row.where, row.option) != (option.where, option.name):
            raise AssertionError(f"{target.name}: map_option({option.where} / {option.name}) answered another option")
        rows.append(row)
    notes = list(source.notes) + target.notes(source)
    return Report(target.title, source.describe(), tuple(rows), tuple(notes))


def convert(
    target: Target,
    config: Any,
    checkpoint: str | os.PathLike | None = None,
    *,
    allow_lossy: bool = False,
    seed: int = 0,
    batch_size: int | None = None,
    progress: ProgressLine | None = None,
) -> Migration:
    """Migrates `config` (with the weights of `checkpoint`) to `target`; see `tpu_embedding_shim.migrate`.

    `progress` shows each step on the command line's progress line.
    """
    if not isinstance(allow_lossy, bool):
        raise TypeError(f"Argument `allow_lossy` must be a bool. Received: allow_lossy={allow_lossy!r}.")
    show = progress.status if progress is not None else (lambda text: None)
    show(f"reading the checkpoint {checkpoint}" if checkpoint is not None else "drawing fresh tables")
    source = load_source(config, checkpoint, seed=seed, batch_size=batch_size)
    report = report_for(target, source)
    report.check(allow_lossy=allow_lossy)
    show(f"converting {len(source.tables)} tables to {target.name}'s layout")
    weights = target.weights(source)
    code = target.code(source)
    show(f"building {target.name}'s configs")
    try:
        built, missing = target.build(source), None
    except ImportError as error:
        built, missing = None, f"{target.title} is not installed here ({error}); `code` builds the config."
    return Migration(target.name, built, code, weights, report, source.step, missing, target.write_weights)
