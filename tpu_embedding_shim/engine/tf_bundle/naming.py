"""The files of a checkpoint with prefix P: `P.index` and `P.data-<k>-of-<n>` (5 digits each).

>>> data_file("run/model.ckpt-3", 0, 1)
'run/model.ckpt-3.data-00000-of-00001'
"""

from __future__ import annotations

import glob
import os
import re

__all__ = ["index_file", "data_file", "data_files", "is_bundle", "index_suffix_hint", "newest_complete"]


def index_file(prefix: str) -> str:
    return f"{prefix}.index"


def data_file(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def data_files(prefix: str) -> list[str]:
    """Every `P.data-*-of-*` file on disk, of any shard count (debris of an earlier save included)."""
    pattern = re.compile(re.escape(os.path.basename(prefix)) + r"\.data-\d{5}-of-\d{5}$")
    found = glob.glob(glob.escape(prefix) + ".data-*-of-*")
    return sorted(path for path in found if pattern.match(os.path.basename(path)))


def is_bundle(prefix: str) -> bool:
    """True when `prefix` names a tensor-bundle checkpoint (its `.index` exists).

    Anything at that name counts, as for TensorFlow's file matching: a
    directory or a FIFO there is then reported by `BundleReader` as what it
    is, not as a missing checkpoint.
    """
    return os.path.exists(index_file(prefix))


def index_suffix_hint(path: str) -> str:
    """For a `path` that names a checkpoint's `.index` file, the hint " Pass the prefix without '.index': ...";
    else ''."""
    prefix = path[: -len(".index")]
    if path.endswith(".index") and is_bundle(prefix):
        return f" Pass the prefix without '.index': {prefix!r}."
    return ""


def newest_complete(directory: str, basename: str) -> str | None:
    """The complete checkpoint `<directory>/<basename>-<n>` (its index and data files there) of highest n, or None.

    What a reader falls back to when a checkpoint state file is missing, empty,
    or names a checkpoint that is not there (an interrupted save, a hand edit).
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    pattern = re.compile(re.escape(basename) + r"-(\d+)(\.index)?")
    numbers = {int(match.group(1)) for match in map(pattern.fullmatch, names) if match}
    for number in sorted(numbers, reverse=True):
        path = os.path.join(directory, f"{basename}-{number}")
        if is_bundle(path):
            return path
    return None
