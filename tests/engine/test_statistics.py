"""Lookup statistics: file naming, hand-computed numbers, sampling, merging, atomic writes."""

import json
import os

import numpy as np
import pytest

from tpu_embedding_shim.engine import statistics as stats_module
from tpu_embedding_shim.engine.statistics import LookupStatistics, read_statistics, table_parameters
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, TableSpec


def make_spec(*, num_shards=2, partition_strategy="div", vocab=100, extra_feature=False, name="users"):
    tables = (TableSpec(name=name, vocabulary_size=vocab, dim=8), TableSpec(name="items", vocabulary_size=50, dim=4))
    features = [
        FeatureSpec(name="user", table=name, num_buckets=vocab),
        FeatureSpec(name="item", table="items", num_buckets=50),
    ]
    if extra_feature:
        features.append(FeatureSpec(name="friend", table=name, num_buckets=vocab))
    return EmbeddingSpec(
        tables=tables, features=tuple(features), num_shards=num_shards, partition_strategy=partition_strategy
    )


def step_inputs(ids_per_example=(2, 0, 3, 1), unique=(1, 5, 5, 9), load=(4, 2)):
    return dict(ids_per_example=np.array(ids_per_example), unique_ids=np.array(unique), shard_load=np.array(load))


# File names ----------------------------------------------------------------------


def test_file_name_is_deterministic_and_hashes_parameters():
    spec = make_spec()
    table = spec.table("users")
    name = LookupStatistics.file_name(table, spec)
    assert name == LookupStatistics.file_name(table, make_spec())
    assert name.startswith("users-") and name.endswith(".json") and len(name) == len("users-") + 16 + 5
    different = [
        make_spec(num_shards=4),
        make_spec(partition_strategy="mod"),
        make_spec(vocab=101),
        make_spec(extra_feature=True),
    ]
    names = {LookupStatistics.file_name(s.table("users"), s) for s in different}
    assert len(names) == 4 and name not in names
    assert LookupStatistics.file_name(spec.table("items"), spec) != name


def test_file_name_ignores_unrelated_settings():
    """Only the table's parameters and the sharding go into the hash: an optimizer change shares the file."""
    from tpu_embedding_shim.spec import AdagradSpec

    spec = make_spec()
    other = EmbeddingSpec(
        tables=spec.tables,
        features=spec.features,
        num_shards=2,
        optimizer=AdagradSpec(learning_rate=0.5),
        pipeline_execution_with_tensor_core=True,
    )
    assert LookupStatistics.file_name(spec.table("users"), spec) == LookupStatistics.file_name(
        other.table("users"), other
    )


@pytest.mark.parametrize("name", ["towers/user id", "..", "ünï", "a" * 200])
def test_odd_table_names_give_safe_file_names(tmp_path, name):
    spec = make_spec(name=name)
    file_name = LookupStatistics.file_name(spec.table(name), spec)
    assert "/" not in file_name and not file_name.startswith(".") and len(file_name) < 80
    stats = LookupStatistics(str(tmp_path), spec)
    stats.record(name, **step_inputs())
    [path] = stats.flush()
    assert os.path.dirname(path) == str(tmp_path)
    assert read_statistics(path)["table"] == name


# Numbers ---------------------------------------------------------------------------


def test_numbers_for_a_hand_made_input(tmp_path):
    spec = make_spec()
    stats = LookupStatistics(str(tmp_path), spec, sample_rate=1.0)
    stats.record("users", **step_inputs(ids_per_example=(2, 0, 3, 1), unique=(1, 5, 5, 9), load=(4, 2)))
    stats.record("users", **step_inputs(ids_per_example=(4, 4), unique=(7,), load=(0, 8)))
    [path] = stats.flush()
    assert os.path.basename(path) == LookupStatistics.file_name(spec.table("users"), spec)
    data = read_statistics(path)
    # 6 examples, 14 ids; unique per step: 3 and 1; shard totals 4 and 10.
    assert data["table"] == "users"
    assert (
        data["parameters"]
        == table_parameters(spec.table("users"), spec)
        == {
            "table": "users",
            "vocabulary_size": 100,
            "dim": 8,
            "num_features": 1,
            "partition_strategy": "div",
            "num_shards": 2,
        }
    )
    assert data["sample_rate"] == 1.0
    assert data["steps_seen"] == 2 and data["steps_sampled"] == 2
    assert data["examples_sampled"] == 6
    assert data["total_ids_sampled"] == 14
    assert data["mean_ids_per_example"] == pytest.approx(14 / 6)
    assert data["max_ids_per_example"] == 4
    assert data["total_unique_ids_sampled"] == 4
    assert data["mean_unique_ids_per_step"] == 2.0
    assert data["shard_load"] == [4, 10]
    assert data["shard_load_imbalance"] == pytest.approx(10 / 7)


