"""A replica's restore reads only its rows: the peak of what it allocates while restoring a table much larger
than its share stays within 1.25x its rows + slots plus a fixed buffer (two chunks), whatever the layout the checkpoint
was written in (whole in id order, `div` row slices, a `mod` job's slices of another host count), and the
restored table is the saved one, bit for bit."""

import json
import os

import numpy as np
import pytest

from tpu_embedding_shim.checkpoints.program_checkpoint import FORMAT, FORMAT_VERSION, METADATA
from tpu_embedding_shim.checkpoints.state import DenseState
from tpu_embedding_shim.checkpoints.tf_names import to_mod_layout
from tpu_embedding_shim.engine import shard_sizes
from tpu_embedding_shim.engine.tf_bundle import FULL, ROW_BUFFER, BundleReader, SlicedTensor, data_file, write_bundle

from .launch import HERE, requires_mpi, run_program

pytestmark = requires_mpi

PROGRAM = HERE / "restore_memory_program.py"
VOCABULARY, DIM = 600_000, 16  # rows + Adagrad slots: 76.8 MB whole


def write_checkpoint(prefix, layout, hosts):
    """The runner's checkpoint of table 't' (and its Adagrad slot) with random values, stored whole or as
    `hosts` row slices (`div`: id order; `mod`: the hosts' order); returns the arrays in id order."""
    rng = np.random.default_rng(hosts)
    arrays = {
        "t": rng.standard_normal((VOCABULARY, DIM)).astype(np.float32),
        "t/Adagrad": rng.random((VOCABULARY, DIM)).astype(np.float32),
    }
    tensors = {}
    for name, value in arrays.items():
        stored = to_mod_layout(value, hosts) if layout == "mod" else value
        if layout == "whole":
            tensors[name] = stored
            continue
        parts, start = [], 0
        for size in shard_sizes(VOCABULARY, hosts, layout):
            parts.append((((start, size), (0, FULL)), stored[start : start + size]))
            start += size
        tensors[name] = SlicedTensor(value.shape, parts)
    dense, structure = DenseState().to_tensors()
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "global_step": 7,
        "tables": {"t": {"name": "t", "certainty": 3}},
        "dense_state": structure,
    }
    if layout == "mod":
        meta["mod_hosts"] = hosts
    tensors.update(dense, global_step=np.int64(7))
    tensors[METADATA] = np.array(json.dumps(meta).encode("utf-8"), dtype=object)
    write_bundle(prefix, tensors, num_shards=max(hosts, 1))
    return arrays


@pytest.mark.parametrize(
    "world_size, layout, hosts, strategy",
    [(2, "whole", 1, "div"), (2, "div", 3, "div"), (3, "mod", 2, "mod"), (2, "mod", 2, "mod"), (3, "whole", 1, "mod")],
)
def test_a_replica_reads_only_its_rows(tmp_path, world_size, layout, hosts, strategy):
    prefix = str(tmp_path / "model.ckpt-7")
    saved = write_checkpoint(prefix, layout, hosts)
    out = str(tmp_path / "out")
    run_program(world_size, PROGRAM, prefix, VOCABULARY, DIM, strategy, out)
    restored = np.load(out + ".npz")
    assert restored["embedding"].tobytes() == saved["t"].tobytes()
    assert restored["accumulators"].tobytes() == saved["t/Adagrad"].tobytes()
    whole = sum(a.nbytes for a in saved.values())
    for rank in range(world_size):
        record = json.loads(open(f"{out}.{rank}.json").read())
        assert record["step"] == 7
        assert record["share"] <= whole / world_size + 2 * DIM * 4 * 2
        # the rows and slots, where their ids are stored, and one chunk buffer with what is copied out of it
        assert record["peak"] <= 1.25 * record["share"] + 2 * ROW_BUFFER, (rank, record)
        assert record["peak"] < whole / world_size + whole / 4  # its share, never near the whole table
    assert not any(name.endswith(".tempstate") for name in os.listdir(tmp_path))


def test_a_corrupt_slice_read_by_one_replica_fails_the_restore_on_every_replica(tmp_path):
    """Replica 1 alone reads the second `div` slice: its CRC error raises there, `PeerFailedError` on replica
    0, and no replica changes a row or its step."""
    prefix = str(tmp_path / "model.ckpt-7")
    write_checkpoint(prefix, "div", 2)
    entry = BundleReader(prefix).slice_entry("t", ((VOCABULARY // 2, VOCABULARY // 2), (0, FULL)))
    path = data_file(prefix, entry.shard_id, 2)
    with open(path, "r+b") as handle:
        handle.seek(entry.offset + entry.size - 1)
        last = handle.read(1)
        handle.seek(entry.offset + entry.size - 1)
        handle.write(bytes([last[0] ^ 1]))
    out = str(tmp_path / "out")
    run_program(2, PROGRAM, prefix, VOCABULARY, DIM, "div", out)
    records = [json.loads(open(f"{out}.{rank}.json").read()) for rank in range(2)]
    assert records[1]["error"].startswith("DataLossError: ") and "checksum does not match" in records[1]["error"]
    assert records[0]["error"].startswith("PeerFailedError: ") and "Rank 1 failed" in records[0]["error"]
    assert all(record["unchanged"] and record["step"] == 0 for record in records)
