"""A finished migration: the target's config, its source code, the weights in its layout, the report.

`Migration.write(directory)` puts them on disk: `model.py` (the generated
code, which builds the target's objects and loads the weights), the
weights (`weights.npz` under the target's names, or the target's own
format), and `report.md`. Every file is written under a temporary name
first and moved into place once all are written, so a failure leaves the
directory as it was (a directory the call made is removed again).

It never overwrites what it did not write: a directory that already holds
one of its names is refused, and `force=True` replaces only an earlier
migration's own output, which `MARKER_FILE` records.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..engine import created_directories, replace_file
from ..progress import ProgressLine
from .report import Report

__all__ = ["Migration", "write_npz", "write_npz_weights", "CODE_FILE", "WEIGHTS_FILE", "REPORT_FILE", "MARKER_FILE"]

CODE_FILE = "model.py"
WEIGHTS_FILE = "weights.npz"
REPORT_FILE = "report.md"


def write_npz(
    path: str, arrays: Mapping[str, np.ndarray], progress: ProgressLine | None = None, what: str = WEIGHTS_FILE
) -> None:
    """`np.savez(path, **arrays)`, one array at a time, each shown on `progress` (`what i/n: name`)."""
    items = [(name, int(np.asarray(array).nbytes)) for name, array in arrays.items()]
    names = progress.items(f"writing {what}", items) if progress is not None else (name for name, _ in items)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name in names:
            with archive.open(name + ".npy", "w", force_zip64=True) as file:
                np.lib.format.write_array(file, np.asanyarray(arrays[name]), allow_pickle=False)


def write_npz_weights(migration: Migration, directory: str, progress: ProgressLine | None = None) -> list[str]:
    """A migration's weights as `weights.npz` in `directory` (what most targets load); the names written."""
    write_npz(os.path.join(directory, WEIGHTS_FILE), migration.weights, progress)
    return [WEIGHTS_FILE]


@dataclasses.dataclass
class Migration:
    """What `to_torchrec` / `to_keras_rs` / `to_jax_tpu_embedding` / `to_tf_midlevel` return.

    Attributes:
      target: the target's name ('torchrec', 'keras-rs', 'jax', 'tf-midlevel').
      config: the target's config objects, built with the target library
        (None when it is not installed: `missing` says why; `code` builds them).
      code: Python source that builds the config and loads the weights.
      weights: the target's name -> array: tables and optimizer state, in the
        target's layout and names.
      report: every option and how it maps (see `report.py`).
      step: the global step the weights are at.
      missing: why `config` is None (the ImportError's text), else None.
    """

    target: str
    config: Any
    code: str
    weights: dict[str, np.ndarray]
    report: Report
    step: int = 0
    missing: str | None = None
    write_weights: Callable[..., list[str]] = dataclasses.field(default=write_npz_weights, repr=False)

    def write(
        self, directory: str | os.PathLike, *, progress: ProgressLine | None = None, force: bool = False
    ) -> list[str]:
        """Writes the code, the weights and the report into `directory` (made if missing); their paths.

        Nothing in `directory` changes unless every file was written, and
        nothing is overwritten that this method did not write: when
        `directory` already holds one of the names it writes, it refuses
        (`FileExistsError`), and with `force=True` it replaces only an
        earlier migration's output, as recorded (names, sizes, times) in
        `MARKER_FILE`, unchanged since. `write_weights(migration, scratch,
        progress)` writes the weights (the names it returns are relative to
        `scratch`); `progress` shows each array.
        """
        if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
            raise ValueError(f"Argument `directory` must be a non-empty path. Received: {directory!r}.")
        if force is not True and force is not False:
            raise TypeError(f"Argument `force` must be True or False. Received: {force!r}.")
        directory = os.fspath(directory)
        if os.path.lexists(directory) and not os.path.isdir(directory):
            raise FileExistsError(f"{directory!r} is a file; the output of a migration is a directory.")
        with created_directories(directory):
            scratch = tempfile.mkdtemp(prefix=".migrate-", dir=directory)
            try:
                with open(os.path.join(scratch, CODE_FILE), "w", encoding="utf-8") as file:
                    file.write(self.code)
                with open(os.path.join(scratch, REPORT_FILE), "w", encoding="utf-8") as file:
                    file.write(self.report.to_markdown())
                names = [CODE_FILE, *self.write_weights(self, scratch, progress), REPORT_FILE]
                _install(directory, scratch, names, force=force)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return [os.path.join(directory, name) for name in names]


MARKER_FILE = ".tpu-embedding-shim-migrate"
"""What a migration wrote into its directory (each name with its kind, size and modification time), so a later
`write(..., force=True)` knows its own output from the user's files."""


def _record(path: str) -> Any:
    """A JSON record of the file or directory `path`: what `force` compares to tell if it changed since."""
    if os.path.isdir(path) and not os.path.islink(path):
        return {
            "directory": sorted(
                [os.path.relpath(os.path.join(root, name), path), _record(os.path.join(root, name))]
                for root, _, files in os.walk(path)
                for name in files
            )
        }
    info = os.lstat(path)
    return {"file": [info.st_size, info.st_mtime_ns]}


def _earlier_output(directory: str) -> dict[str, Any]:
    """The names an earlier migration wrote into `directory`, with their records ({} when there was none)."""
    path = os.path.join(directory, MARKER_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as file:
            recorded = json.load(file)
        return dict(recorded["written"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _install(directory: str, scratch: str, names: list[str], *, force: bool) -> None:
    """Moves `names` from `scratch` into `directory`, all or none, never over a file the migration did not write."""
    taken = [name for name in [*names, MARKER_FILE] if os.path.lexists(os.path.join(directory, name))]
    earlier = _earlier_output(directory)
    if taken and not force:
        raise FileExistsError(
            f"{directory!r} already holds {', '.join(taken)}: a migration never overwrites files. Choose another "
            "directory, or pass force=True (--force) to replace the output of an earlier migration there."
        )
    marker = os.path.join(directory, MARKER_FILE)
    foreign = [
        name
        for name in taken
        if (name == MARKER_FILE and (os.path.islink(marker) or not os.path.isfile(marker)))
        or (name != MARKER_FILE and (name not in earlier or earlier[name] != _record(os.path.join(directory, name))))
    ]
    if foreign:
        raise FileExistsError(
            f"{directory!r} holds {', '.join(foreign)}, which an earlier migration did not write (or which changed "
            f"since: {MARKER_FILE} does not list them as they are): force=True replaces only a migration's own "
            "output. Move them away, or choose another directory."
        )
    # An earlier migration's own files go too (a target that writes other names), when unchanged since.
    stale = [
        name
        for name, record in earlier.items()
        if name not in names
        and _plain_name(name)
        and os.path.lexists(os.path.join(directory, name))
        and record == _record(os.path.join(directory, name))
    ]
    aside = os.path.join(scratch, ".earlier")
    os.mkdir(aside)
    moved: list[str] = []
    placed: list[str] = []
    try:
        for name in [*taken, *stale]:
            os.replace(os.path.join(directory, name), os.path.join(aside, name))
            moved.append(name)
        for name in names:
            os.replace(os.path.join(scratch, name), os.path.join(directory, name))
            placed.append(name)
        written = {"written": {name: _record(os.path.join(directory, name)) for name in names}}
        replace_file(marker, json.dumps(written, indent=1).encode())
    except BaseException:
        for name in placed:
            path = os.path.join(directory, name)
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
        for name in moved:
            os.replace(os.path.join(aside, name), os.path.join(directory, name))
        raise


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and os.path.basename(name) == name