def test_file_is_readable_json(tmp_path):
    stats = LookupStatistics(str(tmp_path), make_spec())
    stats.record("users", **step_inputs())
    [path] = stats.flush()
    text = open(path).read()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_float_loads_and_no_load(tmp_path):
    stats = LookupStatistics(str(tmp_path), make_spec(), sample_rate=1.0)
    stats.record("users", **step_inputs(ids_per_example=(0, 0), unique=(), load=(0.0, 0.0)))
    data = read_statistics(stats.flush()[0])
    assert data["shard_load"] == [0, 0] and data["shard_load_imbalance"] is None
    assert data["mean_ids_per_example"] == 0.0 and data["mean_unique_ids_per_step"] == 0.0
    stats.record("users", **step_inputs(load=(1.5, 0.5)))
    assert read_statistics(stats.flush()[0])["shard_load"] == [1.5, 0.5]


def test_only_recorded_tables_are_written_and_flush_clears(tmp_path):
    spec = make_spec()
    stats = LookupStatistics(str(tmp_path / "profile"), spec)
    assert stats.flush() == []
    assert not (tmp_path / "profile").exists()
    stats.record("items", **step_inputs())
    [path] = stats.flush()
    assert path == stats.path("items")
    assert stats.flush() == []  # nothing new: nothing counted twice
    assert read_statistics(path)["steps_seen"] == 1


# Sampling ------------------------------------------------------------------------


def test_first_step_is_always_sampled(tmp_path):
    stats = LookupStatistics(str(tmp_path), make_spec(), sample_rate=1e-9)
    for _ in range(50):
        stats.record("users", **step_inputs())
    data = read_statistics(stats.flush()[0])
    assert data["steps_seen"] == 50 and data["steps_sampled"] == 1 and data["examples_sampled"] == 4


def test_sampling_rate_is_respected_and_seeded(tmp_path):
    def run(seed, directory):
        stats = LookupStatistics(str(directory), make_spec(), sample_rate=0.03, seed=seed)
        inputs = step_inputs()
        for _ in range(20_000):
            stats.record("users", **inputs)
        return read_statistics(stats.flush()[0])

    first = run(0, tmp_path / "a")
    assert first["steps_seen"] == 20_000
    # Binomial(20000, 0.03): mean 600, sd ~24; allow 5 sd.
    assert abs(first["steps_sampled"] - 600) < 120, first["steps_sampled"]
    assert first["examples_sampled"] == 4 * first["steps_sampled"]
    assert run(0, tmp_path / "b")["steps_sampled"] == first["steps_sampled"]  # same seed, same samples
    assert run(1, tmp_path / "c")["steps_sampled"] != first["steps_sampled"]


def test_will_sample_foretells_each_records_draw_without_taking_it(tmp_path):
    """The processes of mpiexec ask before they gather a step's counts: asking changes nothing."""
    asked = LookupStatistics(str(tmp_path / "asked"), make_spec(), sample_rate=0.3, seed=4)
    plain = LookupStatistics(str(tmp_path / "plain"), make_spec(), sample_rate=0.3, seed=4)
    foretold = []
    for _ in range(200):
        foretold.append(asked.will_sample("users") and asked.will_sample("users"))
        asked.record("users", **step_inputs())
        plain.record("users", **step_inputs())
    asked_data, plain_data = read_statistics(asked.flush()[0]), read_statistics(plain.flush()[0])
    assert asked_data["steps_sampled"] == plain_data["steps_sampled"] == sum(foretold)
    assert foretold[0] and 20 < sum(foretold) < 120  # the first step always; about 30% of the rest


def test_a_tables_samples_do_not_depend_on_other_tables(tmp_path):
    def sampled(record_items):
        stats = LookupStatistics(str(tmp_path / str(record_items)), make_spec(), sample_rate=0.2, seed=3)
        for _ in range(300):
            stats.record("users", **step_inputs())
            if record_items:
                stats.record("items", **step_inputs())
        stats.flush()
        return read_statistics(stats.path("users"))["steps_sampled"]

    assert sampled(True) == sampled(False)


# Merging -------------------------------------------------------------------------


