"""Smoke test of the benchmark harness: it builds, checks agreement and reports. No timing is asserted."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks import bandwidth
from benchmarks.run import main, run_variant
from benchmarks.variants import QUICK, VARIANTS, quick
from benchmarks.workload import OPTIMIZERS, engine_spec, num_slots, optimizer_spec

NEW_OPTIMIZERS = ("ftrl", "momentum", "rmsprop", "proximal-adagrad", "adagrad-momentum", "adam-nonlazy")


def _tiny(name):
    return dataclasses.replace(
        quick(VARIANTS[name]), vocab=tuple(min(v, 300) for v in quick(VARIANTS[name]).vocab), batch=16, dim=4
    )


def _quiet(s):
    pass


def test_one_variant_runs_and_every_implementation_agrees():
    result = run_variant(_tiny("main-zipf"), rounds=1, allowed=["numpy"], log=_quiet)
    assert set(result["impls"]) == {"engine", "numpy"}
    assert not result["disagree"]
    assert result["impls"]["engine"]["table_max_diff"] is not None
    assert result["impls"]["engine"]["back_to_back_ms"] > 0  # the engine's steps again, like the bound: back to back
    assert "back_to_back_ms" not in result["impls"]["numpy"]


def test_sequence_and_adam_variants_run():
    for name in ("sequence", "adam-lazy", "weighted"):
        result = run_variant(_tiny(name), rounds=1, allowed=["numpy"], log=_quiet)
        assert not result["disagree"], (name, result["disagree"])


def test_every_optimizer_has_a_variant_and_its_slots_come_from_the_spec():
    for optimizer in OPTIMIZERS:
        w = dataclasses.replace(VARIANTS["main-uniform"], optimizer=optimizer)
        assert num_slots(w) == len(optimizer_spec(w).slot_initial_values())
    assert {VARIANTS[name].optimizer for name in NEW_OPTIMIZERS} == set(NEW_OPTIMIZERS)
    assert num_slots(VARIANTS["ftrl"]) == 2 and num_slots(VARIANTS["sgd"]) == 0
    assert num_slots(VARIANTS["fwd-v1m"]) == 0


@pytest.mark.parametrize("name", NEW_OPTIMIZERS)
def test_optimizer_variants_agree_with_the_reference(name):
    result = run_variant(_tiny(name), rounds=1, allowed=["numpy"], log=_quiet)
    assert set(result["impls"]) == {"engine", "numpy"}, result["skipped"]
    assert not result["disagree"], result["disagree"]


def test_sharded_variants_store_shards_and_show_them():
    for name, strategy in (("shards8-div", "div"), ("shards8-mod", "mod")):
        w = VARIANTS[name]
        spec = engine_spec(w)
        assert (spec.num_shards, spec.partition_strategy) == (8, strategy)
        assert f"8 shards {strategy}" in w.describe()
    assert "shards" not in VARIANTS["main-uniform"].describe()


@pytest.mark.parametrize("name", ["ftrl", "shards8-mod"])
def test_new_variants_at_quick_size(name):
    result = run_variant(quick(VARIANTS[name]), rounds=1, allowed=["numpy"], log=_quiet)
    assert set(result["impls"]) == {"engine", "numpy"}
    assert not result["disagree"], result["disagree"]
    assert result["impls"]["engine"]["table_max_diff"] is not None
    if VARIANTS[name].num_shards > 1:
        assert "one shard" in result["truth"]  # the sharded engine is checked against one-shard storage
    if bandwidth.available():
        bound = result["bound"]
        assert bound["update"] == "rows" and bound["repeats"] >= 1
        assert bound["bound_ms"] > 0 and bound["same_ids"]["bound_ms"] > 0


def test_nonlazy_adam_bound_is_the_full_table():
    if not bandwidth.available():
        pytest.skip("the bound needs numba: the `fast` extra, pip install -e '.[fast]'")
    result = run_variant(_tiny("adam-nonlazy"), rounds=1, allowed=[], log=_quiet)
    assert result["bound"]["update"] == "table" and result["bound"]["rmw_ms"] > 0


def test_torch_runs_nonlazy_adam_and_says_why_not_ftrl():
    pytest.importorskip("torch", reason="the peers need torch: the `bench` extra, pip install -e '.[bench]'")
    result = run_variant(_tiny("adam-nonlazy"), rounds=1, allowed=["torch"], log=_quiet)
    assert "torch" in result["impls"] and not result["disagree"], result["disagree"]
    result = run_variant(_tiny("ftrl"), rounds=1, allowed=["torch"], log=_quiet)
    assert "FTRL" in result["skipped"]["torch"]


def test_quick_command_prints_a_table(capsys):
    code = main(
        [
            "--quick",
            "--in-process",
            "--rounds",
            "1",
            "--no-cold-start",
            "--peers",
            "numpy",
            "--variants",
            "main-uniform",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| main-uniform |" in out and "Machine:" in out
    if bandwidth.available():
        assert "the old bound" in out and "prefetching gather" in out
    assert set(QUICK) <= set(VARIANTS)
