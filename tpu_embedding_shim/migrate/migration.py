"""A finished migration: the target's config, its source code, the weights in its layout, the report.

`Migration.write(directory)` puts them on disk: `model.py` (the generated
code, which builds the target's objects and loads the weights), the
weights (`weights.npz` under the target's names, or the target's own
format), and `report.md`. Every file is written under a temporary name
first and moved into place once all are written, so a failure leaves the
directory as it was.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .progress import ProgressLine
from .report import Report

__all__ = ["Migration", "write_npz", "CODE_FILE", "WEIGHTS_FILE", "REPORT_FILE"]

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


def _write_npz(migration: Migration, directory: str, progress: ProgressLine | None = None) -> list[str]:
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
    write_weights: Callable[..., list[str]] = dataclasses.field(default=_write_npz, repr=False)

    def write(self, directory: str | os.PathLike, *, progress: ProgressLine | None = None) -> list[str]:
        """Writes the code, the weights and the report into `directory` (made if missing); their paths.

        Nothing in `directory` changes unless every file was written.
        `write_weights(migration, scratch, progress)` writes the weights (the
        names it returns are relative to `scratch`); `progress` shows each array.
        """
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=".migrate-", dir=directory)
        try:
            with open(os.path.join(scratch, CODE_FILE), "w", encoding="utf-8") as file:
                file.write(self.code)
            with open(os.path.join(scratch, REPORT_FILE), "w", encoding="utf-8") as file:
                file.write(self.report.to_markdown())
            names = [CODE_FILE, *self.write_weights(self, scratch, progress), REPORT_FILE]
            for name in names:
                destination = os.path.join(directory, name)
                if os.path.isdir(destination):
                    shutil.rmtree(destination)
                os.replace(os.path.join(scratch, name), destination)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return [os.path.join(directory, name) for name in names]
