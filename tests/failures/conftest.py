"""Helpers of the failure suite: checkpoints whose files lie, made small and CRC-valid."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tpu_embedding_shim.engine.tf_bundle import BundleEntry, BundleReader, write_bundle
from tpu_embedding_shim.engine.tf_bundle.ordered_code import slice_key
from tpu_embedding_shim.engine.tf_bundle.table import build_table, read_table


def snapshot(directory: str) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under `directory`, with file contents, to assert that nothing changed."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), directory) + "/"] = (0, None)
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as file:
                    out[os.path.relpath(path, directory)] = (os.path.getsize(path), file.read())
            else:
                out[os.path.relpath(path, directory)] = (-1, None)
    return out


def rewrite_index(prefix: str, change) -> None:
    """Rewrites `<prefix>.index` with `change(key, entry) -> entry | None` applied to every tensor entry
    (None keeps it); the new index is CRC-valid, so only the reader's own checks can catch the lie."""
    path = prefix + ".index"
    with open(path, "rb") as file:
        pairs = read_table(file.read(), path)
    out = [pairs[0]]
    for key, value in pairs[1:]:
        entry = BundleEntry.decode(value)
        new = change(key, entry)
        out.append((key, (new or entry).encode()))
    with open(path, "wb") as file:
        file.write(build_table(out))


@pytest.fixture
def small_bundle(tmp_path):
    """A checkpoint with a float table, a partitioned table and a string tensor."""
    from tpu_embedding_shim.engine.tf_bundle import SlicedTensor

    prefix = str(tmp_path / "model.ckpt-1")
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    write_bundle(
        prefix,
        {
            "w": table,
            "parts": SlicedTensor((4, 2), [(((0, 2), (0, -1)), table[:2]), (((2, 2), (0, -1)), table[2:])]),
            "names": np.array([b"a", b"bc"], dtype=object),
        },
    )
    assert BundleReader(prefix).read("parts").tolist() == table.tolist()
    return prefix


__all__ = ["snapshot", "rewrite_index", "slice_key"]