def test_two_runs_merge_by_adding_counts(tmp_path):
    spec = make_spec()
    first = LookupStatistics(str(tmp_path), spec, sample_rate=1.0)
    first.record("users", **step_inputs(ids_per_example=(2, 0, 3, 1), unique=(1, 5), load=(4, 2)))
    [path] = first.flush()
    second = LookupStatistics(str(tmp_path), spec, sample_rate=1.0, seed=7)
    second.record("users", **step_inputs(ids_per_example=(9,), unique=(3, 4, 6), load=(1, 8)))
    second.record("users", **step_inputs(ids_per_example=(1, 1), unique=(3,), load=(1, 1)))
    assert second.flush() == [path]
    data = read_statistics(path)
    assert data["steps_seen"] == 3 and data["steps_sampled"] == 3
    assert data["examples_sampled"] == 7
    assert data["total_ids_sampled"] == 17
    assert data["mean_ids_per_example"] == pytest.approx(17 / 7)
    assert data["max_ids_per_example"] == 9
    assert data["mean_unique_ids_per_step"] == pytest.approx(6 / 3)
    assert data["shard_load"] == [6, 11]
    assert data["shard_load_imbalance"] == pytest.approx(11 / 8.5)


def test_different_sharding_writes_a_different_file(tmp_path):
    for num_shards in (2, 3):
        stats = LookupStatistics(str(tmp_path), make_spec(num_shards=num_shards))
        stats.record("users", **step_inputs(load=(1,) * num_shards))
        stats.flush()
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".json")]) == 2


def test_a_foreign_or_corrupt_file_is_reported_not_overwritten(tmp_path):
    spec = make_spec()
    stats = LookupStatistics(str(tmp_path), spec)
    path = stats.path("users")
    os.makedirs(tmp_path, exist_ok=True)
    open(path, "w").write("{ not json")
    stats.record("users", **step_inputs())
    with pytest.raises(ValueError, match="not valid JSON"):
        stats.flush()
    assert open(path).read() == "{ not json"
    json.dump({"format": stats_module.FORMAT, "parameters": {"table": "other"}}, open(path, "w"))
    with pytest.raises(ValueError, match="not written for these parameters"):
        stats.flush()


# Atomic writes ---------------------------------------------------------------------


def test_write_is_atomic_no_partial_file_on_error(tmp_path, monkeypatch):
    spec = make_spec()
    stats = LookupStatistics(str(tmp_path), spec, sample_rate=1.0)
    stats.record("users", **step_inputs())
    [path] = stats.flush()
    before = open(path).read()

    stats.record("users", **step_inputs())

    def broken_replace(src, dst):
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="simulated"):
        stats.flush()
    monkeypatch.undo()
    assert open(path).read() == before  # old file intact
    leftovers = [f for f in os.listdir(tmp_path) if f not in (os.path.basename(path), ".lookup_statistics.lock")]
    assert leftovers == []  # the temporary file is gone too
    # The counts were kept and land on the next successful flush.
    stats.flush()
    assert read_statistics(path)["steps_seen"] == 2


def test_error_while_writing_contents_leaves_nothing(tmp_path, monkeypatch):
    stats = LookupStatistics(str(tmp_path), make_spec())
    stats.record("users", **step_inputs())

    def broken_dumps(*args, **kwargs):
        raise ValueError("cannot encode")

    monkeypatch.setattr(stats_module.json, "dumps", broken_dumps)
    with pytest.raises(ValueError, match="cannot encode"):
        stats.flush()
    monkeypatch.undo()
    assert [f for f in os.listdir(tmp_path) if not f.startswith(".lookup_statistics.lock")] == []


# Validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"sample_rate": 0.0}, ValueError, "sample_rate"),
        ({"sample_rate": 1.5}, ValueError, "sample_rate"),
        ({"sample_rate": "3%"}, TypeError, "sample_rate"),
    ],
)
def test_bad_constructor_arguments(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        LookupStatistics(str(tmp_path), make_spec(), **kwargs)


def test_bad_constructor_types(tmp_path):
    with pytest.raises(TypeError, match="spec"):
        LookupStatistics(str(tmp_path), {"tables": []})
    with pytest.raises(TypeError, match="directory"):
        LookupStatistics(None, make_spec())


@pytest.mark.parametrize(
    "table, inputs, match",
    [
        ("nope", step_inputs(), "table"),
        ("users", step_inputs(load=(1, 2, 3)), r"shard_load.*shape \(2,\)"),
        ("users", dict(step_inputs(), ids_per_example=np.ones((2, 2), int)), "ids_per_example"),
        ("users", dict(step_inputs(), ids_per_example=np.array([1.5])), "ids_per_example"),
        ("users", dict(step_inputs(), unique_ids=np.array([0.5])), "unique_ids"),
        ("users", step_inputs(ids_per_example=(-1, 2)), "non-negative"),
        ("users", step_inputs(load=(-1, 2)), "non-negative"),
    ],
)
def test_bad_record_arguments(tmp_path, table, inputs, match):
    stats = LookupStatistics(str(tmp_path), make_spec(), sample_rate=1.0)
    with pytest.raises(ValueError, match=match):
        stats.record(table, **inputs)
