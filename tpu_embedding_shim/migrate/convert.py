"""One migration, whatever the target: read the source, map every option, refuse a lossy one, convert.

A target is a module of this package with:

- `NAME` (the CLI's `--to` value) and `TITLE` (the library and version the
  mapping was written against);
- `map_option(option, source) -> Row`: one report row for every `Option`
  but those that change nothing anywhere (`common_row`: an unset option, and
  `clipping_limit`, which TensorFlow never applies);
- `weights(source) -> dict[str, np.ndarray]`: tables and optimizer state
  under the target's names and in its layout;
- `code(source) -> str`: Python source that builds the target's config and
  loads the weights;
- `build(source)`: the target's config objects, made with its library
  (ImportError when the library is not installed);
- optionally `notes(source) -> list[str]` for the report, and
  `write_weights(migration, directory, progress) -> list[str]` when the weights go
  in a format of the target's own rather than `weights.npz`.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from .migration import Migration
from .options import Option, options
from .progress import ProgressLine
from .report import EXACT, Report, Row
from .source import Source, load_source

__all__ = ["convert", "make_row", "common_row", "report_for"]


def make_row(option: Option, status: str, target: str = "", how: str = "") -> Row:
    """The report row of `option`."""
    return Row(option.where, option.name, option.text, status, target, how)


def common_row(option: Option) -> Row | None:
    """The row of an option every target maps the same way (exactly: it changes nothing), else None."""
    if option.name == "clipping_limit":
        return make_row(option, EXACT, "(nothing)", "" if option.value is None else "TF stores it and never applies it")
    if option.unset:
        return make_row(option, EXACT, "(not set)")
    return None


def report_for(target: ModuleType, source: Source) -> Report:
    """Every option of `source` mapped by `target`, as a report."""
    rows = []
    for option in options(source):
        row = common_row(option) or target.map_option(option, source)
        if (row.where, row.option) != (option.where, option.name):
            raise AssertionError(f"{target.NAME}: map_option({option.where} / {option.name}) answered another option")
        rows.append(row)
    notes = list(source.notes) + list(getattr(target, "notes", lambda s: [])(source))
    return Report(target.TITLE, source.describe(), tuple(rows), tuple(notes))


def convert(
    target: ModuleType,
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
    show(f"converting {len(source.tables)} tables to {target.NAME}'s layout")
    weights = target.weights(source)
    code = target.code(source)
    show(f"building {target.NAME}'s configs")
    try:
        built, missing = target.build(source), None
    except ImportError as error:
        built, missing = None, f"{target.TITLE} is not installed here ({error}); `code` builds the config."
    extra = {"write_weights": target.write_weights} if hasattr(target, "write_weights") else {}
    return Migration(target.NAME, built, code, weights, report, source.step, missing, **extra)
