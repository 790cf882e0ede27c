"""A SparseCore checkpoint that TensorFlow 2.21 wrote (its stacker's layouts, its adapter's stacked tables, saved
as a TPU job saves them: a row slice per chip) migrates to every target with the original tables and slots, bit
for bit (tests/fixtures/tf_checkpoints/make_sparsecore_fixture.py made it)."""

from pathlib import Path

import numpy as np
import pytest

from tpu_embedding_shim.checkpoints.sparsecore import read_sparsecore
from tpu_embedding_shim.engine.tf_bundle import BundleReader
from tpu_embedding_shim.migrate import TARGETS, load_source, migrate
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tf_checkpoints" / "sparsecore_adagrad"
TABLES = {"movies": (100, 8), "users": (37, 5), "tags": (50, 16)}
SPEC = EmbeddingSpec(
    tables=tuple(TableSpec(name=n, vocabulary_size=rows, dim=dim) for n, (rows, dim) in TABLES.items()),
    features=tuple(FeatureSpec(name=f"f_{n}", table=n, num_buckets=rows) for n, (rows, _) in TABLES.items()),
    optimizer=AdagradSpec(learning_rate=0.1),
)


def original():
    arrays = np.load(FIXTURE / "original.npz")
    return {key.replace("|", "/"): arrays[key] for key in arrays.files}


def test_the_fixture_is_stacked_and_sliced_as_a_tpu_saves_it():
    reader = BundleReader(str(FIXTURE / "ckpt-1"))
    stacked = [n for n in reader.names() if n.startswith("embedding/") and "_sparse_core" not in n]
    assert sorted(stacked) == [  # 'tags' is 16 wide: a stack of its own
        "embedding/movies_users.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE",
        "embedding/movies_users/.ATTRIBUTES/VARIABLE_VALUE",
        "embedding/tags.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE",
        "embedding/tags/.ATTRIBUTES/VARIABLE_VALUE",
    ]
    assert len(reader.entry(stacked[0]).slices) == 2  # one row slice per chip


def test_it_reads_back_to_the_original_tables_bit_for_bit():
    tables = read_sparsecore(str(FIXTURE / "ckpt-1"))
    expected = original()
    assert sorted(f"{t}/{w}" for t, arrays in tables.items() for w in arrays) == sorted(expected)
    for key, values in expected.items():
        table, what = key.split("/")
        assert tables[table][what].tobytes() == values.tobytes(), key
    source = load_source(SPEC, str(FIXTURE))  # the directory: its latest checkpoint
    assert all(source.state[k.split("/")[0]][k.split("/")[1]].tobytes() == v.tobytes() for k, v in expected.items())


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_it_migrates_to_every_target_with_its_tables(target):
    migration = migrate(target, SPEC, str(FIXTURE / "ckpt-1"), allow_lossy=True)
    weights = list(migration.weights.values())
    for key, values in original().items():
        rows, dim = values.shape  # a target may pad columns (TorchRec: to a multiple of 4)
        found = [w for w in weights if w.shape[0] == rows and w.shape[1] >= dim and np.array_equal(w[:, :dim], values)]
        assert found, f"{target}: {key} is not among the migrated weights"
